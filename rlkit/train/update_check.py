"""Does the GRPO update point the right way? Eps-oracles' episodes through the trainer's own
`score`, `turn_samples` and `update`; `check_update(recipe).failures()` lists what went wrong
(docs/tests.md#learning-checks)."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from rlkit.env.maze_env import EnvConfig
from rlkit.episodes.policies import EpsOraclePolicy, Policy, Response
from rlkit.episodes.rollout import Trajectory, replay_states, run_episodes
from rlkit.maze import rules
from rlkit.maze.parsing import format_action
from rlkit.maze.sets import pinned_spec, train_mazes
from rlkit.model.batching import AnswerSpec, choice_logits
from rlkit.model.build import build_tiny
from rlkit.model.config import Tuning
from rlkit.model.load import LoadedModel, load, trainable, tune
from rlkit.model.policy import ModelPolicy
from rlkit.recipe import Recipe
from rlkit.run.captures import CapturedEpisode
from rlkit.train.config import GRPOConfig
from rlkit.train.grpo import group_advantages
from rlkit.train.learner import Learner, TurnSample, row_logprobs
from rlkit.train.rescore import EpisodeShift, Rescore, both_logprobs, rescore
from rlkit.train.step import loss_weights, score, turn_budgets, turn_samples, update

EPSILONS = (0.2, 0.3, 0.4)
"""Exploration rates of the scripted players, one a maze (on the shortest path's turn budget)."""


class ScriptedAnswers:
    """A scripted policy's moves as `loaded`'s constrained answers, with the model's logprobs."""

    def __init__(self, loaded: LoadedModel, scripted: Policy, temperature: float = 1.0) -> None:
        self.loaded, self.scripted, self.temperature = loaded, scripted, temperature
        self.name = scripted.name
        self._specs: dict[str, AnswerSpec] = {}

    def act(self, states, messages, rngs) -> list[Response]:
        picks = self.scripted.act(states, messages, rngs)
        encoded = [self.loaded.encoder.encode(m) for m in messages]
        out: list[Response | None] = [None] * len(states)
        for game in dict.fromkeys(s.maze.game for s in states):  # one forward a game
            rows = [i for i, s in enumerate(states) if s.maze.game == game]
            if game not in self._specs:
                self._specs[game] = AnswerSpec.from_loaded(self.loaded, game)
            spec = self._specs[game]
            words = [format_action(m) for m in spec.moves]
            with torch.no_grad():
                logits = choice_logits(self.loaded, [encoded[i] for i in rows], spec).float()
            for i, logp in zip(rows, torch.log_softmax(logits / self.temperature, -1), strict=True):
                k = words.index(picks[i].text)
                ids = spec.response(k)
                lps = [0.0] * len(ids)
                lps[spec.choice_pos] = float(logp[k])
                out[i] = Response(picks[i].text, list(encoded[i].prompt_ids), ids, lps)
        return out  # type: ignore[return-value]  # every row answered by its game's spec


@dataclass(frozen=True)
class UpdateCheck:
    """What `check_update` measured."""

    shift: Rescore | None
    """Episodes re-scored, weighted by reward minus the group's mean (None: no group of both)."""
    trained: Rescore | None
    """Episodes (gigpo: turns) re-scored, weighted by the loss's advantages (None: all 0)."""
    greedy_before: float
    greedy_after: float
    """Share of the batch's turns whose greedy move is the oracle's, before and after."""
    solved_before: float
    solved_after: float
    """Share of the batch's mazes one greedy episode solves (reported, never asserted)."""
    kl_before: float
    kl_after: float
    """Mean KL of the moves to the starting policy's, around the KL-only updates."""

    MIN_GAIN = 0.05
    """Solved minus failed (nats a token) below which the update did not move answers."""
    MIN_AGREEMENT = 0.0
    """Least rise in the greedy moves' agreement with the oracle."""
    MAX_OBSERVATIONS = 0.25
    """Most the observations may move with the advantages, as a share of the answers' move."""
    MAX_KL_RATIO = 0.75
    """Most the KL-only updates may leave of the KL they started from."""

    @property
    def solved_gain(self) -> float:
        """Solved answers' gain on their groups' failed ones (nats a token; 0: no such group)."""
        return self.shift.solved_gain if self.shift else 0.0

    def failures(self) -> list[str]:
        """Each way the update went wrong, in words (empty when it went right)."""
        out = []
        if self.solved_gain < self.MIN_GAIN:
            out.append(f"solved answers gained {self.solved_gain:+.4f} nats/token on failed ones")
        t = self.trained
        if t is not None and abs(t.observation_weighted) >= self.MAX_OBSERVATIONS * abs(t.weighted):
            out.append(
                f"observations moved {t.observation_weighted:+.4f} nats/token with the "
                f"advantages, answers {t.weighted:+.4f}"
            )
        if not self.greedy_after > self.greedy_before + self.MIN_AGREEMENT:
            out.append(
                f"greedy moves agreed with the oracle's {self.greedy_before:.1%} -> "
                f"{self.greedy_after:.1%}"
            )
        if self.kl_before > 0 and not self.kl_after < self.MAX_KL_RATIO * self.kl_before:
            out.append(f"the KL term took the KL {self.kl_before:.4f} -> {self.kl_after:.4f}")
        return out

    def summary(self) -> str:
        t, seen = self.trained, "no advantage"
        shift = self.shift.summary() if self.shift else "no group with both outcomes"
        if t is not None:
            seen = f"{t.weighted:+.4f}, observations {t.observation_weighted:+.4f}"
        return (
            f"{shift}; with the loss's advantages: answers {seen}; "
            f"greedy moves the oracle's {self.greedy_before:.1%} -> "
            f"{self.greedy_after:.1%}, greedy solves {self.solved_before:.1%} -> "
            f"{self.solved_after:.1%}; KL-only updates {self.kl_before:.4f} -> {self.kl_after:.4f}"
        )


def check_update(
    recipe: Recipe,
    *,
    seed: int = 0,
    mazes: int = 32,
    group_size: int = 8,
    steps: int = 20,
    lr: float = 1e-3,
    kl_coef: float = 1.0,
    workdir: str | Path | None = None,
    tuning: Tuning | None = None,
) -> UpdateCheck:
    """Eps-oracles play `mazes` mazes `group_size` times each on the tiny model of `seed`; then
    `steps` GRPO updates at `lr` on the batch scored by `recipe` (old logprobs re-taken each
    step), and `steps` with every advantage 0 and the KL at `kl_coef`."""
    env = EnvConfig()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        loaded = load(build_tiny(Path(tmp) / "model", seed=seed))
    start = copy.copy(loaded)
    start.model = copy.deepcopy(loaded.model).eval()
    spec = AnswerSpec.from_loaded(loaded)
    g = GRPOConfig()
    tune(loaded.model, tuning or Tuning(), seed=seed)
    opt = torch.optim.AdamW(trainable(loaded.model), lr=lr, weight_decay=g.weight_decay)
    learner = Learner(loaded, opt, answer=spec)
    learner.ref = start if recipe.kl_in_loss > 0 else None
    batch = train_mazes(pinned_spec("test"), 0, mazes)
    trajs = _scripted_groups(loaded, batch, env, group_size, seed)
    scores = score(trajs, recipe, stop_ids=loaded.stop_ids)
    samples = turn_samples(trajs, scores, loaded.encoder.encode, env)
    g = replace(g, epochs=1, minibatch=len(samples) or 1)
    best = [
        spec.index(rules.best_move(state))
        for t, k in zip(trajs, scores.keep.tolist(), strict=True)
        if k
        for state in replay_states(t)[: len(t.turns)]
    ]
    before = (_agreement(learner, samples, best), _solved(loaded, batch, env))
    for step in range(steps):
        update(learner, _on_policy(learner, samples), g, recipe, lr=lr, seed=seed, step=step)
    after = (_agreement(learner, samples, best), _solved(loaded, batch, env))
    # weighted by the outcome, whatever `score` said (it must catch a scoring that zeroes or
    # flips the advantages), and by the advantages the loss used
    outcome = group_advantages(scores.rewards, scores.groups, norm_by_std=False)
    shift = _rescored(trajs, outcome, start, loaded, env)
    if scores.turn_advantages is None:
        used = torch.where(scores.keep, scores.advantages, 0.0)
        trained = _rescored(trajs, used, start, loaded, env)
    else:  # gigpo: each turn weighted by its own advantage
        trained = _turns_rescored(trajs, loss_weights(trajs, scores), start, loaded, env)
    learner.ref = start
    kl_only = replace(recipe, kl_loss_coef=kl_coef, kl_placement="loss")
    still = [replace(x, advantage=0.0) for x in samples]
    kl_before = _kl(learner, still)
    for step in range(steps):
        update(learner, _on_policy(learner, still), g, kl_only, lr=lr, seed=seed, step=steps + step)
    kl_after = _kl(learner, still)
    return UpdateCheck(
        shift, trained, before[0], after[0], before[1], after[1], kl_before, kl_after
    )


def _rescored(
    trajs: Sequence[Trajectory],
    weights: torch.Tensor,
    before: LoadedModel,
    after: LoadedModel,
    env: EnvConfig,
) -> Rescore | None:
    """The episodes of nonzero weight re-scored under both models, the weight as advantage."""
    episodes = [
        CapturedEpisode(0, t.maze_index, w, t)
        for t, w in zip(trajs, weights.tolist(), strict=True)
        if w != 0.0
    ]
    return rescore(episodes, before=before, after=after, env=env) if episodes else None


def _turns_rescored(
    trajs: Sequence[Trajectory],
    weights: Sequence[Sequence[float]],
    before: LoadedModel,
    after: LoadedModel,
    env: EnvConfig,
) -> Rescore | None:
    """One `EpisodeShift` per turn of nonzero weight: its answer's shift, its episode's
    observations' shift, its weight as advantage."""
    pad = before.encoder.image_pad
    picked = [
        (t, w)
        for t, w in zip(trajs, weights, strict=True)
        if any(w) and not any(pad in u.text for u in t.turns)
    ]
    episodes = [CapturedEpisode(0, t.maze_index, 1.0, t) for t, _ in picked]
    old, new = both_logprobs(episodes, before, after, env)
    out = []
    for (t, w), (a0, o0), (a1, o1) in zip(picked, old, new, strict=True):
        sizes = [len(before.tokenizer.encode(u.text, add_special_tokens=False)) for u in t.turns]
        if sum(sizes) != a0.numel():
            raise RuntimeError(f"answers of {sizes} tokens re-scored as {a0.numel()} tokens")
        obs = float((o1 - o0).mean()) if o0.numel() else 0.0
        for a, d in zip(w, (a1 - a0).split(sizes), strict=True):
            if a != 0.0 and d.numel():
                out.append(EpisodeShift((0, t.maze_index), a, t.solved, float(d.mean()), obs))
    return Rescore(out) if out else None


def _scripted_groups(
    loaded: LoadedModel, mazes: Sequence, env: EnvConfig, group_size: int, seed: int
) -> list[Trajectory]:
    """`group_size` episodes of each maze, maze i played by the eps-oracle `EPSILONS[i % n]`."""
    out: list[Trajectory] = []
    for j, eps in enumerate(EPSILONS):
        picked = list(range(j, len(mazes), len(EPSILONS)))
        player = ScriptedAnswers(loaded, EpsOraclePolicy(eps))
        mine = [mazes[i] for i in picked]
        budgets = turn_budgets(mine, env, slack=0)
        trajs = run_episodes(
            player, mine, env, samples=group_size, seed=seed * 31 + j, max_turns=budgets
        )
        out += [replace(t, maze_index=picked[t.maze_index]) for t in trajs]
    return sorted(out, key=lambda t: (t.maze_index, t.sample))


def _on_policy(learner: Learner, samples: Sequence[TurnSample]) -> list[TurnSample]:
    """`samples` with their old log-probabilities those of the learner's current policy."""
    with torch.no_grad():
        logp, _, _ = row_logprobs(learner.loaded, learner, samples)
    return [
        replace(x, old_logprobs=row[: len(x.response_ids)])
        for x, row in zip(samples, logp.tolist(), strict=True)
    ]


def _kl(learner: Learner, samples: Sequence[TurnSample]) -> float:
    """Mean over the samples' turns of the exact KL(policy || reference) of their moves."""
    prompts = [x.prompt for x in samples]
    with torch.no_grad():
        now, ref = (
            torch.log_softmax(choice_logits(m, prompts, learner.answer).float(), -1)
            for m in (learner.loaded, learner.ref)
        )
    return float((now.exp() * (now - ref)).sum(-1).mean())


def _agreement(learner: Learner, samples: Sequence[TurnSample], best: Sequence[int]) -> float:
    """Share of the samples' turns whose most likely move is `best`'s (choice indices)."""
    with torch.no_grad():
        logits = choice_logits(learner.loaded, [x.prompt for x in samples], learner.answer)
    return float((logits.argmax(-1).cpu() == torch.tensor(best)).float().mean())


def _solved(loaded: LoadedModel, mazes: Sequence, env: EnvConfig) -> float:
    """Share of `mazes` one greedy episode of `loaded` solves."""
    trajs = run_episodes(ModelPolicy(loaded, greedy=True), mazes, env)
    return float(np.mean([t.solved for t in trajs]))
