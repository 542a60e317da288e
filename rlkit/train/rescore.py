"""Did training move the policy the way GRPO says it should? Either backend's captured episodes
re-scored under two checkpoints (`rescore(...).learned`; docs/local-trainer.md)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from rlkit.env.maze_env import EnvConfig
from rlkit.episodes.rollout import turn_prompts
from rlkit.errors import UsageError
from rlkit.model.batching import build_batch, logits_at
from rlkit.model.budgets import GENERATION_HEADER
from rlkit.model.load import LoadedModel, load
from rlkit.run.captures import CapturedEpisode


@dataclass(frozen=True)
class EpisodeShift:
    """One captured episode: its group, advantage, outcome and answers' log-probability change."""

    group: tuple[int, int]
    """(step, group)."""
    advantage: float
    solved: bool
    shift: float
    """Mean over its answers' tokens of log p_after - log p_before (nats a token)."""
    observation_shift: float = 0.0
    """The same over its observation tokens, which GRPO's loss mask leaves out."""


@dataclass(frozen=True)
class Rescore:
    episodes: list[EpisodeShift]

    @property
    def weighted(self) -> float:
        """Mean of advantage x shift over the episodes (> 0: answers moved as asked)."""
        return sum(e.advantage * e.shift for e in self.episodes) / max(1, len(self.episodes))

    @property
    def observation_weighted(self) -> float:
        """Advantage x observation shift, averaged like `weighted` (near 0 behind the mask)."""
        total = sum(e.advantage * e.observation_shift for e in self.episodes)
        return total / max(1, len(self.episodes))

    @property
    def z(self) -> float:
        """The weighted shift in standard errors over the groups' sums: mean / (sd / sqrt(n))."""
        by_group: dict[tuple[int, int], float] = defaultdict(float)
        for e in self.episodes:
            by_group[e.group] += e.advantage * e.shift
        sums = [s for s in by_group.values() if s != 0.0]
        if len(sums) < 2:
            return 0.0
        mean = sum(sums) / len(sums)
        var = sum((s - mean) ** 2 for s in sums) / (len(sums) - 1)
        return mean / math.sqrt(var / len(sums)) if var > 0 else math.copysign(math.inf, mean)

    @property
    def solved_gain(self) -> float:
        """Solved minus failed episodes' mean shift per group of both, averaged (nats a token)."""
        groups: dict[tuple[int, int], list[EpisodeShift]] = defaultdict(list)
        for e in self.episodes:
            groups[e.group].append(e)
        gains = []
        for eps in groups.values():
            won = [e.shift for e in eps if e.solved]
            lost = [e.shift for e in eps if not e.solved]
            if won and lost:
                gains.append(sum(won) / len(won) - sum(lost) / len(lost))
        return sum(gains) / len(gains) if gains else 0.0

    @property
    def learned(self) -> bool:
        """Answers moved as asked, solved gained on failed, observations moved less than answers."""
        return (
            self.weighted > 0
            and self.solved_gain > 0
            and abs(self.observation_weighted) < self.weighted
        )

    def summary(self) -> str:
        n = len({e.group for e in self.episodes})
        return (
            f"{len(self.episodes)} episodes in {n} groups: advantage-weighted shift "
            f"{self.weighted:+.4f} nats/token (z={self.z:.1f}), solved minus failed "
            f"{self.solved_gain:+.4f} nats/token; observations {self.observation_weighted:+.4f}"
        )


LOGIT_BUDGET = 1 << 25
"""Logits (rows x ~512 scored tokens x vocabulary) one forward may hold."""
ROWS_PER_FORWARD = 16
"""Most episodes a forward scores."""


