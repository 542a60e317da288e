"""Policies: anything that answers a batch of maze observations with text.

Scripted policies (`random`, `oracle`, `eps-oracle:E`) write model-style answers and go through
the same env and parser as a model, so baselines and models are measured by one code path. A
model policy (see `rlkit.model.policy`) also returns the token ids and log-probabilities it sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import Action, optimal_action
from rlkit.maze.parsing import format_action

SCRIPTED = ("random", "oracle", "eps-oracle:E")


@dataclass
class Response:
    """One answer. Token fields are None for scripted policies."""

    text: str
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    """Log-probability of each response token under the sampling distribution."""


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
        ...


class RandomPolicy:
    """Uniformly random moves: the floor any learned policy must beat."""

    name = "random"

    def act(self, states, messages, rngs):
        return [Response(format_action(Action(int(rng.integers(len(Action)))))) for rng in rngs]


class EpsOraclePolicy:
    """The BFS-optimal move with probability 1-eps, a uniformly random one otherwise."""

    def __init__(self, eps: float) -> None:
        if not 0.0 <= eps <= 1.0:
            raise UsageError(f"eps-oracle epsilon ({eps}) must be in [0, 1]")
        self.eps = eps
        self.name = "oracle" if eps == 0.0 else f"eps-oracle:{eps:g}"

    def act(self, states, messages, rngs):
        out = []
        for s, rng in zip(states, rngs, strict=True):
            explore = self.eps > 0 and rng.random() < self.eps
            a = Action(int(rng.integers(len(Action)))) if explore else optimal_action(s.maze, s.pos)
            out.append(Response(format_action(a if a is not None else Action.UP)))
        return out


def OraclePolicy() -> EpsOraclePolicy:  # noqa: N802 - reads as a class at call sites
    """Always the BFS-optimal move: solves every maze in the fewest turns."""
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
