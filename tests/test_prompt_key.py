"""Which turns share a forward depends on the prompts' content only, never on the
encoder's image cache (an `LruCache`): the same with a fresh cache, a full one, and after
an eviction re-encoded an image into a new array (as after a resume, or late in a long run)."""

import numpy as np
import pytest
from transformers import AutoProcessor

from rlkit.env.maze_env import EnvConfig, prompt_messages
from rlkit.maze.sets import pinned_spec
from rlkit.model.batching import distinct, image_digest, prompt_key
from rlkit.model.build import build_tiny
from rlkit.model.chat import ChatEncoder
from rlkit.train.learner import TurnSample
from rlkit.train.warmstart import bc_states


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    return AutoProcessor.from_pretrained(build_tiny(tmp_path_factory.mktemp("pk") / "tiny"))


def _turns(encoder: ChatEncoder, states) -> list[TurnSample]:
    """One training row per state; states repeat, as the episodes of a maze repeat prompts."""
    return [
        TurnSample(encoder.encode(prompt_messages(s, EnvConfig())), [0], [0.0], 0.0, i // 3)
        for i, s in enumerate(states)
    ]


def test_image_digest_is_content_not_identity():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert image_digest(a) == image_digest(a.copy()) == image_digest(a)
    assert image_digest(a) != image_digest(a + 1) != image_digest(a.reshape(4, 3))


def test_grouping_is_the_same_with_a_fresh_a_full_and_an_evicting_cache(processor):
    pairs = bc_states(pinned_spec("test"), 0, 12, 3, seed=0)
    states = [p[0] for p in pairs] * 2  # each prompt twice: pairs of turns share a forward
    fresh = _turns(ChatEncoder(processor), states)
    # a cache of 2 images: most images are evicted and re-encoded into new arrays
    evicting = ChatEncoder(processor, cache_size=2)
    small = _turns(evicting, states)
    assert any(
        a.prompt.images[0][0] is not b.prompt.images[0][0]
        for a, b in zip(small[:12], small[12:], strict=True)
    ), "the check needs re-encoded images"
    # a full cache: filled with other mazes' images first
    full = ChatEncoder(processor, cache_size=16)
    _turns(full, [p[0] for p in bc_states(pinned_spec("test"), 5, 16, 3, seed=1)])
    crowded = _turns(full, states)
    keys = [[prompt_key(x.prompt) for x in rows] for rows in (fresh, small, crowded)]
    assert keys[0] == keys[1] == keys[2]
    assert distinct(keys[0])[0] == list(range(len(set(keys[0]))))  # 12 distinct, then repeats


def test_the_cache_forgets_the_least_recently_used_entry():
    from rlkit.model.chat import LruCache

    cache = LruCache(2)
    cache.put("a", 1), cache.put("b", 2)
    assert cache.get("a") == 1  # a hit makes "a" the most recent
    cache.put("c", 3)
    assert list(cache) == ["a", "c"] and cache.get("b") is None and cache.get("b", 0) == 0
