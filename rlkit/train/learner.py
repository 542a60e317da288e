"""The policy the warm start and GRPO train (`Learner`), one row of a GRPO update (`TurnSample`)
and its `minibatch_loss`; the GRPO phase's start policy (RUN/reference_policy)."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from rlkit.errors import RlkitError
from rlkit.model.batching import AnswerSpec, turn_logprobs
from rlkit.model.chat import Encoded
from rlkit.model.load import LoadedModel, fast_vision, no_progress_bars
from rlkit.recipe import Recipe
from rlkit.train.policy_losses import PolicyLoss, policy_loss


@dataclass
class Learner:
    """The policy being trained and what its loss needs."""

    loaded: LoadedModel
    opt: torch.optim.Optimizer
    answer: AnswerSpec | None = None
    """Set in constrained mode: the policy chose only the move word's token."""
    ref: LoadedModel | None = None
    """The frozen reference policy of the KL term (None when the recipe has no KL in the loss)."""
    temperature: float = 1.0
    """The rollout's sampling temperature, which logprobs use too."""


@dataclass
class TurnSample:
    """One training row: a turn's prompt, the model's reply and the episode's advantage."""

    prompt: Encoded
    response_ids: list[int]
    old_logprobs: list[float]
    """Per response token, log pi_old as recorded while sampling."""
    advantage: float
    episode: int
    """Index of its episode in the rollout batch (its sequence in the reductions)."""
    ref_logprobs: list[float] | None = None
    """Per response token, log pi_ref (`with_reference`); None: not computed."""


@dataclass(frozen=True)
class MinibatchLoss:
    out: PolicyLoss
    entropy: torch.Tensor
    """(B, R) per-token entropy of the policy."""
    mask: torch.Tensor
    """(B, R) 1 on the tokens that carry loss."""


def minibatch_loss(learner: Learner, mb: Sequence[TurnSample], recipe: Recipe) -> MinibatchLoss:
    """The GRPO loss of `mb` under the learner's current weights (differentiable)."""
    answer = learner.answer
    logp, entropy, mask = row_logprobs(learner.loaded, learner, mb)
    old = _rows(logp, [x.old_logprobs for x in mb])
    mask = mask.float()
    if answer is not None:  # constrained: only the move word was chosen by the policy
        mask = torch.zeros_like(mask)
        mask[:, answer.choice_pos] = 1.0
    ref = None
    if learner.ref is not None and all(x.ref_logprobs is not None for x in mb):
        ref = _rows(logp, [x.ref_logprobs for x in mb])
    elif learner.ref is not None:
        with torch.no_grad():
            ref, _, _ = row_logprobs(learner.ref, learner, mb)
    out = policy_loss(
        logp,
        old,
        torch.tensor([x.advantage for x in mb]),
        mask,
        recipe,
        seq_ids=torch.tensor([x.episode for x in mb]),
        ref_logprobs=ref,
        entropy=entropy,
    )
    return MinibatchLoss(out, entropy, mask)


def with_reference(learner: Learner, samples: Sequence[TurnSample], size: int) -> list[TurnSample]:
    """`samples` with `ref_logprobs` from the frozen reference (if any), in passes of `size`."""
    if learner.ref is None:
        return list(samples)
    out: list[TurnSample] = []
    for lo in range(0, len(samples), size):
        chunk = samples[lo : lo + size]
        with torch.no_grad():
            ref, _, _ = row_logprobs(learner.ref, learner, chunk)
        for x, row in zip(chunk, ref.tolist(), strict=True):
            out.append(replace(x, ref_logprobs=row[: len(x.response_ids)]))
    return out


def row_logprobs(
    model: LoadedModel, learner: Learner, rows: Sequence[TurnSample]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logprobs, entropy, response mask), each (B, R), of the rows' replies under `model`."""
    return turn_logprobs(
        model,
        [x.prompt for x in rows],
        [x.response_ids for x in rows],
        temperature=learner.temperature,
        answer=learner.answer,
    )


def _rows(like: torch.Tensor, values: Sequence[Sequence[float]]) -> torch.Tensor:
    """Per-row token values as a zero-padded tensor shaped like `like` (B, R)."""
    out = torch.zeros_like(like, requires_grad=False)
    for i, v in enumerate(values):
        out[i, : len(v)] = torch.tensor(v, dtype=out.dtype)
    return out


def start_policy(run_dir: Path, loaded: LoadedModel | None) -> Path:
    """RUN/reference_policy (KL reference, LoRA base), saved once from `loaded` or already there."""
    ref_dir = run_dir / "reference_policy"
    if loaded is None and not (ref_dir / "config.json").exists():
        raise RlkitError(f"{ref_dir} is missing: a LoRA run resumes on the base it saved there")
    if not (ref_dir / "config.json").exists():
        tmp = run_dir / ".reference_policy.tmp"
        with no_progress_bars():
            loaded.model.save_pretrained(tmp)
        loaded.processor.save_pretrained(tmp)
        os.replace(tmp, ref_dir)
    return ref_dir


def model_like(path: Path, like: torch.nn.Module) -> torch.nn.Module:
    """The model saved at `path`, on `like`'s device and dtype, in eval mode."""
    with no_progress_bars():
        model = type(like).from_pretrained(path, dtype=like.dtype)
    return fast_vision(model.to(like.device).eval())


def reference_of(loaded: LoadedModel, run_dir: Path) -> LoadedModel:
    """The frozen start policy the KL term pulls towards, sharing `loaded`'s encoder."""
    ref = copy.copy(loaded)
    ref.model = model_like(start_policy(run_dir, loaded), loaded.model)
    return ref
