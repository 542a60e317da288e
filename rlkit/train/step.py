"""What one GRPO step computes besides the update, as free functions the trainer calls.

- seeds: every random draw of a step comes from (seed, step[, epoch]), so a run resumed from a
  checkpoint draws exactly what an uninterrupted one would (`rollout_seed`, `shuffle_seed`);
- `score`: rewards -> advantages (the recipe's estimator) and which episodes the loss keeps
  (zero-variance filter, all-failed groups, overlong filtering, dynamic sampling's batch);
- `turn_samples`: trajectories -> one training row per model turn, the prompt re-encoded and
  checked against the one that was sampled;
- `rollout_metrics`: the `rollout/` numbers of a batch of episodes;
- `lr_at`: the learning rate of a GRPO step;
- `turn_budgets`: each training maze's turn budget (`grpo.turn_slack`);
- `capture`: a few groups of the step's episodes kept under RUN/rollouts for viewing;
- `due`: whether an eval and a checkpoint follow a step.

The update itself (loss, minibatches, optimizer) is `rlkit.train.update`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from rlkit.env.maze_env import EnvConfig
from rlkit.episodes.rollout import Trajectory, turn_prompts
from rlkit.errors import UsageError
from rlkit.maze.core import Maze, exit_distances
from rlkit.model.chat import Encoded
from rlkit.recipe import Recipe
from rlkit.run import captures
from rlkit.train.advantages import estimate, nonzero_variance_mask, unsolved_group_mask
from rlkit.train.config import GRPOConfig, ScheduleConfig

ROLLOUT, SHUFFLE = 1, 2
"""Stream tags: the key part after the run's seed, so that no two streams share a key."""


def seed_for(*parts: int) -> int:
    """A 64-bit seed from a key of non-negative ints; every distinct key is distinct entropy.

    The key's length is part of it: SeedSequence pads its entropy with zeros, so (s, t) and
    (s, t, 0) would be one seed.
    """
    if any(int(p) < 0 for p in parts):
        raise UsageError(f"seed key {parts} must be non-negative ints (SeedSequence entropy)")
    key = [*map(int, parts), len(parts)]
    return int(np.random.SeedSequence(key).generate_state(1, np.uint64)[0])


def rollout_seed(seed: int, step: int, round_: int = 0) -> int:
    """Seed of the episodes sampled at global step `step` (in its rollout round `round_`, when
    dynamic sampling draws more than one)."""
    return seed_for(seed, ROLLOUT, step) if round_ == 0 else seed_for(seed, ROLLOUT, step, round_)


def shuffle_seed(seed: int, step: int, epoch: int) -> int:
    """Seed of the minibatch order of epoch `epoch` of the update at global step `step`."""
    return seed_for(seed, SHUFFLE, step, epoch)


@dataclass
class TrainState:
    """Everything besides weights and optimizer that a resume needs (saved in trainer_state.pt)."""

    step: int = 0
    phase: str = "warm_start"
    grpo_steps: int = 0
    warm_start_end: int | None = None
    cursor: int = 0
    """Index of the next training maze in the stream: no maze replayed or skipped on resume."""
    val_solve_rate: float | None = None
    """The warm start's latest validation solve rate (None: none yet); it picks the BC phase."""
    elapsed_s: float = 0.0
    """Training wall time up to this state, summed over resumed segments (benchmarks)."""


@dataclass
class TurnSample:
    """One training row: a turn's prompt, the model's reply and the episode's advantage."""

    prompt: Encoded
    response_ids: list[int]
    old_logprobs: list[float]
    """Per response token, log pi_old as recorded while sampling."""
    advantage: float
    episode: int
    """Index of its episode in the rollout batch: the sequence of the per-episode reductions."""
    ref_logprobs: list[float] | None = None
    """Per response token, log pi_ref (the KL term's frozen reference), once computed for the
    update (`rlkit.train.update.with_reference`); None: not computed."""


@dataclass(frozen=True)
class Scores:
    """A rollout batch scored for GRPO; every tensor is (B,), one entry per episode."""

    rewards: torch.Tensor
    groups: torch.Tensor
    """Maze index of each episode: the group GRPO compares it within."""
    advantages: torch.Tensor
    informative: torch.Tensor
    """bool: the episode's group has rewards that differ (its advantages are not all zero)."""
    keep: torch.Tensor
    """bool: the episode's turns enter the loss (`informative`, or every episode when the
    zero-variance filter is off)."""


