"""The `Run` interface and one implementation a source: `LocalRun`, `SkyRLRunReader` and
`SummaryRun` (a run read elsewhere, as `Run.summary()` carried it); `open_here` picks one."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from rlkit.episodes.evaluate import EvalResult
from rlkit.episodes.rollout import Trajectory
from rlkit.errors import RlkitError, UsageError
from rlkit.maze.sets import TEST_SETS
from rlkit.run import captures
from rlkit.run.captures import CapturedEpisode
from rlkit.run.checkpoints import Checkpoint
from rlkit.run.rundir import RunDir
from rlkit.run.skyrl_dumps import (
    dump_steps,
    eval_greedy,
    read_eval_dump,
    read_eval_dumps,
    read_eval_dumps_by_set,
)
from rlkit.run.skyrl_layout import SkyRLRun, find_skyrl_run, list_checkpoints

RENAMED = {
    "rollout/turns": "rollout/turns_mean",
    "loss/loss_metrics_clip_ratio": "loss/clip_fraction",
}
"""Names older SkyRL runs logged -> the local trainer's (the bridge's `ALIASES` since)."""


class RunNotFound(UsageError):
    """The path is not visible here (e.g. /fsx is not mounted in this kernel)."""


class Run(ABC):
    """What every reader of a run uses; `open_run` picks the implementation."""

    backend: ClassVar[str]
    """"local" (rlkit's GRPO loop) or "skyrl" (SkyRL's trainer)."""

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    def info(self) -> dict[str, Any]:
        """run.json as written ({} when the run has none)."""
        try:
            info = json.loads((self.path / "run.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise RlkitError(f"{self.path / 'run.json'} is not readable JSON ({e})") from e
        return info if isinstance(info, dict) else {}

    def config(self) -> dict[str, Any]:
        """The config the run recorded (updated by a resume that changed it)."""
        return dict(self.info().get("config") or {})

    @property
    def preset(self) -> str | None:
        return self.info().get("preset")

    def metrics(self) -> list[dict[str, Any]]:
        """Every complete metrics.jsonl record, in file order; [] before the first step."""
        return RunDir(self.path).read_metrics()

    @abstractmethod
    def evals(self) -> dict[int, EvalResult]:
        """`{step: EvalResult}` of every evaluated step, ascending; {} before the first."""

    def evals_by_set(self) -> dict[str, dict[int, EvalResult]]:
        """`{set: {step: EvalResult}}`, the training family's set first."""
        evals = self.evals()
        return {evals[min(evals)].set: evals} if evals else {}

    def sampled_evals(self) -> dict[int, EvalResult]:
        """The sampled evals of a run with both protocols (`evals` holds the seed's); else {}."""
        return {}

    def eval_steps(self) -> list[int]:
        """The evaluated steps, ascending, without reading the evals (cheap to poll)."""
        return sorted(self.evals())

    @abstractmethod
    def trajectories(self, step: int) -> list[Trajectory]:
        """The episodes the eval of `step` played, in its EvalResult's order (maze-major)."""

    @abstractmethod
    def checkpoints(self) -> list[Checkpoint]:
        """Every step with a checkpoint or an HF export, oldest first."""

    def latest_checkpoint(self) -> Checkpoint | None:
        """The newest complete checkpoint, or None."""
        return next((c for c in reversed(self.checkpoints()) if c.complete), None)

    def capture_root(self) -> Path | None:
        """The dir whose rollouts/ holds the captured training rollouts (None: not here)."""
        return self.path

    def capture_steps(self) -> list[int]:
        """The steps whose training rollouts were captured, oldest first (cheap to poll)."""
        root = self.capture_root()
        return captures.capture_steps(root) if root is not None else []

    def captures(self, step: int) -> list[CapturedEpisode]:
        """The captured episodes of training step `step` (UsageError: not captured)."""
        root = self.capture_root()
        if root is None:
            raise UsageError(
                f"{self.path} holds no captured training rollouts: open the run dir "
                "(they are RUN/rollouts/global_step_N.jsonl)"
            )
        return captures.read_step(root, step)

    def warm_start_end(self, records: list[dict[str, Any]] | None = None) -> int | None:
        """The last warm-start step (where GRPO took over), None without a logged warm start."""
        records = self.metrics() if records is None else records
        steps = [r["step"] for r in records if r.get("train/phase") == "warm_start"]
        return max(steps, default=None)

    def describe(self) -> str:
        """One line: name, backend, preset, steps logged, evals and checkpoints."""
        metrics, evals = self.metrics(), self.evals()
        last = max((r.get("step", -1) for r in metrics), default=None)
        preset = f" preset {self.preset}," if self.preset else ""
        return (
            f"{self.name}: {self.backend} run,{preset} last step {last}, "
            f"{len(evals)} evals, {sum(c.complete for c in self.checkpoints())} checkpoints"
        )

    def summary(self, captured: int = 1) -> dict[str, Any]:
        """The run as JSON for a reader elsewhere: no eval episodes, the newest `captured`
        captured steps (~20 KB a step; one that cannot be read as its one-line error)."""
        steps = self.capture_steps()
        brought: dict[str, list[dict]] = {}
        errors: dict[str, str] = {}
        for step in steps[len(steps) - captured :] if captured > 0 else []:
            try:
                episodes = [e.to_dict() for e in self.captures(step)]
                json.dumps(episodes, allow_nan=False)  # a reading job prints strict JSON
                brought[str(step)] = episodes
            except RlkitError as e:
                errors[str(step)] = str(e)
            except ValueError:
                errors[str(step)] = (
                    f"step {step}'s captured rollouts of {self.name} hold a non-finite number "
                    f"(NaN or inf), which JSON cannot carry: read them where the files are"
                )
        return {
            "name": self.name,
            "backend": self.backend,
            "path": str(self.path),
            "info": self.info(),
            "config": self.config(),
            "metrics": self.metrics(),
            "evals": {str(s): r.to_dict() for s, r in self.evals().items()},
            "checkpoints": [c.to_dict() for c in self.checkpoints()],
            "capture_steps": steps,
            "captures": brought,
            "capture_errors": errors,
        }


