"""A run directory's checkpoints: which exist, which are complete (the marker reached the step and,
locally, the manifest verifies): docs/decisions.md#crash-safe-run-directories."""

from __future__ import annotations

import hashlib
import json
import re
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
            rel = p.relative_to(directory).as_posix()
            files[rel] = {"size": p.stat().st_size, "sha256": _sha256(p)}
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
    """An HF model dir for `rlkit eval` (RUN/global_step_N/policy, SkyRL's export); None unless
    listed."""

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
    for step, d in sorted(step_dirs(run_dir).items()):
        complete = (
            marker is not None and step <= marker and checkpoint_problem(d, hashes=False) is None
        )
        policy = d / "policy"
        out.append(Checkpoint(step, d, complete, policy if policy.is_dir() else None))
    return out
