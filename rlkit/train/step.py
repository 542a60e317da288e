"""One local GRPO step, top to bottom: rollout -> score -> samples -> update (`grpo_step`), every
draw seeded from (seed, step[, round or epoch]) (`rlkit.train.state.seed_for`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from rlkit.env.maze_env import EnvConfig
from rlkit.episodes.policies import Policy
from rlkit.episodes.rollout import Trajectory, run_episodes, turn_prompts
from rlkit.errors import UsageError
from rlkit.maze.core import Maze
from rlkit.maze.sets import curriculum_share, draw_train_mazes, turns_to_solve
from rlkit.model.chat import Encoded
from rlkit.recipe import Recipe
from rlkit.run import captures
from rlkit.train import faults, grpo
from rlkit.train.config import GRPOConfig, ScheduleConfig, TrainConfig
from rlkit.train.learner import Learner, TurnSample, minibatch_loss, with_reference
from rlkit.train.state import TrainState, rollout_seed, shuffle_seed


def grpo_step(
    cfg: TrainConfig,
    state: TrainState,
    learner: Learner,
    policy: Policy,
    run_dir: Path,
    timer: Callable[[str], AbstractContextManager],
) -> dict:
    """One GRPO step at `state.step` (advancing `state.cursor`); returns its metrics."""
    g, task, recipe, sched = cfg.grpo, cfg.task, cfg.recipe, cfg.schedule
    stops = learner.loaded.stop_ids
    trajs: list[Trajectory] = []
    rounds = 0
    with timer("rollout"):
        while True:  # one round, or with dynamic sampling until enough groups teach
            offset = len(trajs) // g.group_size
            trajs += rollout_round(policy, cfg, state, rounds, offset)
            rounds += 1
            scores = score(trajs, recipe, stop_ids=stops)
            if enough_groups(scores, recipe, g.mazes_per_step, rounds):
                break
        scores = score(trajs, recipe, stop_ids=stops, batch_groups=g.mazes_per_step)
        faults.point("rollout", state.step)
    with timer("capture"):  # a few groups kept for viewing (RUN/rollouts)
        label = captures.training_label(state.step)
        captured = capture(run_dir, state.step, trajs, scores, sched, label)
    with timer("encode"):
        encode = learner.loaded.encoder.encode
        samples = turn_samples(trajs, scores, encode, task.env, history=task.history)
    lr = lr_at(g, state.grpo_steps, sched.steps)
    with timer("update"):
        metrics = update(learner, samples, g, recipe, lr=lr, seed=sched.seed, step=state.step)
    return {
        **rollout_metrics(trajs, scores, rounds * g.mazes_per_step),
        "rollout/rounds": rounds,
        "train/samples": len(samples),
        "train/groups": kept_groups(scores),
        "train/lr": lr,
        "train/cursor": state.cursor,
        "train/curriculum": curriculum(cfg, state),
        **captured,
        **metrics,
    }


def rollout_round(
    policy: Policy, cfg: TrainConfig, state: TrainState, round_: int, offset: int
) -> list[Trajectory]:
    """The next `mazes_per_step` training mazes' groups of episodes, maze indices from `offset`."""
    g, task = cfg.grpo, cfg.task
    mazes, state.cursor = draw_train_mazes(
        task.spec,
        state.cursor,
        g.mazes_per_step,
        curriculum(cfg, state),
        max_turns=task.env.max_turns if g.solvable_only else None,
        hard=g.hard_share,
        min_path=g.hard_min_path,
    )
    trajs = run_episodes(
        policy,
        mazes,
        task.env,
        samples=g.group_size,
        seed=rollout_seed(cfg.schedule.seed, state.step, round_),
        history=task.history,
        max_turns=turn_budgets(mazes, task.env, g.turn_slack, g.tight_fraction),
    )
    return [replace(t, maze_index=t.maze_index + offset) for t in trajs]


def curriculum(cfg: TrainConfig, state: TrainState) -> float:
    """Share of each training maze's shortest path played at this GRPO step (1: the whole)."""
    r = cfg.recipe
    return curriculum_share(state.grpo_steps, r.curriculum_steps, r.curriculum_start)


