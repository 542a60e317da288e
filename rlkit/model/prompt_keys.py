"""Which model rows are the same prompt (ids and image contents), so turns that repeat a prompt
share one forward and a minibatch: docs/models-and-engines.md#where-an-answer-names-its-move-modelaction_tagpy-modelprompt_keyspy."""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Hashable, Sequence

import numpy as np
import torch

from rlkit.model.chat import Encoded

_DIGESTS: dict[int, tuple[weakref.ref, bytes]] = {}
"""id(array) -> (a weak reference to it, its digest): each array hashed once while it lives (the
reference tells a live array from a dead one whose id was reused)."""


def image_digest(patches: np.ndarray) -> bytes:
    """A digest of an image's patch values, shape and dtype: equal content, equal digest,
    whichever array object holds it."""
    key = id(patches)
    hit = _DIGESTS.get(key)
    if hit is not None and hit[0]() is patches:
        return hit[1]
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{patches.dtype}{patches.shape}".encode())
    h.update(np.ascontiguousarray(patches).tobytes())
    digest = h.digest()
    try:
        ref = weakref.ref(patches, lambda _, k=key: _DIGESTS.pop(k, None))
    except TypeError:  # an array view without weakref support: hashed every time
        return digest
    _DIGESTS[key] = (ref, digest)
    return digest


def prompt_key(prompt: Encoded) -> tuple:
    """A prompt's identity: its ids and its images' contents (`image_digest`), whatever the
    encoder's cache holds."""
    return tuple(prompt.prompt_ids), tuple(image_digest(p) for p, _ in prompt.images)


def distinct(keys: Sequence[Hashable]) -> tuple[list[int], torch.Tensor]:
    """The first row of each distinct key (in order of appearance) and, for every row, the
    index of its key among those: rows == [rows[i] for i in index] up to equal keys."""
    slots: dict[Hashable, int] = {}
    first, index = [], []
    for row, key in enumerate(keys):
        if key not in slots:
            slots[key] = len(first)
            first.append(row)
        index.append(slots[key])
    return first, torch.tensor(index, dtype=torch.long)
