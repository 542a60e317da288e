"""rlkit.stats: the maze-clustered interval and the paired by-maze test, by hand and by coverage."""

import math

import numpy as np
import pytest

from rlkit.errors import UsageError
from rlkit.stats import (
    clopper_pearson,
    clustered_wilson,
    design_effect,
    maze_interval,
    paired_by_maze,
    sign_flip_p_value,
    t_quantile,
    wilson,
)


def test_design_effect_hand_computed():
    # deff = sum (N y_i - Y n_i)^2 / (N Y (N - Y))
    # y = [2, 0] of 2 each: N=4, Y=2: ((8-4)^2 + (0-4)^2) / (4*2*2) = 32/16 = 2 (= k: all-or-none)
    assert design_effect([2, 0], [2, 2]) == 2.0
    # y = [2, 1, 0, 1]: N=8, Y=4: (8^2 + 0 + 8^2 + 0) / (8*4*4) = 128/128 = 1 (no correlation)
    assert design_effect([2, 1, 0, 1], [2] * 4) == 1.0
    # y = [2, 2, 0, 1]: N=8, Y=5: (6^2 + 6^2 + 10^2 + 2^2) / (8*5*3) = 176/120; the same as
    # 1 + (k-1) ICC form k Var_M(f) / (p(1-p)) = 2 * 0.171875 / 0.234375
    assert design_effect([2, 2, 0, 1], [2] * 4) == pytest.approx(176 / 120)
    assert design_effect([2, 2, 0, 1], [2] * 4) == pytest.approx(2 * 0.171875 / 0.234375)
    # every maze half solved: deff 0 by the formula, floored at 1 (never more than N episodes)
    assert design_effect([1, 1, 1], [2, 2, 2]) == 1.0
    # all solved / none solved: no spread to estimate from, so the mazes count (deff = k)
    assert design_effect([4, 4, 4], [4, 4, 4]) == 4.0 and design_effect([0, 0], [4, 4]) == 4.0
    with pytest.raises(UsageError, match="successes must be in"):
        design_effect([3], [2])


def test_clustered_wilson_is_wilson_at_k1_and_on_effective_n():
    rng = np.random.default_rng(0)
    for _ in range(200):  # exact equality (same floats), not approx: k = 1 *is* Wilson
        y = rng.integers(0, 2, size=int(rng.integers(1, 80))).tolist()
        assert clustered_wilson(y, [1] * len(y)) == wilson(sum(y), len(y))
    # deff 2 on 4 episodes: Wilson's formula at p = 1/2, n_eff = 2, i.e. wilson(1, 2)
    assert clustered_wilson([2, 0], [2, 2]) == wilson(1, 2)
    assert maze_interval([[True, True], [False, False]]) == wilson(1, 2)
    # 64 mazes all solved at k = 2: counted as 64 mazes, [0.9434, 1] rather than [0.9709, 1]
    lo, hi = maze_interval([[True, True]] * 64)
    assert lo == pytest.approx(64 / (64 + 1.959964**2), abs=1e-9) and hi == 1.0
    assert wilson(128, 128)[0] == pytest.approx(128 / (128 + 1.959964**2), abs=1e-9)


def test_t_quantile_table_values():
    for df, t in ((1, 12.7062), (2, 4.3027), (5, 2.5706), (10, 2.2281), (63, 1.9983)):
        assert t_quantile(df) == pytest.approx(t, abs=1e-4)


def test_sign_flip_hand_computed_and_mcnemar_at_k1():
    # magnitudes 2, 1, 1; |observed| = 2; sums of the 8 sign patterns: 4 2 2 0 0 -2 -2 -4
    assert sign_flip_p_value([2, 1, -1]) == 6 / 8
    assert sign_flip_p_value([0, 0]) == 1.0 and sign_flip_p_value([1]) == 1.0
    # k = 1: exactly McNemar's exact test. A-only 1, B-only 9, 5 concordant:
    # p = 2 * P(X <= 1 | Bin(10, 1/2)) = 2 * 11/1024
    a = [[True]] * 1 + [[False]] * 9 + [[True]] * 5
    b = [[False]] * 1 + [[True]] * 9 + [[True]] * 5
    r = paired_by_maze(a, b)
    assert r.p_value == 22 / 1024 and (r.b_better, r.a_better) == (9, 1)
    assert r.diff == pytest.approx(8 / 15)


