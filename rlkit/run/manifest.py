"""A checkpoint's manifest: every file's size and sha256, written and fsynced before the
checkpoint is renamed into place, so a reader can tell a complete checkpoint from a torn or
corrupted one without trusting the completion marker.

    write_manifest(tmp_dir, step)               # after the payload, before the rename
    checkpoint_problem(ckpt_dir)                # None, or why it is not a complete checkpoint
    checkpoint_problem(ckpt_dir, hashes=False)  # sizes only: cheap enough for every listing
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rlkit.fsio import fsync, write_synced

MANIFEST = "rlkit_manifest.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: Path, step: int) -> None:
    """Record every payload file's size and hash, fsyncing each so the manifest never lies."""
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