class LocalRun(Run):
    """A run of rlkit's local GRPO loop: run.json, metrics.jsonl, global_step_N/, evals/."""

    backend = "local"

    def __init__(self, path: Path) -> None:
        super().__init__(path, path.name)
        self.dir = RunDir(path)

    def evals(self) -> dict[int, EvalResult]:
        out = {}
        for step in self.dir.eval_steps():
            result = EvalResult.from_dict(self.dir.read_eval(step))
            if result.step is None:
                result.step = step  # the file name is the authority on which checkpoint it scored
            out[step] = result
        return out

    def eval_steps(self) -> list[int]:
        return self.dir.eval_steps()

    def evals_by_set(self) -> dict[str, dict[int, EvalResult]]:
        by_set = super().evals_by_set()
        for name in sorted(TEST_SETS):
            files = sorted((self.dir.evals_dir / name).glob("global_step_*.json"))
            results = [EvalResult.load(f) for f in files]
            if results and name not in by_set:
                by_set[name] = dict(sorted((int(r.step or 0), r) for r in results))
        return by_set

    def trajectories(self, step: int) -> list[Trajectory]:
        path = self.dir.eval_path(step)
        return EvalResult.load(path).load_trajectories(path)

    def checkpoints(self) -> list[Checkpoint]:
        return self.dir.checkpoints()


class SkyRLRunReader(Run):
    """A run of SkyRL's trainer: its run dir (ckpt_path) and export dir (HF exports, dumps)."""

    backend = "skyrl"

    def __init__(self, where: SkyRLRun) -> None:
        super().__init__(where.run_dir or where.export_dir, where.name)
        self.where = where

    def info(self) -> dict[str, Any]:
        return super().info() if self.where.run_dir is not None else {}

    def config(self) -> dict[str, Any]:
        """run.json's config and, under `datasets`, the entry's dataset manifest."""
        config = super().config()
        manifest = self.where.run_dir / "data" / "manifest.json" if self.where.run_dir else None
        if manifest is not None and manifest.is_file():  # absent until the entry writes it
            try:
                config["datasets"] = json.loads(manifest.read_text(encoding="utf-8"))
            except ValueError as e:
                raise RlkitError(
                    f"{manifest} is not JSON ({e}): the run data dir is damaged"
                ) from e
        return config

    def metrics(self) -> list[dict[str, Any]]:
        """metrics.jsonl, older bridges' names read as today's (`RENAMED`)."""
        if self.where.run_dir is None:
            return []
        return [{RENAMED.get(k, k): v for k, v in r.items()} for r in super().metrics()]

    def capture_root(self) -> Path | None:
        return self.where.run_dir

    def evals(self) -> dict[int, EvalResult]:
        return next(iter(self.evals_by_set().values()), {})  # {} while nothing is evaluated

    def _eval_set(self) -> str | None:
        return ((self.config().get("entry") or {}).get("task") or {}).get("eval_set")

    def evals_by_set(self) -> dict[str, dict[int, EvalResult]]:
        if not (self.where.export_dir / "dumped_evals").is_dir():
            return {}  # nothing evaluated yet
        greedy = eval_greedy(self.config())  # SkyRL's default greedy eval: the seed's protocol
        by_set = read_eval_dumps_by_set(self.where.export_dir, policy=self.name, greedy=greedy)
        first = self._eval_set()
        return dict(sorted(by_set.items(), key=lambda kv: kv[0] != first))

    def sampled_evals(self) -> dict[int, EvalResult]:
        if (where := self.where.sampled_dir) is None:
            return {}
        return read_eval_dumps(where, policy=self.name, greedy=False, eval_set=self._eval_set())

    def eval_steps(self) -> list[int]:
        return dump_steps(self.where.export_dir)

    def trajectories(self, step: int) -> list[Trajectory]:
        return read_eval_dump(self.where.export_dir, step).trajectories(self.name)

    def checkpoints(self) -> list[Checkpoint]:
        return list_checkpoints(self.where.run_dir, self.where.export_dir)


