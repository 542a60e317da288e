"""The GRPO update of one rollout batch, as free functions: minibatch order, loss, optimizer.

`update` runs `epochs` passes over the batch's turn samples in a seeded random order, one
optimizer step per minibatch, and returns the minibatch metrics averaged. The loss of a
minibatch (`minibatch_loss`) recomputes each reply's logprobs under the current weights, masks
everything the policy did not choose (constrained mode: only the move word's token) and hands
them to `rlkit.train.grpo.recipe_loss` with each row's episode as its sequence.

Minibatches hold whole episodes, as SkyRL's episode rows are: the per-episode terms (the
`sequence_mean` and `seq_mean_token_sum_norm` reductions, the KL term, GSPO's ratio) would
count an episode cut across two optimizer steps as two. Within a minibatch, turns that share
a prompt (a maze's episodes share their first one, often more) share one forward.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace

import torch

from rlkit.model.load import LoadedModel
from rlkit.model.policy import AnswerSpec, turn_logprobs
from rlkit.recipe import Recipe
from rlkit.train import faults, grpo, reductions
from rlkit.train.config import GRPOConfig
from rlkit.train.step import TurnSample, shuffle_seed


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
    """The rollout's sampling temperature: logprobs must use the same one (on-policy ratios)."""


@dataclass(frozen=True)
class MinibatchLoss:
    out: grpo.PolicyLoss
    entropy: torch.Tensor
    """(B, R) per-token entropy of the policy."""
    mask: torch.Tensor
    """(B, R) 1 on the tokens that carry loss."""


def minibatch_loss(learner: Learner, mb: Sequence[TurnSample], recipe: Recipe) -> MinibatchLoss:
    """The GRPO loss of `mb` under the learner's current weights (differentiable)."""
    answer = learner.answer
    logp, entropy, mask = _logprobs(learner.loaded, learner, mb)
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
            ref, _, _ = _logprobs(learner.ref, learner, mb)
    out = grpo.recipe_loss(
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


def _logprobs(
    model: LoadedModel, learner: Learner, rows: Sequence[TurnSample]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logprobs, entropy, response mask), each (B, R), of the rows' replies under `model`
    (the policy or its reference), as the rollout defined them."""
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


def with_reference(learner: Learner, samples: Sequence[TurnSample], size: int) -> list[TurnSample]:
    """`samples` with `ref_logprobs` filled from the frozen reference, in no-grad passes of
    `size` rows; unchanged when there is no reference. The reference never changes during an
    update, so computing it once instead of in every epoch's minibatches saves one forward per
    sample and extra epoch."""
    if learner.ref is None:
        return list(samples)
    out: list[TurnSample] = []
    for lo in range(0, len(samples), size):
        chunk = samples[lo : lo + size]
        with torch.no_grad():
            ref, _, _ = _logprobs(learner.ref, learner, chunk)
        for x, row in zip(chunk, ref.tolist(), strict=True):
            out.append(replace(x, ref_logprobs=row[: len(x.response_ids)]))
    return out


def optimizer_step(
    learner: Learner, mb: Sequence[TurnSample], g: GRPOConfig, recipe: Recipe, *, step: int
) -> dict[str, float]:
    """One optimizer step on minibatch `mb` (gradient clipped); returns its `loss/` metrics."""
    loss = minibatch_loss(learner, mb, recipe)
    learner.opt.zero_grad()
    loss.out.loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(learner.loaded.model.parameters(), g.max_grad_norm)
    faults.point("optimizer", step)
    learner.opt.step()
    return {
        **loss.out.metrics,
        "loss/grad_norm": float(gn),
        "loss/entropy": float(reductions.masked_mean(loss.entropy.detach(), loss.mask)),
    }


def grouped_minibatches(
    keys: Sequence[Hashable], size: int, generator: torch.Generator
) -> list[list[int]]:
    """Sample indices grouped by key (`keys[i]` is sample i's), the groups in a random order,
    packed into minibatches of at most `size` samples without cutting a group (one larger than
    `size` fills a minibatch alone)."""
    members: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        members.setdefault(k, []).append(i)
    groups = list(members.values())
    out: list[list[int]] = []
    for j in torch.randperm(len(groups), generator=generator).tolist():
        if out and len(out[-1]) + len(groups[j]) <= size:
            out[-1].extend(groups[j])
        else:
            out.append(list(groups[j]))
    return out


def minibatch_order(
    samples: Sequence[TurnSample], g: GRPOConfig, generator: torch.Generator
) -> list[list[int]]:
    """One epoch's minibatches of sample indices: whole episodes in a random order, as SkyRL
    shuffles its episode rows. Turns that share a prompt still share one forward when they land
    in one minibatch. Keeping such turns together as well (which joins a maze's episodes into
    one unit, since they share their first prompt) filled each minibatch with whole groups of
    few mazes: seed 1 of the learning benchmark then ended at 92.6% sampled, 93.8% greedy;
    with whole episodes alone, 96.9% both (160 GRPO steps)."""
    return grouped_minibatches([x.episode for x in samples], g.minibatch, generator)


def update(
    learner: Learner,
    samples: Sequence[TurnSample],
    g: GRPOConfig,
    recipe: Recipe,
    *,
    lr: float,
    seed: int,
    step: int,
) -> dict[str, float]:
    """`g.epochs` passes over `samples` at learning rate `lr`, one optimizer step per minibatch;
    returns every metric averaged over the minibatches ({} when there are no samples).

    seed, step: the run's seed and the global step, which fix each epoch's minibatch order.
    """
    if not samples:
        return {}
    for group in learner.opt.param_groups:
        group["lr"] = lr
    samples = with_reference(learner, samples, g.minibatch)
    model, totals, n_mb = learner.loaded.model, {}, 0
    model.train()
    for epoch in range(g.epochs):
        gen = torch.Generator().manual_seed(shuffle_seed(seed, step, epoch))
        for idx in minibatch_order(samples, g, gen):
            metrics = optimizer_step(learner, [samples[i] for i in idx], g, recipe, step=step)
            n_mb += 1
            for k, v in metrics.items():
                totals[k] = totals.get(k, 0.0) + v
    model.eval()
    return {k: v / n_mb for k, v in totals.items()}
