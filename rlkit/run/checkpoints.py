"""A run directory's checkpoints: which exist, which are complete (the marker reached the step and,
locally, the manifest verifies), which to keep: docs/decisions.md#crash-safe-run-directories."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlkit.fsio import fsync, write_synced

MANIFEST = "rlkit_manifest.json"


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(directory: Path, step: int) -> None:
    """Record every payload file's size and sha256, each fsynced first."""
    files = {}
    for p in sorted(directory.rglob("*")):
        fsync(p)
        if p.is_file():
            files[p.relative_to(directory).as_posix()] = {
                "size": p.stat().st_size,
                "sha256": _sha256(p),
            }
    write_synced(
        directory / MANIFEST, json.dumps({"format": 1, "step": step, "files": files}, indent=1)
    )
    fsync(directory)


def checkpoint_problem(directory: Path, *, hashes: bool = True) -> str | None:
    """Why `directory` is not a complete checkpoint, or None if its manifest verifies."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
    except FileNotFoundError:
        return "no manifest (the save did not finish)"
    except (OSError, ValueError, KeyError, TypeError):
        return "unreadable manifest"
    for rel, want in files.items():
        p = directory / rel
        if not p.is_file():
            return f"missing file {rel}"
        if p.stat().st_size != want["size"]:
            return f"{rel} has {p.stat().st_size} bytes, manifest says {want['size']} (truncated)"
        if hashes and _sha256(p) != want["sha256"]:
            return f"{rel} does not match its sha256 (corrupted)"
    return None


MARKER = "latest_ckpt_global_step.txt"
"""The completion marker, written last (SkyRL's name: both layouts share it)."""
STEP_DIR = re.compile(r"^global_step_(\d+)$")


def step_dirs(root: str | Path) -> dict[int, Path]:
    """`{N: root/global_step_N}` for every such directory under `root` ({} if none)."""
    root = Path(root)
    if not root.is_dir():
        return {}
    found = ((STEP_DIR.match(p.name), p) for p in root.iterdir() if p.is_dir())
    return {int(m.group(1)): p for m, p in found if m}


class CheckpointWarning(UserWarning):
    """A checkpoint directory was skipped as incomplete or corrupted."""


@dataclass(frozen=True)
class Checkpoint:
    """One step that left a checkpoint, an HF export, or both, whichever backend wrote it."""

    step: int
    path: Path | None
    """RUN/global_step_N; None once keep-k pruned it (SkyRL keeps its exports)."""
    complete: bool = True
    """Committed (the marker has reached it) and, locally, its manifest verifies: resumable."""
    hf_export: Path | None = None
    """An HF model dir for `rlkit eval` (RUN/global_step_N/policy, SkyRL's export); listings
    fill it, `save_checkpoint` and `latest_complete` leave it None."""

    def to_dict(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Checkpoint:
        path, export = d.get("path"), d.get("hf_export")
        return cls(
            int(d["step"]),
            Path(path) if path else None,
            bool(d["complete"]),
            Path(export) if export else None,
        )


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / f"global_step_{step}"


def marker_step(run_dir: Path) -> int | None:
    """The step the completion marker names; None when absent or unreadable."""
    marker = run_dir / MARKER
    try:
        return int(marker.read_text(encoding="utf-8").strip())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        warnings.warn(f"{marker} is unreadable; ignoring it", CheckpointWarning, 2)
        return None


def list_checkpoints(run_dir: Path) -> list[Checkpoint]:
    """Every global_step_N dir of a local run, oldest first: complete when committed and its
    manifest's sizes check out (no hashing)."""
    marker = marker_step(run_dir)
    out = []
    for step in sorted(step_dirs(run_dir)):
        d = checkpoint_dir(run_dir, step)
        complete = (
            marker is not None and step <= marker and checkpoint_problem(d, hashes=False) is None
        )
        policy = d / "policy"
        out.append(Checkpoint(step, d, complete, policy if policy.is_dir() else None))
    return out


def latest_complete(
    run_dir: Path, *, hashes: bool = True, require_manifest: bool = True
) -> Checkpoint | None:
    """The newest checkpoint that is committed and verifies, or None; a CheckpointWarning for
    each skipped. `hashes=False`: sizes only; `require_manifest=False`: the marker alone for a
    dir without an rlkit manifest (SkyRL's)."""
    marker_path = run_dir / MARKER
    marker = marker_step(run_dir)
    for step in sorted(step_dirs(run_dir), reverse=True):
        d = checkpoint_dir(run_dir, step)
        if marker_path.exists() and marker is not None and step > marker:
            problem = f"newer than the marker (step {marker}): its save did not finish"
        elif not marker_path.exists():
            problem = f"no {MARKER}: its save did not finish"
        else:
            problem = checkpoint_problem(d, hashes=hashes)
            if problem and not require_manifest and not (d / MANIFEST).exists():
                problem = None
        if problem is None:
            return Checkpoint(step=step, path=d)
        warnings.warn(f"skipping checkpoint {d}: {problem}", CheckpointWarning, stacklevel=2)
    return None


def prune(run_dir: Path, keep: int | None) -> None:
    """Remove every checkpoint dir older than the newest `keep` complete ones (None: keep all),
    never the one the marker names."""
    if keep is None:
        return
    complete = [c.step for c in list_checkpoints(run_dir) if c.complete]
    if len(complete) <= keep:
        return
    oldest_kept, marker = complete[-keep], marker_step(run_dir)
    for s in sorted(step_dirs(run_dir)):
        if s < oldest_kept and s != marker:
            shutil.rmtree(checkpoint_dir(run_dir, s), ignore_errors=True)
