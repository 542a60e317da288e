"""The run directory: one layout for local and SkyRL runs, crash-safe checkpoints, resume, lock.

    RUN/run.json, RUN/metrics.jsonl       preset, seed, versions, backend; one line a step
    RUN/global_step_N/                    a complete checkpoint + rlkit_manifest.json
    RUN/latest_ckpt_global_step.txt       the completion marker, written last
    RUN/evals/global_step_N.json, .lock   eval results; the one writer's flock
Why it survives a kill: docs/decisions.md#crash-safe-run-directories."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from rlkit.errors import RlkitError, UsageError
from rlkit.fsio import FULL_DISK, RunLock, atomic_write_text, fsync
from rlkit.run.checkpoints import (
    MANIFEST,
    MARKER,
    STEP_DIR,
    Checkpoint,
    CheckpointWarning,
    checkpoint_problem,
    list_checkpoints,
    marker_step,
    step_dirs,
    write_manifest,
)


def _json_safe(value: Any) -> Any:
    """NaN/inf become null: strict JSON readers (and pandas) reject the bare tokens."""
    if hasattr(value, "item"):
        value = value.item()  # numpy scalars and 0-d tensors
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _versions(*dists: str) -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": sys.version.split()[0]}
    for dist in dists:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def _git_sha() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


class RunDir:
    """One run's directory. `keep`: how many complete checkpoints to keep (None keeps all)."""

    def __init__(self, path: str | os.PathLike[str], *, keep: int | None = None):
        if keep is not None and keep < 1:
            raise UsageError(f"keep ({keep}) must be >= 1 or None: it is how many checkpoints stay")
        self.path = Path(path)
        self.keep = keep
        self.run_json = self.path / "run.json"
        self.metrics_path = self.path / "metrics.jsonl"
        self.evals_dir = self.path / "evals"
        self.marker_path = self.path / MARKER
        self._tail_checked = False

    def checkpoint_dir(self, step: int) -> Path:
        return self.path / f"global_step_{step}"

    def lock(self) -> RunLock:
        """A lock to hold (`with run.lock():`) while training writes here."""
        self.path.mkdir(parents=True, exist_ok=True)
        return RunLock(self.path / ".lock")

    # run.json

    def init(
        self,
        *,
        preset: str | None,
        seed: int,
        backend: str,
        config: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Write run.json on a new run; on an existing one check that preset/seed/backend agree."""
        self.path.mkdir(parents=True, exist_ok=True)
        if self.run_json.exists():
            info = self.read_info()
            for key, value in (("preset", preset), ("seed", seed), ("backend", backend)):
                if info.get(key) != value:
                    raise UsageError(
                        f"run directory {self.path} was started with {key}={info.get(key)!r}, not "
                        f"{value!r}: resume with the same {key} or choose a new run directory"
                    )
            return info
        info = {
            "preset": preset,
            "seed": seed,
            "backend": backend,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "versions": _versions("torch", "transformers", "ray", "rlkit"),
            "git_sha": _git_sha(),
            "config": _json_safe(dict(config or {})),
        }
        atomic_write_text(self.run_json, json.dumps(info, indent=1) + "\n")
        return info

    def record_config(
        self, config: Mapping[str, Any], changed: Mapping[str, Any], *, step: int
    ) -> None:
        """A resume from `step` changed `changed` (key -> (old, new)): run.json's config becomes
        `config`, and the change joins its `config_changes` history."""
        info = self.read_info()
        entry = {"step": step, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "changed": changed}
        info["config"] = _json_safe(dict(config))
        info["config_changes"] = [*info.get("config_changes", []), _json_safe(entry)]
        atomic_write_text(self.run_json, json.dumps(info, indent=1) + "\n")

    def read_info(self) -> dict[str, Any]:
        try:
            return json.loads(self.run_json.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RlkitError(
                f"{self.run_json} not found: is {self.path} a run directory?"
            ) from None
        except ValueError as e:
            raise RlkitError(f"{self.run_json} is not valid JSON ({e}): fix or remove it") from e

    # checkpoints

    def checkpoint_steps(self) -> list[int]:
        """Steps of every global_step_N directory present, complete or not, ascending."""
        return sorted(step_dirs(self.path))

    def checkpoints(self) -> list[Checkpoint]:
        """Every global_step_N dir, oldest first, complete or not (`list_checkpoints`)."""
        return list_checkpoints(self.path)

    def latest_complete_checkpoint(
        self, *, hashes: bool = True, require_manifest: bool = True
    ) -> Checkpoint | None:
        """The newest checkpoint that is committed and verifies, or None; a CheckpointWarning for
        each skipped. `hashes=False`: sizes only; `require_manifest=False`: the marker alone for a
        dir without an rlkit manifest (SkyRL's)."""
        committed, marker = self.marker_path.exists(), marker_step(self.path)
        for step, d in sorted(step_dirs(self.path).items(), reverse=True):
            if not committed:
                problem = f"no {MARKER}: its save did not finish"
            elif marker is not None and step > marker:
                problem = f"newer than the marker (step {marker}): its save did not finish"
            else:
                problem = checkpoint_problem(d, hashes=hashes)
                if problem and not require_manifest and not (d / MANIFEST).exists():
                    problem = None
            if problem is None:
                return Checkpoint(step=step, path=d)
            warnings.warn(f"skipping checkpoint {d}: {problem}", CheckpointWarning, stacklevel=2)
        return None

    def save_checkpoint(self, step: int, write_fn: Callable[[Path], object]) -> Checkpoint:
        """Save one checkpoint: write_fn(tmp_dir) writes the payload, then rlkit commits it; a
        full disk is an RlkitError and the previous checkpoint stays intact."""
        if step < 0:
            raise UsageError(f"step ({step}) must be >= 0")
        self.path.mkdir(parents=True, exist_ok=True)
        # Only one trainer writes here (the lock), so any hidden save dir is from a killed save.
        for p in self.path.glob(".global_step_*"):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
        final = self.checkpoint_dir(step)
        tmp = self.path / f".{final.name}.tmp-{os.getpid()}"
        tmp.mkdir()
        try:
            write_fn(tmp)
            write_manifest(tmp, step)
            if final.exists():
                # A leftover from an abandoned save at this step: replace it, never merge.
                old = self.path / f".{final.name}.old-{os.getpid()}"
                os.replace(final, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(tmp, final)
            fsync(self.path)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, OSError) and e.errno in FULL_DISK:
                prev = marker_step(self.path)
                kept = f"global_step_{prev} is intact" if prev is not None else "no earlier one"
                raise RlkitError(
                    f"disk full while saving checkpoint {final.name} in {self.path} ({kept}): "
                    "free space or lower keep, then resume"
                ) from e
            raise
        atomic_write_text(self.marker_path, f"{step}\n")
        if self.keep is not None:  # every dir older than the newest `keep` complete ones goes
            complete = [c.step for c in self.checkpoints() if c.complete]
            oldest_kept = complete[-self.keep] if len(complete) > self.keep else -1
            for s, d in step_dirs(self.path).items():
                if s < oldest_kept:  # never the marker's step: the newest
                    shutil.rmtree(d, ignore_errors=True)
        return Checkpoint(step=step, path=final)

    def resume(self) -> Checkpoint | None:
        """The checkpoint to resume from; drops metrics logged after it so no step counts twice."""
        ckpt = self.latest_complete_checkpoint()
        self.truncate_metrics_after(ckpt.step if ckpt is not None else -1)
        return ckpt

    # metrics.jsonl

    def append_metrics(self, record: Mapping[str, Any]) -> None:
        """Append one step's metrics as a JSON line, flushed and fsynced before returning."""
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise UsageError(f"a metrics record needs an int 'step', got {step!r}")
        line = json.dumps(_json_safe(dict(record)), allow_nan=False) + "\n"
        self.path.mkdir(parents=True, exist_ok=True)
        if not self._tail_checked:  # a kill mid-append can leave a line without its newline
            with contextlib.suppress(FileNotFoundError), open(self.metrics_path, "rb+") as f:
                data = f.read()
                if data and not data.endswith(b"\n"):
                    f.truncate(data.rfind(b"\n") + 1)
            self._tail_checked = True
        try:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            if e.errno in FULL_DISK:
                raise RlkitError(f"disk full while appending to {self.metrics_path}") from e
            raise

    def read_metrics(self) -> list[dict[str, Any]]:
        """All complete metric records, in file order (a torn last line is ignored)."""
        try:
            text = self.metrics_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        records = []
        for i, line in enumerate(text.split("\n")[:-1], 1):  # the last is "" or a torn line
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as e:
                    raise RlkitError(f"{self.metrics_path} line {i} is not JSON: {e}") from e
        return records

    def truncate_metrics_after(self, step: int) -> None:
        """Keep only records with step <= `step` (-1 drops all); atomic."""
        if self.metrics_path.exists():
            self.rewrite_metrics(r for r in self.read_metrics() if r.get("step", -1) <= step)

    def rewrite_metrics(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Replace metrics.jsonl by `records` (those left with only a step are dropped); atomic."""
        kept = [r for r in records if set(r) - {"step"}]
        atomic_write_text(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept))
        self._tail_checked = True

    # evals

    def eval_path(self, step: int) -> Path:
        return self.evals_dir / f"global_step_{step}.json"

    def read_eval(self, step: int) -> dict[str, Any]:
        """Step `step`'s eval result; missing or damaged (a truncated file) is one RlkitError."""
        path = self.eval_path(step)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RlkitError(f"no eval for step {step} in {self.evals_dir}") from None
        except ValueError as e:
            raise RlkitError(
                f"{path} is not valid JSON ({e}): the file is damaged; remove it and the run "
                "reads on without that step's eval"
            ) from None

    def eval_steps(self) -> list[int]:
        if not self.evals_dir.is_dir():
            return []
        names = (p.stem for p in self.evals_dir.glob("global_step_*.json"))
        return sorted(int(m.group(1)) for n in names if (m := STEP_DIR.match(n)))