def score(
    trajs: Sequence[Trajectory],
    recipe: Recipe,
    *,
    stop_ids: Sequence[int] | None = None,
    batch_groups: int | None = None,
) -> Scores:
    """Advantages of `trajs` by the recipe's estimator, and which episodes the loss keeps:
    - `zero_variance_filter` (or dynamic sampling's `filter`) drops the groups whose episodes
      all got the same reward, else every episode is kept;
    - `fail_advantage`: the episodes of groups that no episode solved get it and are kept;
    - `apply_overlong_filtering`: an episode whose last reply ends on none of the checkpoint's
      `stop_ids` (it was cut) is dropped, its reward still in its group's baseline (SkyRL masks
      its loss the same way);
    - `dynamic_sampling_type=filter` with `batch_groups`: only the first `batch_groups` kept
      groups (in maze order) stay, as SkyRL truncates to its train batch."""
    rewards = torch.tensor([t.reward for t in trajs])
    groups = torch.tensor([t.maze_index for t in trajs])
    adv = estimate(rewards, groups, recipe)
    informative = nonzero_variance_mask(rewards, groups)
    dynamic = recipe.dynamic_sampling_type == "filter"
    filtered = recipe.zero_variance_filter or dynamic
    keep = informative if filtered else torch.ones_like(informative)
    if recipe.fail_advantage is not None:
        unsolved = unsolved_group_mask(rewards, groups)
        adv = torch.where(unsolved, torch.full_like(adv, recipe.fail_advantage), adv)
        keep = keep | unsolved
    if recipe.apply_overlong_filtering:
        keep = keep & ~overlong(trajs, stop_ids)
    if dynamic and batch_groups is not None:
        first = sorted(set(groups[keep].tolist()))[:batch_groups]
        keep = keep & torch.isin(groups, torch.tensor(first, dtype=groups.dtype))
    return Scores(rewards, groups, adv, informative, keep)


def overlong(trajs: Sequence[Trajectory], stop_ids: Sequence[int] | None) -> torch.Tensor:
    """(B,) bool: the episode's last reply ends on none of `stop_ids` (cut at the token limit:
    SkyRL's stop_reason other than "stop")."""
    if not stop_ids:
        raise UsageError("overlong filtering needs the checkpoint's stop token ids (stop_ids)")
    last = [t.turns[-1].response_ids if t.turns else None for t in trajs]
    return torch.tensor([bool(ids) and ids[-1] not in stop_ids for ids in last], dtype=torch.bool)


def turn_samples(
    trajs: Sequence[Trajectory],
    scores: Scores,
    encode: Callable[[list[dict]], Encoded],
    env: EnvConfig,
    *,
    history: int | None = 1,
) -> list[TurnSample]:
    """One row per model turn of every kept episode (`scores.keep`), in episode then turn order.

    A kept episode's turns stay even when its advantage is 0: with the zero-variance filter off
    they count in the reduction's denominators, as that setting means (SkyRL keeps them too).
    `encode` turns a turn's messages (replayed through the env, `turn_prompts`) into model
    input, as the rollout did; a prompt that encodes differently from the sampled one raises.
    """
    out = []
    kept = zip(trajs, scores.advantages.tolist(), scores.keep.tolist(), strict=True)
    for episode, (traj, a, k) in enumerate(kept):
        if not k:
            continue
        for turn, msgs in zip(traj.turns, turn_prompts(traj, env, history=history), strict=True):
            enc = encode(msgs)
            if list(enc.prompt_ids) != list(turn.prompt_ids):
                raise RuntimeError(
                    "re-encoded prompt differs from the sampled one: rollout and trainer disagree"
                )
            out.append(TurnSample(enc, turn.response_ids, turn.logprobs, a, episode))
    return out


def informative_groups(scores: Scores) -> int:
    """How many groups of a scored batch have rewards that differ (a GRPO signal)."""
    return len(set(scores.groups[scores.informative].tolist()))


def kept_groups(scores: Scores) -> int:
    """How many groups of a scored batch enter the loss."""
    return len(set(scores.groups[scores.keep].tolist()))


def enough_groups(scores: Scores, recipe: Recipe, batch_groups: int, rounds: int) -> bool:
    """Whether a step's rollout may stop after `rounds` rounds: always without dynamic sampling;
    with `filter`, once `batch_groups` groups enter the loss or `max_sample_batches` rounds are
    drawn (SkyRL stops the run there; the local trainer trains on what it has)."""
    if recipe.dynamic_sampling_type != "filter" or rounds >= recipe.max_sample_batches:
        return True
    return kept_groups(scores) >= batch_groups


