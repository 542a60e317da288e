"""Policies: anything that answers a batch of maze observations with text. Scripted policies
(`random`, `oracle`, `eps-oracle:E`) answer through the same env and parser as a model:
docs/mazes.md#episodes-and-policies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import Action
from rlkit.maze.parsing import format_action

SCRIPTED = ("random", "oracle", "eps-oracle:E")

MoveProbs = tuple[float, float, float, float]
"""P(up), P(down), P(left), P(right): `Action` order, summing to 1."""

UNIFORM: MoveProbs = (0.25, 0.25, 0.25, 0.25)


@dataclass
class Response:
    """One answer. Token fields are None for scripted policies."""

    text: str
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    """Log-probability of each response token under the sampling distribution."""
    move_probs: MoveProbs | None = None
    """The policy's probability of each move at this turn (`MoveProbs`), None when unknown."""


@runtime_checkable
class Policy(Protocol):
    name: str

    def act(
        self,
        states: Sequence[rules.State],
        messages: Sequence[list[dict]],
        rngs: Sequence[np.random.Generator],
    ) -> list[Response]:
        """Answer each live episode i: `messages[i]` is its conversation as the model sees it,
        `rngs[i]` its own random stream (so an episode's answers don't depend on its batch)."""


class RandomPolicy:
    """Uniformly random answers among the game's actions: the floor any policy must beat."""

    name = "random"

    def act(self, states, messages, rngs):
        out = []
        for s, rng in zip(states, rngs, strict=True):
            options = rules.game_moves(s.maze)
            move = options[int(rng.integers(len(options)))]
            probs = UNIFORM if s.maze.game == "cells" else None  # four moves: the whole choice
            out.append(Response(format_action(move), move_probs=probs))
        return out


class EpsOraclePolicy:
    """The oracle's answer with probability 1-eps, a uniformly random action otherwise."""

    def __init__(self, eps: float) -> None:
        if not 0.0 <= eps <= 1.0:
            raise UsageError(f"eps-oracle epsilon ({eps}) must be in [0, 1]")
        self.eps = eps
        self.name = "oracle" if eps == 0.0 else f"eps-oracle:{eps:g}"

    def act(self, states, messages, rngs):
        out = []
        for s, rng in zip(states, rngs, strict=True):
            explore = self.eps > 0 and rng.random() < self.eps
            best = rules.best_move(s)
            options = rules.game_moves(s.maze)
            a = options[int(rng.integers(len(options)))] if explore else best
            probs = self.move_probs(best) if s.maze.game == "cells" else None
            out.append(Response(format_action(a), move_probs=probs))
        return out

    def move_probs(self, best: Action) -> MoveProbs:
        """Exactly what `act` draws from: eps spread evenly over the four moves, the rest on
        the BFS-optimal one (one-hot for the oracle)."""
        p = [self.eps / len(Action)] * len(Action)
        p[best] += 1.0 - self.eps
        return (p[0], p[1], p[2], p[3])


def OraclePolicy() -> EpsOraclePolicy:  # noqa: N802 - reads as a class at call sites
    """Always the BFS-optimal move (then `stop` on a squares maze's target)."""
    return EpsOraclePolicy(0.0)


def scripted_policy(name: str) -> Policy:
    """`random`, `oracle` or `eps-oracle:E` (E in [0, 1])."""
    if name == "random":
        return RandomPolicy()
    if name == "oracle":
        return OraclePolicy()
    if name.startswith("eps-oracle:"):
        try:
            eps = float(name.split(":", 1)[1])
        except ValueError:
            raise UsageError(
                f"bad policy {name!r}: write eps-oracle:E with E a number, e.g. eps-oracle:0.2"
            ) from None
        return EpsOraclePolicy(eps)
    raise UsageError(
        f"unknown scripted policy {name!r}: use one of {', '.join(SCRIPTED)} or a model directory"
    )


def is_scripted(name: str) -> bool:
    return name in ("random", "oracle") or name.startswith("eps-oracle:")
