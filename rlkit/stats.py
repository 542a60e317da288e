"""Honest statistics for small evaluation sets (pure functions, hand-checkable).

64 mazes at p ~ 0.44 give a 95% interval of about +-12 points, so every solve rate carries a
Wilson interval, models are sampled k times per maze (pass@k by the unbiased estimator), and
two checkpoints are compared on the same episodes with an exact McNemar test, not by eyeballing
two rates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlkit.errors import UsageError


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (good at p near 0 or 1, small n)."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise UsageError(f"successes ({successes}) must be in [0, n={n}]")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k draws without replacement from n samples with c correct is correct).

    The unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021).
    """
    if not 1 <= k <= n:
        raise UsageError(f"pass@k needs 1 <= k ({k}) <= samples ({n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class McNemar:
    """Paired comparison of A and B on the same episodes."""

    n: int
    a_only: int
    """Episodes A solved and B did not."""
    b_only: int
    """Episodes B solved and A did not."""
    p_value: float
    """Two-sided exact binomial p-value on the discordant pairs."""

    @property
    def verdict(self) -> str:
        if self.p_value >= 0.05:
            return f"no significant difference (p={self.p_value:.3g})"
        better = "B" if self.b_only > self.a_only else "A"
        return (
            f"{better} is better (p={self.p_value:.3g}, {self.b_only} vs {self.a_only} discordant)"
        )


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> McNemar:
    """Exact McNemar test: under H0 the discordant pairs split 50/50."""
    if len(a) != len(b):
        raise UsageError(f"paired test needs the same episodes: got {len(a)} vs {len(b)} results")
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    d = a_only + b_only
    if d == 0:
        return McNemar(len(a), 0, 0, 1.0)
    tail = sum(math.comb(d, i) for i in range(0, min(a_only, b_only) + 1)) / 2**d
    return McNemar(len(a), a_only, b_only, min(1.0, 2 * tail))
