"""Evaluation on a pinned test set: solve rate with its maze-clustered 95% interval, pass@k,
difficulty, failures, as one `EvalResult` for every source: docs/mazes.md#evaluation."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlkit.env.maze_env import EnvConfig, env_for_set
from rlkit.episodes.failures import KINDS, failure_counts
from rlkit.episodes.policies import Policy
from rlkit.episodes.rollout import Trajectory, load_trajectories, run_episodes, save_trajectories
from rlkit.errors import UsageError
from rlkit.fsio import atomic_write_text
from rlkit.maze.core import Maze, difficulty
from rlkit.maze.sets import pinned_set, pinned_set_hash
from rlkit.stats import (
    CI_METHOD,
    EXACT_CI_METHOD,
    FLAT_CI_METHOD,
    PairedByMaze,
    clopper_pearson,
    maze_interval,
    paired_by_maze,
    pass_at_k,
)


@dataclass
class EvalResult:
    """A policy's results on a test set; `episodes[i][k]` is maze i's k-th sample solved?"""

    policy: str
    set: str
    n_mazes: int
    samples: int
    solve_rate: float
    ci95: tuple[float, float]
    """95% interval of `solve_rate`, by `ci_method`."""
    ci_method: str
    """How `ci95` and each `by_path_length` interval were computed (`rlkit.stats.CI_METHOD`)."""
    test_set_hash: str
    pass_at_k: dict[str, float] = field(default_factory=dict)
    by_path_length: dict[str, dict] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    per_maze: list[dict] = field(default_factory=list)
    mode: str = "sampled"
    step: int | None = None
    trajectories: str | None = None
    """Path of the trajectories JSONL next to the JSON, when saved."""
    protocol: str = "rlkit"
    """`rlkit` (k samples a maze, maze-clustered interval) or `seed` (every maze of the set,
    greedy, one sample each, exact binomial interval: SkyRL's default eval, the seed's)."""
    exact_ci95: tuple[float, float] | None = None
    """With one sample a maze: the exact binomial interval (`EXACT_CI_METHOD`); None with k > 1."""

    @property
    def headline(self) -> str | None:
        """One sample a maze: "28/64 = 43.75% [31.4, 56.7]" (exact 95% interval); None with k > 1."""
        if self.exact_ci95 is None:
            return None
        solved, (lo, hi) = sum(self.flat), self.exact_ci95
        return f"{solved}/{self.n_mazes} = {solved / self.n_mazes:.2%} [{lo:.1%}, {hi:.1%}]"

    @property
    def protocol_label(self) -> str:
        """The protocol in words, as every plot and line that shows the rate names it."""
        if self.protocol == "seed":
            return "seed's protocol (greedy, one sample a maze)"
        return f"rlkit's protocol ({self.mode}, {self.samples} a maze)"

    @property
    def episodes(self) -> list[list[bool]]:
        return [m["solved"] for m in self.per_maze]

    @property
    def flat(self) -> list[bool]:
        return [s for m in self.per_maze for s in m["solved"]]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ci95"] = list(self.ci95)
        if self.exact_ci95 is not None:
            d["exact_ci95"] = list(self.exact_ci95)
            d["exact_ci_method"] = EXACT_CI_METHOD
            d["headline"] = self.headline
        return d

    @classmethod
    def from_dict(cls, d: dict) -> EvalResult:
        """Read `to_dict`'s JSON; an older file's flat Wilson intervals are recomputed from
        `per_maze`, or kept as `FLAT_CI_METHOD` when it has none."""
        try:
            d = {k: v for k, v in d.items() if k not in ("headline", "exact_ci_method")}
            d = {**d, "ci95": tuple(d["ci95"])}
            if d.get("exact_ci95") is not None:
                d["exact_ci95"] = tuple(d["exact_ci95"])
            if "ci_method" not in d:
                d = _upgrade_intervals(d)
            return cls(**d)
        except (TypeError, KeyError) as e:
            raise UsageError(
                f"not an rlkit eval result ({e}): expected the JSON `rlkit eval --json` writes"
            ) from None

    def save(self, path: str | Path, trajs: list[Trajectory] | None = None) -> Path:
        """Write the JSON (atomically) and, if given, the trajectories beside it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if trajs is not None:
            tpath = save_trajectories(path.with_suffix(".trajectories.jsonl"), trajs)
            self.trajectories = tpath.name
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> EvalResult:
        path = Path(path)
        if not path.is_file():
            raise UsageError(f"no eval result at {path}: run `rlkit eval ... --out {path}` first")
        try:
            data = json.loads(path.read_text())
        except ValueError as e:
            raise UsageError(
                f"{path} is not valid JSON ({e}): the file is damaged; write it again "
                f"(`rlkit eval ... --out {path}`) or remove it"
            ) from None
        return cls.from_dict(data)

    def load_trajectories(self, json_path: str | Path) -> list[Trajectory]:
        if not self.trajectories:
            raise UsageError("this eval result was saved without trajectories: re-run with --out")
        return load_trajectories(Path(json_path).parent / self.trajectories)

    def summary(self) -> str:
        if self.protocol == "seed":
            return (
                f"{self.policy} on {self.set}, the seed's protocol ({self.mode}, one sample a "
                f"maze): {self.headline} solved (95% CI, {EXACT_CI_METHOD})"
            )
        lo, hi = self.ci95
        return (
            f"{self.policy} on {self.set}: {self.solve_rate:.1%} solved "
            f"[{lo:.1%}, {hi:.1%}] over {self.n_mazes} mazes x {self.samples} samples "
            f"(95% CI, {self.ci_method})"
        )