def turn_budgets(
    mazes: Sequence[Maze], env: EnvConfig, slack: int | None, tight_fraction: float = 1.0
) -> list[int] | None:
    """Per-maze turn budgets: the first `tight_fraction` of the mazes their shortest path +
    `slack` (at most `max_turns`), the rest `max_turns`; None (all `max_turns`): no slack."""
    if slack is None:
        return None
    tight = round(tight_fraction * len(mazes))
    return [
        min(env.max_turns, turns_to_solve(m) + slack) if i < tight else env.max_turns
        for i, m in enumerate(mazes)
    ]


def enough_groups(scores: Scores, recipe: Recipe, batch_groups: int, rounds: int) -> bool:
    """Whether the rollout may stop after `rounds`: without dynamic sampling always; with it,
    once `batch_groups` groups enter the loss or after `max_sample_batches` rounds."""
    if recipe.dynamic_sampling_type != "filter" or rounds >= recipe.max_sample_batches:
        return True
    return kept_groups(scores) >= batch_groups


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
    """bool: the episode's turns enter the loss."""
    turn_advantages: torch.Tensor | None = None
    """(N,) one advantage per turn (`gigpo`); None: each turn takes its episode's."""


def loss_weights(trajs: Sequence[Trajectory], scores: Scores) -> list[list[float]]:
    """Each episode's turns' advantages as the loss used them (0 where it dropped the episode)."""
    lengths = [len(t.turns) for t in trajs]
    per_turn = torch.tensor(lengths)
    if scores.turn_advantages is None:
        used = torch.where(scores.keep, scores.advantages, 0.0).repeat_interleave(per_turn)
    else:
        used = torch.where(scores.keep.repeat_interleave(per_turn), scores.turn_advantages, 0.0)
    return [x.tolist() for x in used.split(lengths)]


def score(
    trajs: Sequence[Trajectory],
    recipe: Recipe,
    *,
    stop_ids: Sequence[int] | None = None,
    batch_groups: int | None = None,
) -> Scores:
    """Advantages of `trajs` by the recipe's estimator, and which episodes the loss keeps (an
    overlong episode's reward stays in the baseline; dynamic sampling with `batch_groups` keeps
    the first that many groups)."""
    rewards = torch.tensor([t.reward for t in trajs])
    groups = torch.tensor([t.maze_index for t in trajs])
    adv = grpo.estimate(rewards, groups, recipe)
    informative = grpo.nonzero_variance_mask(rewards, groups)
    dynamic = recipe.dynamic_sampling_type == "filter"
    filtered = recipe.zero_variance_filter or dynamic
    keep = informative if filtered else torch.ones_like(informative)
    if recipe.fail_advantage is not None:
        unsolved = grpo.unsolved_group_mask(rewards, groups)
        adv = torch.where(unsolved, torch.full_like(adv, recipe.fail_advantage), adv)
        keep = keep | unsolved
    if recipe.apply_overlong_filtering:
        keep = keep & ~overlong(trajs, stop_ids)
    if dynamic and batch_groups is not None:
        first = sorted(set(groups[keep].tolist()))[:batch_groups]
        keep = keep & torch.isin(groups, torch.tensor(first, dtype=groups.dtype))
    per_turn = None
    if recipe.advantage_estimator == "gigpo":  # the state key: the square a turn stood on
        lengths = torch.tensor([len(t.turns) for t in trajs])
        states = torch.tensor([u.pos_before for t in trajs for u in t.turns]).reshape(-1, 2)
        per_turn = grpo.step_credit(adv, rewards, groups, lengths, states, recipe)
    return Scores(rewards, groups, adv, informative, keep, per_turn)


def overlong(trajs: Sequence[Trajectory], stop_ids: Sequence[int] | None) -> torch.Tensor:
    """(B,) bool: the episode's last reply ends on none of `stop_ids` (cut at the token limit)."""
    if not stop_ids:
        raise UsageError("overlong filtering needs the checkpoint's stop token ids (stop_ids)")
    last = [t.turns[-1].response_ids if t.turns else None for t in trajs]
    return torch.tensor([bool(ids) and ids[-1] not in stop_ids for ids in last], dtype=torch.bool)


def kept_groups(scores: Scores) -> int:
    """How many groups of a scored batch enter the loss."""
    return len(set(scores.groups[scores.keep].tolist()))