def rollout_metrics(trajs: Sequence[Trajectory], scores: Scores, n_groups: int) -> dict:
    """The `rollout/` metrics of a batch of `n_groups` mazes' episodes (the zero-variance
    count is a fact of the rollout, whether the filter drops those groups or not)."""
    kept_groups = informative_groups(scores)
    return {
        "rollout/reward_mean": float(scores.rewards.mean()),
        "rollout/solve_rate": float(np.mean([t.solved for t in trajs])),
        "rollout/turns_mean": float(np.mean([len(t.turns) for t in trajs])),
        "rollout/episodes": len(trajs),
        "rollout/zero_variance_groups": int(n_groups - kept_groups),
        "rollout/groups": int(n_groups),
    }


def capture(
    run_dir: Path,
    step: int,
    trajs: Sequence[Trajectory],
    scores: Scores,
    sched: ScheduleConfig,
    policy: str,
) -> dict:
    """Write `sched.capture_groups` of the step's groups (picked from the run's seed and the
    step) to RUN/rollouts, each episode with the advantage its loss used (0 where the loss
    dropped it) and named `policy` (`captures.training_label`); returns what it cost (`rollout/capture_episodes`, `_bytes`: SkyRL's bridge logs
    the same names), {} when capture is off."""
    if sched.capture_groups == 0:
        return {}
    adv = scores.advantages
    used = torch.where(scores.keep, adv, torch.zeros_like(adv)).tolist()
    named = [replace(t, policy=policy) for t in trajs]
    groups = scores.groups.tolist()
    picked = captures.pick_episodes(
        step, named, groups, used, n=sched.capture_groups, seed=sched.seed
    )
    path = captures.write_step(run_dir, step, picked, keep=sched.capture_keep)
    return {"rollout/capture_episodes": len(picked), "rollout/capture_bytes": path.stat().st_size}


def turn_budgets(
    mazes: Sequence[Maze], env: EnvConfig, slack: int | None, tight_fraction: float = 1.0
) -> list[int] | None:
    """Per-maze turn budgets of a GRPO rollout: the first `tight_fraction` of the mazes (they
    come from a shuffled stream) get their shortest path + `slack`, at most the env's
    `max_turns`, the rest the env's budget; None (every maze the env's) when `slack` is None.
    A squares maze's shortest path counts its closing `stop` (one more turn: VisGym wins only
    by stopping on the target)."""
    if slack is None:
        return None
    tight = round(tight_fraction * len(mazes))

    def shortest(m: Maze) -> int:
        return int(exit_distances(m)[m.start]) + (m.game == "squares")

    return [
        min(env.max_turns, shortest(m) + slack) if i < tight else env.max_turns
        for i, m in enumerate(mazes)
    ]


def lr_at(g: GRPOConfig, grpo_steps: int, total: int) -> float:
    """Learning rate of the GRPO step that follows `grpo_steps` finished ones, of `total`."""
    if grpo_steps < g.lr_late_from:
        return g.lr
    late = g.lr if g.lr_late is None else g.lr_late
    if g.lr_end is None:
        return late
    span = max(1, total - 1 - g.lr_late_from)
    t = min(1.0, (grpo_steps - g.lr_late_from) / span)
    return g.lr_end + (late - g.lr_end) * 0.5 * (1.0 + math.cos(math.pi * t))


@dataclass(frozen=True)
class Due:
    """What follows a step: an eval of the pinned test set, a checkpoint."""

    eval: bool
    checkpoint: bool


def due(s: TrainState, sched: ScheduleConfig) -> Due:
    """What is due after the step `s` has just finished.

    The warm-start boundary and the last GRPO step get both; otherwise evals come every
    `eval_every` GRPO steps and checkpoints every `ckpt_every` global steps.
    """
    boundary = s.warm_start_end == s.step
    last = s.grpo_steps >= sched.steps and s.phase == "grpo"
    grpo_tick = s.phase == "grpo" and not boundary and s.grpo_steps > 0
    return Due(
        eval=boundary or last or (grpo_tick and s.grpo_steps % sched.eval_every == 0),
        checkpoint=boundary or last or s.step % sched.ckpt_every == 0,
    )