def _by_path_length(per_maze: list[dict]) -> dict[str, dict]:
    """Solve rate and interval per shortest-path length, the mazes of each length as clusters."""
    groups: dict[int, list[list[bool]]] = defaultdict(list)
    for m in per_maze:
        groups[m["path_length"]].append(m["solved"])
    return {
        str(n): {
            "mazes": len(g),
            "episodes": sum(map(len, g)),
            "solve_rate": sum(map(sum, g)) / sum(map(len, g)),
            "ci95": list(maze_interval(g)),
        }
        for n, g in sorted(groups.items())
    }


def _upgrade_intervals(d: dict) -> dict:
    """An eval dict from before `ci_method`: maze-clustered intervals from its per-maze results."""
    per_maze = d.get("per_maze") or []
    if not per_maze or not all("solved" in m for m in per_maze):
        return {**d, "ci_method": FLAT_CI_METHOD}
    d = {**d, "ci95": maze_interval([m["solved"] for m in per_maze]), "ci_method": CI_METHOD}
    if d.get("by_path_length"):  # flat intervals are not kept under a clustered name
        known = all("path_length" in m for m in per_maze)
        d["by_path_length"] = _by_path_length(per_maze) if known else {}
    return d


def summarize(
    trajs: list[Trajectory],
    mazes: list[Maze],
    *,
    policy: str,
    set_name: str,
    samples: int,
    mode: str = "sampled",
    step: int | None = None,
    protocol: str = "rlkit",
) -> EvalResult:
    """Aggregate episodes (ordered maze-major, `samples` per maze) into an EvalResult."""
    if len(trajs) != len(mazes) * samples:
        raise UsageError(
            f"{len(trajs)} episodes for {len(mazes)} mazes x {samples} samples: counts differ"
        )
    per_maze = []
    for i, maze in enumerate(mazes):
        d = difficulty(maze)
        per_maze.append(
            {
                "index": i,
                "hash": maze.content_hash,
                "path_length": d.path_length,
                "junctions": d.junctions,
                "solved": [t.solved for t in trajs[i * samples : (i + 1) * samples]],
            }
        )
    episodes = [m["solved"] for m in per_maze]
    n_solved = sum(map(sum, episodes))
    pak = {
        f"pass@{k}": sum(pass_at_k(samples, sum(e), k) for e in episodes) / len(mazes)
        for k in sorted({1, samples} | ({2, 4, 8} & set(range(1, samples + 1))))
    }
    return EvalResult(
        policy=policy,
        set=set_name,
        n_mazes=len(mazes),
        samples=samples,
        solve_rate=n_solved / len(trajs),
        ci95=maze_interval(episodes),
        ci_method=CI_METHOD,
        test_set_hash=pinned_set_hash(set_name),
        pass_at_k=pak,
        by_path_length=_by_path_length(per_maze),
        failures=failure_counts(trajs),
        per_maze=per_maze,
        mode=mode,
        step=step,
        protocol=protocol,
        exact_ci95=clopper_pearson(n_solved, len(trajs)) if samples == 1 else None,
    )


EVAL_SEED = 1234
"""The sampling seed of every checkpoint eval: each meets the same random streams, so they pair."""


def evaluate(
    policy: Policy,
    *,
    set_name: str = "test",
    samples: int = 1,
    seed: int = 0,
    cfg: EnvConfig | None = None,
    history: int | None = 1,
    progress: bool = False,
    mode: str = "sampled",
    step: int | None = None,
    n_mazes: int | None = None,
    protocol: str = "rlkit",
) -> tuple[EvalResult, list[Trajectory]]:
    """Play every maze of the pinned set (or its first `n_mazes`) `samples` times and summarise;
    `protocol="seed"` checks the eval is the seed's."""
    check_protocol(protocol, samples=samples, mode=mode, n_mazes=n_mazes)
    mazes = pinned_set(set_name)
    if n_mazes is not None:
        if not 1 <= n_mazes <= len(mazes):
            raise UsageError(
                f"n_mazes ({n_mazes}) must be 1..{len(mazes)} ({set_name} has that many)"
            )
        mazes = mazes[:n_mazes]
    cfg = cfg or env_for_set(set_name)
    trajs = run_episodes(
        policy, mazes, cfg, samples=samples, seed=seed, history=history, progress=progress
    )
    result = summarize(
        trajs,
        mazes,
        policy=policy.name,
        set_name=set_name,
        samples=samples,
        mode=mode,
        step=step,
        protocol=protocol,
    )
    return result, trajs


PROTOCOLS = ("rlkit", "seed")
"""The two ways rlkit reports a solve rate (`EvalResult.protocol`)."""


def check_protocol(protocol: str, *, samples: int, mode: str, n_mazes: int | None) -> None:
    """One-line errors for an eval that does not follow the protocol it names."""
    if protocol not in PROTOCOLS:
        raise UsageError(f"unknown protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}")
    if protocol == "seed" and (samples != 1 or mode != "greedy" or n_mazes is not None):
        raise UsageError(
            "the seed's protocol is every maze of the set, greedy, one sample a maze: drop "
            "--samples, --mazes and sampling options (rlkit eval --protocol seed sets greedy)"
        )


def compare(a: EvalResult, b: EvalResult) -> PairedByMaze:
    """Is B better than A? Paired by maze: an exact sign-flip test on the per-maze differences
    in solve fraction, and an interval on B's rate minus A's (`rlkit.stats.PAIRED_METHOD`)."""
    if a.test_set_hash != b.test_set_hash or a.samples != b.samples:
        raise UsageError(
            "paired comparison needs the same test set and samples per maze in both results"
        )
    return paired_by_maze(a.episodes, b.episodes)


__all__ = ["KINDS", "PROTOCOLS", "EvalResult", "check_protocol", "compare", "evaluate", "summarize"]