def episodes_logprobs(
    loaded: LoadedModel, episodes: Sequence[CapturedEpisode], env: EnvConfig
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Log-probabilities under `loaded` of each episode's answer tokens and of its observation
    tokens (after the first answer, no image placeholder), the whole conversation one forward."""
    tok = loaded.tokenizer
    prompts = [
        loaded.encoder.encode(turn_prompts(e.trajectory, env, history=None)[-1]) for e in episodes
    ]
    finals = [tok.encode(e.trajectory.turns[-1].text, add_special_tokens=False) for e in episodes]
    batch = build_batch(loaded, prompts, finals)
    width = batch.input_ids.shape[1]
    header = tok.encode(GENERATION_HEADER, add_special_tokens=False)
    spans = [
        _scored_positions(loaded, header, batch.input_ids[b].tolist(), width - int(n))
        for b, n in enumerate(batch.attention_mask.sum(1))
    ]
    longest = max(len(a) + len(o) for a, o in spans)
    if longest == 0:
        return [(torch.zeros(0), torch.zeros(0)) for _ in episodes]
    # each scored token is read at the column before it; short rows repeat their last column
    cols = [[i - 1 for i in a + o] or [width - 2] for a, o in spans]
    at = torch.tensor([c + c[-1:] * (longest - len(c)) for c in cols], device=loaded.device)
    with torch.no_grad():
        logp = torch.log_softmax(logits_at(loaded, batch, at), -1)
    picked = logp.gather(-1, batch.input_ids.gather(1, at + 1).unsqueeze(-1)).squeeze(-1)
    return [
        (picked[b, : len(a)], picked[b, len(a) : len(a) + len(o)]) for b, (a, o) in enumerate(spans)
    ]


def _scored_positions(
    loaded: LoadedModel, header: list[int], ids: list[int], first: int
) -> tuple[list, list]:
    """Positions of a left-padded row's answer tokens (after each `header`) and observations."""
    starts = [i + len(header) for i in range(first, len(ids)) if ids[i : i + len(header)] == header]
    answers = []  # each answer runs from its header to its end of turn (the last: to the end)
    for i in starts:
        while i < len(ids) and ids[i] != loaded.eos_id:
            answers.append(i)
            i += 1
    if not answers:
        return [], []
    taken, pad = set(answers), loaded.model.config.image_token_id
    return answers, [i for i in range(starts[0], len(ids)) if i not in taken and ids[i] != pad]


def both_logprobs(
    episodes: Sequence[CapturedEpisode], a: LoadedModel, b: LoadedModel, env: EnvConfig
) -> tuple[list, list]:
    """`episodes_logprobs` under `a` and under `b`, in chunks whose logits fit `LOGIT_BUDGET`."""
    rows = max(1, min(ROWS_PER_FORWARD, LOGIT_BUDGET // (512 * a.model.lm_head.out_features)))
    chunks = [episodes[i : i + rows] for i in range(0, len(episodes), rows)]
    return tuple([x for c in chunks for x in episodes_logprobs(m, c, env)] for m in (a, b))


def rescore(
    episodes: Sequence[CapturedEpisode],
    *,
    before: str | Path | LoadedModel,
    after: str | Path | LoadedModel,
    env: EnvConfig,
) -> Rescore:
    """Each episode's mean per-token answer change from `before` to `after` (dirs or models)."""
    a, b = (m if isinstance(m, LoadedModel) else load(m) for m in (before, after))
    # an answer holding the image placeholder got no gradient and cannot be re-encoded
    pad = a.encoder.image_pad
    scored = [
        e
        for e in episodes
        if e.advantage != 0.0 and not any(pad in t.text for t in e.trajectory.turns)
    ]
    if not scored:
        raise UsageError(
            "no captured episode has a nonzero advantage: capture more groups "
            "(schedule.capture_groups / --set capture_groups=N) or train on mazes the policy "
            "sometimes solves"
        )
    befores, afters = both_logprobs(scored, a, b, env)
    out = []
    for e, (old, old_obs), (new, new_obs) in zip(scored, befores, afters, strict=True):
        shift = float((new - old).mean()) if old.numel() else 0.0
        obs = float((new_obs - old_obs).mean()) if old_obs.numel() else 0.0
        out.append(EpisodeShift((e.step, e.group), e.advantage, e.trajectory.solved, shift, obs))
    return Rescore(out)
