"""Honest statistics for small evaluation sets (pure functions, hand-checkable): solve rates with a
95% interval clustered by maze (`CI_METHOD`), unbiased pass@k, and an exact paired sign-flip test
(`PAIRED_METHOD`). Why these and what they assume: docs/statistics.md."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlkit.errors import UsageError

Z95 = 1.959964
CI_METHOD = "wilson-maze-deff"
"""Wilson on the maze-clustered effective n (above): the interval of every rate rlkit stores."""
FLAT_CI_METHOD = "wilson-episodes"
"""Wilson on all episodes as if independent: old eval files without per-maze results hold it."""
EXACT_CI_METHOD = "clopper-pearson"
"""The exact binomial interval of a one-sample-a-maze eval (the seed's protocol)."""
CI_METHODS = {
    CI_METHOD: "Wilson on the effective n, episodes clustered by maze",
    FLAT_CI_METHOD: "Wilson on all episodes as if independent (an old file: too narrow)",
}
"""Each `ci_method` in words, for tables and legends."""
PAIRED_METHOD = "exact sign-flip test on per-maze solve-fraction differences; paired t interval"


def _wilson(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (good at p near 0 or 1, small n)."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise UsageError(f"successes ({successes}) must be in [0, n={n}]")
    return _wilson(successes / n, n)


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (n up to a few thousand)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    lgn = math.lgamma(n + 1)
    terms = [
        lgn - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        for i in range(k + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def _solve(
    f: Callable[[float], float], target: float, rising: bool, hi: float = 1.0, steps: int = 60
) -> float:
    """The x in [0, hi] where the monotone f(x) crosses `target` (bisection, `steps` halvings)."""
    lo = 0.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        if (f(mid) < target) == rising:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """`EXACT_CI_METHOD`: the exact binomial interval (each tail at most (1 - level) / 2)."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise UsageError(f"successes ({successes}) must be in [0, n={n}]")
    a = (1 - level) / 2
    # the lower end: the p at which seeing >= successes has probability a; the upper end: the
    # p at which seeing <= successes has probability a
    lo, hi = 0.0, 1.0
    if successes > 0:
        lo = _solve(lambda p: 1 - _binom_cdf(successes - 1, n, p), a, rising=True)
    if successes < n:
        hi = _solve(lambda p: _binom_cdf(successes, n, p), a, rising=False)
    return (lo, hi)


def design_effect(successes: Sequence[int], trials: Sequence[int]) -> float:
    """Pooled rate's variance over its binomial one, mazes as clusters (>= 1)."""
    if len(successes) != len(trials):
        raise UsageError(f"{len(successes)} success counts for {len(trials)} mazes: counts differ")
    for y, n in zip(successes, trials, strict=True):
        if not 0 <= y <= n:
            raise UsageError(f"a maze with {y} of {n} episodes solved: successes must be in [0, n]")
    total, solved = sum(trials), sum(successes)
    if total == 0:
        return 1.0
    if solved in (0, total):
        return float(max(trials))
    num = sum((total * y - solved * n) ** 2 for y, n in zip(successes, trials, strict=True))
    den = total * solved * (total - solved)
    return max(1.0, num / den)


def clustered_wilson(successes: Sequence[int], trials: Sequence[int]) -> tuple[float, float]:
    """`CI_METHOD`: Wilson on n_eff = episodes / design effect; Wilson(Y, N) when all n_i = 1."""
    total, solved = sum(trials), sum(successes)
    deff = design_effect(successes, trials)
    if total == 0:
        return (0.0, 1.0)
    return _wilson(solved / total, total / deff)


def maze_interval(per_maze: Sequence[Sequence[bool]]) -> tuple[float, float]:
    """`clustered_wilson` from per-maze outcome lists (`per_maze[i][j]`: sample j of maze i)."""
    return clustered_wilson([sum(s) for s in per_maze], [len(s) for s in per_maze])


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021)."""
    if not 1 <= k <= n:
        raise UsageError(f"pass@k needs 1 <= k ({k}) <= samples ({n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# paired comparison


def t_quantile(df: int, level: float = 0.95) -> float:
    """Two-sided Student-t critical value, P(|T_df| <= t) = level (A&S 26.7.3-4, bisection)."""
    if df < 1:
        raise UsageError(f"a t interval needs df >= 1, got {df}")

    def central(t: float) -> float:
        theta = math.atan(t / math.sqrt(df))
        s, c2 = math.sin(theta), math.cos(theta) ** 2
        if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
            term, total = 1.0, 1.0
            for j in range(1, (df - 1) // 2):
                term *= c2 * (2 * j) / (2 * j + 1)
                total += term
            extra = s * math.cos(theta) * total if df > 1 else 0.0
            return 2 / math.pi * (theta + extra)
        term, total = 1.0, 1.0  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        for j in range(1, df // 2):
            term *= c2 * (2 * j - 1) / (2 * j)
            total += term
        return s * total

    return _solve(central, level, rising=True, hi=1e3, steps=200)


def sign_flip_p_value(diffs: Sequence[int]) -> float:
    """Two-sided exact p of sum(diffs) when each integer difference's sign is a fair coin."""
    mags = [abs(int(d)) for d in diffs if d]
    observed = abs(sum(int(d) for d in diffs))
    counts = {0: 1}  # sum of signed magnitudes -> number of sign patterns
    for m in mags:
        nxt: dict[int, int] = {}
        for s, c in counts.items():
            nxt[s + m] = nxt.get(s + m, 0) + c
            nxt[s - m] = nxt.get(s - m, 0) + c
        counts = nxt
    extreme = sum(c for s, c in counts.items() if abs(s) >= observed)
    return min(1.0, extreme / 2 ** len(mags))


@dataclass(frozen=True)
class PairedByMaze:
    """A and B on the same mazes (same k samples each), compared maze by maze."""

    n_mazes: int
    samples: int
    rate_a: float
    rate_b: float
    diff: float
    """rate_b - rate_a, the mean of the per-maze solve-fraction differences."""
    ci95: tuple[float, float]
    """95% interval on `diff` (paired t over mazes, clipped to [-1, 1])."""
    b_better: int
    """Mazes where B solved a larger fraction of its samples than A."""
    a_better: int
    """Mazes where A did."""
    p_value: float
    """Two-sided exact sign-flip p-value (McNemar's exact test when samples = 1)."""
    method: str = PAIRED_METHOD

    def verdict(self, a: str = "A", b: str = "B") -> str:
        """In words: which is better, by how many points, with the interval and the evidence."""
        lo, hi = self.ci95
        if self.p_value >= 0.05:
            return (
                f"no significant difference between {a} and {b}: {b} - {a} = "
                f"{self.diff * 100:+.1f} points (95% CI {lo * 100:+.1f} to {hi * 100:+.1f}), "
                f"p={self.p_value:.3g} over {self.n_mazes} mazes"
            )
        better, worse, sign = (b, a, 1) if self.diff > 0 else (a, b, -1)
        ahead, behind = (self.b_better, self.a_better)[::sign]
        lo, hi = sorted((sign * lo, sign * hi))
        return (
            f"{better} is better than {worse} by {abs(self.diff) * 100:.1f} points "
            f"(95% CI {lo * 100:.1f} to {hi * 100:.1f}), p={self.p_value:.3g}: "
            f"ahead on {ahead} of {self.n_mazes} mazes, behind on {behind}"
        )

    __str__ = verdict


def paired_by_maze(a: Sequence[Sequence[bool]], b: Sequence[Sequence[bool]]) -> PairedByMaze:
    """Compare per-maze outcomes `a[i][j]`, `b[i][j]` (sample j of maze i) of A and B."""
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b, strict=False)):
        raise UsageError(
            f"paired test needs the same mazes and samples per maze: got {len(a)} vs {len(b)} mazes"
        )
    if not a:
        raise UsageError("paired test needs at least one maze")
    k = len(a[0])
    if k == 0 or any(len(x) != k for x in a):
        raise UsageError("paired test needs the same number of samples (>= 1) for every maze")
    m = len(a)
    ints = [sum(y) - sum(x) for x, y in zip(a, b, strict=True)]  # k * d_i
    diff = sum(ints) / (m * k)
    if m > 1:
        var = sum((d / k - diff) ** 2 for d in ints) / (m - 1)
        half = t_quantile(m - 1) * math.sqrt(var / m)
    else:
        half = 2.0  # one maze: no spread to estimate, the interval is everything
    return PairedByMaze(
        n_mazes=m,
        samples=k,
        rate_a=sum(map(sum, a)) / (m * k),
        rate_b=sum(map(sum, b)) / (m * k),
        diff=diff,
        ci95=(max(-1.0, diff - half), min(1.0, diff + half)),
        b_better=sum(d > 0 for d in ints),
        a_better=sum(d < 0 for d in ints),
        p_value=sign_flip_p_value(ints),
    )