def capture(
    run_dir: Path,
    step: int,
    trajs: Sequence[Trajectory],
    scores: Scores,
    sched: ScheduleConfig,
    policy: str,
) -> dict:
    """Write `sched.capture_groups` groups to RUN/rollouts with the advantages the loss used;
    returns the capture's size metrics ({} when capture is off)."""
    if sched.capture_groups == 0:
        return {}
    used = torch.where(scores.keep, scores.advantages, 0.0).tolist()
    per_turn = None
    if scores.turn_advantages is not None:  # gigpo: each turn its own
        per_turn = [w for turns in loss_weights(trajs, scores) for w in turns]
    named = [replace(t, policy=policy) for t in trajs]
    groups, n = scores.groups.tolist(), sched.capture_groups
    picked = captures.pick_episodes(
        step, named, groups, used, n=n, seed=sched.seed, turn_advantages=per_turn
    )
    path = captures.write_step(run_dir, step, picked, keep=sched.capture_keep)
    return {"rollout/capture_episodes": len(picked), "rollout/capture_bytes": path.stat().st_size}


def turn_samples(
    trajs: Sequence[Trajectory],
    scores: Scores,
    encode: Callable[[list[dict]], Encoded],
    env: EnvConfig,
    *,
    history: int | None = 1,
) -> list[TurnSample]:
    """One row per model turn of every kept episode (zero advantages too: they count in the
    reductions), each prompt re-encoded and checked against the sampled one."""
    out = []
    kept = zip(trajs, loss_weights(trajs, scores), scores.keep.tolist(), strict=True)
    for episode, (traj, advs, k) in enumerate(kept):
        if not k:
            continue
        prompts = turn_prompts(traj, env, history=history)
        for turn, msgs, adv in zip(traj.turns, prompts, advs, strict=True):
            enc = encode(msgs)
            if list(enc.prompt_ids) != list(turn.prompt_ids):
                raise RuntimeError(
                    "re-encoded prompt differs from the sampled one: rollout and trainer disagree"
                )
            out.append(TurnSample(enc, turn.response_ids, turn.logprobs, adv, episode))
    return out


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
    """`g.epochs` passes over `samples` at `lr`, a clipped optimizer step per minibatch (their
    order seeded by `seed` and `step`); returns the metrics' means ({}: no samples)."""
    if not samples:
        return {}
    for group in learner.opt.param_groups:
        group["lr"] = lr
    samples = with_reference(learner, samples, g.minibatch)
    model, totals, n_mb = learner.loaded.model, Counter(), 0
    model.train()
    for epoch in range(g.epochs):
        gen = torch.Generator().manual_seed(shuffle_seed(seed, step, epoch))
        for idx in minibatch_order(samples, g, gen):
            loss = minibatch_loss(learner, [samples[i] for i in idx], recipe)
            learner.opt.zero_grad()
            loss.out.loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), g.max_grad_norm)
            faults.point("optimizer", step)
            learner.opt.step()
            metrics = {
                **loss.out.metrics,
                "loss/grad_norm": float(gn),
                "loss/entropy": float(grpo.masked_mean(loss.entropy.detach(), loss.mask)),
            }
            n_mb += 1
            totals.update(metrics)
    model.eval()
    return {k: v / n_mb for k, v in totals.items()}


def minibatch_order(
    samples: Sequence[TurnSample], g: GRPOConfig, generator: torch.Generator
) -> list[list[int]]:
    """One epoch's minibatches of sample indices: whole episodes in a random order."""
    return grouped_minibatches([x.episode for x in samples], g.minibatch, generator)


def grouped_minibatches(
    keys: Sequence[Hashable], size: int, generator: torch.Generator
) -> list[list[int]]:
    """Indices grouped by `keys`, groups shuffled, packed whole into minibatches of at most
    `size` (a larger group alone)."""
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


def rollout_metrics(trajs: Sequence[Trajectory], scores: Scores, n_groups: int) -> dict:
    """The `rollout/` metrics of a batch of `n_groups` mazes' episodes."""
    informative = len(set(scores.groups[scores.informative].tolist()))
    return {
        "rollout/reward_mean": float(scores.rewards.mean()),
        "rollout/solve_rate": float(np.mean([t.solved for t in trajs])),
        "rollout/turns_mean": float(np.mean([len(t.turns) for t in trajs])),
        "rollout/episodes": len(trajs),
        "rollout/zero_variance_groups": int(n_groups - informative),
        "rollout/groups": int(n_groups),
    }


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