def test_paired_by_maze_interval_and_verdict_hand_computed():
    # 3 mazes x 2 samples: per-maze differences d = [1, 0.5, -0.5], mean 1/3,
    # s^2 = ((2/3)^2 + (1/6)^2 + (5/6)^2) / 2 = 7/12, half = t(2) sqrt(7/36) = 4.3027 * 0.44096
    a = [[False, False], [False, False], [True, False]]
    b = [[True, True], [True, False], [False, False]]
    r = paired_by_maze(a, b)
    assert (r.n_mazes, r.samples, r.rate_a, r.rate_b) == (3, 2, 1 / 6, 1 / 2)
    assert r.diff == pytest.approx(1 / 3) and r.p_value == 0.75
    assert r.ci95 == (-1.0, 1.0)  # 1/3 +- 1.897, clipped
    assert r.verdict("step 4", "step 8").startswith(
        "no significant difference between step 4 and step 8: step 8 - step 4 = +33.3 points"
    )
    # 20 mazes where B solves 2 of 2 and A 0 of 2, 44 tied: B better by 31.25 points
    a = [[False, False]] * 20 + [[True, False]] * 44
    b = [[True, True]] * 20 + [[True, False]] * 44
    r = paired_by_maze(a, b)
    assert r.diff == pytest.approx(20 / 64) and r.p_value == pytest.approx(2 / 2**20)
    assert r.verdict("step 4", "step 8").startswith("step 8 is better than step 4 by 31.2 points")
    flipped = paired_by_maze(b, a).verdict("step 4", "step 8")
    assert flipped.startswith("step 4 is better than step 8 by 31.2 points (95% CI 19.")
    assert "ahead on 20 of 64 mazes, behind on 0" in flipped
    with pytest.raises(UsageError, match="same mazes and samples"):
        paired_by_maze(a, b[:3])


# Coverage: does the interval contain the family's true solve rate 95% of the time?
COVERAGE_TRIALS = 4000
"""Simulated evals per (k, rate) cell: the coverage estimate's standard error is 0.34 points."""
COVERAGE_TOL = 0.025
"""Allowed |coverage - 95%|. Wilson's own coverage at n = 64 swings between ~94% and ~97% with
p by discreteness (k = 1 rows), so the test asks for that band, not for 95.0%."""
MAZES, CONCENTRATION = 64, 2.0
"""Per-maze solve probabilities ~ Beta(rate * c, (1 - rate) * c), c = 2: intraclass correlation
1 / (c + 1) = 1/3, so easy mazes are solved nearly always and hard ones rarely, as the test sets'
are; a k = 4 eval then has deff = 1 + 3 / 3 = 2."""


def _coverage(k: int, rate: float) -> tuple[float, float]:
    rng = np.random.default_rng([k, round(rate * 100)])
    p = rng.beta(rate * CONCENTRATION, (1 - rate) * CONCENTRATION, size=(COVERAGE_TRIALS, MAZES))
    solved = rng.binomial(k, p).tolist()
    clustered = flat = 0
    for y in solved:
        lo, hi = clustered_wilson(y, [k] * MAZES)
        clustered += lo <= rate <= hi
        lo, hi = wilson(sum(y), MAZES * k)
        flat += lo <= rate <= hi
    return clustered / COVERAGE_TRIALS, flat / COVERAGE_TRIALS


@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("rate", [0.2, 0.5, 0.9])
def test_coverage_clustered_vs_flat_wilson(k, rate):
    clustered, flat = _coverage(k, rate)
    assert abs(clustered - 0.95) <= COVERAGE_TOL, f"clustered covers {clustered:.1%}"
    if k == 1:
        assert flat == clustered  # the same interval
    else:  # flat Wilson on mazes x k episodes is too narrow: ~83% at k = 4, ~73% at k = 8
        assert flat < 0.95 - COVERAGE_TOL - 0.05, f"flat Wilson covers {flat:.1%}"


def test_clopper_pearson_hand_computed():
    # closed forms at the ends: 0 of n -> upper 1 - 0.025^(1/n); n of n -> lower 0.025^(1/n)
    assert clopper_pearson(0, 10) == pytest.approx((0.0, 1 - 0.025**0.1), abs=1e-9)
    assert clopper_pearson(10, 10) == pytest.approx((0.025**0.1, 1.0), abs=1e-9)
    # the seed's 28/64 (R: binom.test(28, 64)$conf.int = 0.3137348 0.5672411)
    assert clopper_pearson(28, 64) == pytest.approx((0.3137348, 0.5672411), abs=1e-7)
    # exact: at each end the tail beyond the count holds 2.5%
    lo, hi = clopper_pearson(28, 64)
    tail = sum(math.comb(64, i) * hi**i * (1 - hi) ** (64 - i) for i in range(29))
    assert tail == pytest.approx(0.025, abs=1e-9)
    tail = sum(math.comb(64, i) * lo**i * (1 - lo) ** (64 - i) for i in range(28, 65))
    assert tail == pytest.approx(0.025, abs=1e-9)
    # wider than Wilson: exact intervals are conservative
    w = wilson(28, 64)
    assert lo < w[0] and hi > w[1]
    with pytest.raises(UsageError, match="must be in"):
        clopper_pearson(65, 64)