class SummaryRun(Run):
    """A run read elsewhere (`Run.summary()`, through a Ray job): no eval episodes."""

    def __init__(self, summary: dict[str, Any]) -> None:
        try:
            super().__init__(Path(summary["path"]), str(summary["name"]))
            self.backend = str(summary["backend"])  # type: ignore[misc]
            self._info = dict(summary.get("info") or {})
            self._config = dict(summary.get("config") or self._info.get("config") or {})
            self._metrics = list(summary.get("metrics") or [])
            self._evals = {
                int(s): EvalResult.from_dict(d) for s, d in (summary.get("evals") or {}).items()
            }
            self._ckpts = [Checkpoint.from_dict(c) for c in summary.get("checkpoints") or []]
            self._capture_steps = sorted(int(s) for s in summary.get("capture_steps") or [])
            self._captures = {
                int(s): [CapturedEpisode.from_dict(e) for e in eps]
                for s, eps in (summary.get("captures") or {}).items()
            }
            self._capture_errors = {
                int(s): str(e) for s, e in (summary.get("capture_errors") or {}).items()
            }
        except (KeyError, TypeError, ValueError) as e:
            raise RlkitError(f"not a run summary ({type(e).__name__}: {e})") from None

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    def config(self) -> dict[str, Any]:
        return dict(self._config)

    def metrics(self) -> list[dict[str, Any]]:
        return list(self._metrics)

    def evals(self) -> dict[int, EvalResult]:
        return dict(sorted(self._evals.items()))

    def trajectories(self, step: int) -> list[Trajectory]:
        raise UsageError(
            f"the episodes of {self.name} are read where its files are: open the run in a "
            f"kernel that mounts {self.path.parent} (e.g. Studio with FSx attached)"
        )

    def checkpoints(self) -> list[Checkpoint]:
        return list(self._ckpts)

    def capture_root(self) -> Path | None:
        return None  # its files are elsewhere

    def capture_steps(self) -> list[int]:
        return list(self._capture_steps)

    def captures(self, step: int) -> list[CapturedEpisode]:
        if step in self._captures:
            return list(self._captures[step])
        if step in self._capture_errors:
            raise RlkitError(self._capture_errors[step])
        if step not in self._capture_steps:
            raise captures.not_captured(step, self.path, self._capture_steps)
        brought = sorted(self._captures) or "none"
        raise UsageError(
            f"step {step}'s captured rollouts of {self.name} were not brought by the reader "
            f"(it brought {brought}): read the run again with more captured steps "
            f"(rlkit.run.remote.read_run(cluster, path, captured=N)), or open it in a kernel "
            f"that mounts {self.path.parent} (e.g. Studio with FSx attached)"
        )


def open_here(source: str | Path) -> Run:
    """The run at `source` as this kernel sees it (RunNotFound: nothing there; UsageError: a
    file); the backend by `find_skyrl_run`'s rule."""
    p = Path(source).expanduser()
    if not p.exists():
        raise RunNotFound(
            f"no run at {p} from here: check the path, or read it through the cluster "
            "(its storage, e.g. /fsx, is not mounted in this kernel)"
        )
    if not p.is_dir():
        raise UsageError(
            f"{p} is a file: give the run directory it belongs to (a file is not a run directory)"
        )
    sky = find_skyrl_run(p)
    return SkyRLRunReader(sky) if sky is not None else LocalRun(p)
