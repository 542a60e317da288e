"""Where a SkyRL run's files are: its run dir (SkyRL's ckpt_path) and export dir (RUN/exports: HF
exports, `dumped_evals/`); `find_skyrl_run(path)` finds both, None when not SkyRL's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rlkit.errors import UsageError
from rlkit.run.checkpoints import MARKER, Checkpoint, step_dirs

SAMPLED_EVALS = "sampled"
"""Where a run with both eval protocols dumps its sampled eval (under the export dir)."""


@dataclass(frozen=True)
class SkyRLRun:
    """Where one SkyRL run's files are."""

    export_dir: Path
    """SkyRL's export_path: `dumped_evals/` and the HF exports `global_step_N/policy`."""
    run_dir: Path | None
    """SkyRL's ckpt_path, rlkit's run dir; None for an export dir found outside one."""

    @property
    def name(self) -> str:
        return (self.run_dir or self.export_dir).name

    @property
    def sampled_dir(self) -> Path | None:
        where = self.export_dir / SAMPLED_EVALS
        return where if (where / "dumped_evals").is_dir() else None


def find_skyrl_run(path: str | Path) -> SkyRLRun | None:
    """The one rule for "is this a SkyRL run": run.json says `"backend": "skyrl"`, or without
    run.json it holds `exports/` or `data/`, or it is an export dir (`dumped_evals/`)."""
    p = Path(path)
    if not p.is_dir():
        return None
    try:
        info = json.loads((p / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass  # no readable run.json: the layout decides
    else:
        skyrl = isinstance(info, dict) and info.get("backend") == "skyrl"
        return SkyRLRun(export_dir=p / "exports", run_dir=p) if skyrl else None
    if (p / "dumped_evals").is_dir():
        return SkyRLRun(export_dir=p, run_dir=p.parent if p.name == "exports" else None)
    if (p / "exports").is_dir() or (p / "data" / "eval.parquet").is_file():
        return SkyRLRun(export_dir=p / "exports", run_dir=p)
    return None


def latest_step(ckpt_dir: str | Path) -> int | None:
    """The step in SkyRL's latest marker, or None before the first complete checkpoint."""
    marker = Path(ckpt_dir) / MARKER
    if not marker.is_file():
        return None
    text = marker.read_text().strip()
    if not text.isdigit():
        raise UsageError(f"{marker} holds {text[:40]!r}, not a step number: the run dir is damaged")
    return int(text)


def list_checkpoints(
    ckpt_dir: str | Path | None, export_dir: str | Path | None = None
) -> list[Checkpoint]:
    """Every step of a SkyRL run with a checkpoint or an HF export, oldest first (complete: the
    marker has reached it); a pruned checkpoint's step keeps its export with `path=None`.
    `export_dir` defaults to `<ckpt_dir>/exports`; `ckpt_dir` None lists exports only."""
    latest, ckpts = None, {}
    if ckpt_dir is not None:
        root = Path(ckpt_dir)
        if not root.is_dir():
            raise UsageError(
                f"no SkyRL run dir at {root}: check the path (e.g. /fsx/rlkit/runs/RUN)"
            )
        latest, ckpts = latest_step(root), step_dirs(root)
    exports = Path(export_dir) if export_dir is not None else Path(ckpt_dir) / "exports"
    exported = {s: d / "policy" for s, d in step_dirs(exports).items() if (d / "policy").is_dir()}
    return [
        Checkpoint(
            step,
            ckpts.get(step),
            step in ckpts and latest is not None and step <= latest,
            exported.get(step),
        )
        for step in sorted(set(ckpts) | set(exported))
    ]
