"""The working dir a job ships, sized and checked before Ray packs it, so a stray dataset fails in
one line naming the largest files: docs/decisions.md#jobs-and-the-working-dir."""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlkit.errors import RlkitError, UsageError

MAX_WORKING_DIR_BYTES = 100 * 2**20
"""Ray refuses working dirs above 100 MiB (rlkit compares the unpacked size, a safe bound)."""
WORKING_DIR_EXCLUDES = [".git", ".venv", "runs", "**/__pycache__", "*.egg-info"]
"""Never shipped, even if .gitignore misses them."""


def project_root() -> Path:
    """The directory holding the `rlkit` package: what a job needs to import it."""
    return Path(__file__).resolve().parents[2]  # rlkit/cluster/workdir.py -> the checkout


def _shipped_files(root: Path) -> list[Path]:
    """Files Ray would pack: git's view of .gitignore when root is a checkout, else a walk."""
    git = ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    try:
        out = subprocess.run(git, capture_output=True, check=True, timeout=30).stdout
        files = [root / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        files = [p for p in root.rglob("*") if p.is_file()]
    skip = {".git", ".venv", "runs", "__pycache__"}

    def shipped(parts: tuple[str, ...]) -> bool:
        return not skip.intersection(parts) and not any(p.endswith(".egg-info") for p in parts)

    return [f for f in files if f.is_file() and shipped(f.relative_to(root).parts)]


def working_dir_runtime_env(root: Path, *, limit: int = MAX_WORKING_DIR_BYTES) -> dict[str, Any]:
    """A runtime_env shipping `root`; refuses one too big for Ray before anything uploads."""
    root = root.resolve()
    if not root.is_dir():
        raise UsageError(f"working dir {root} does not exist; pass the project checkout")
    files = _shipped_files(root)
    total = sum(f.stat().st_size for f in files)
    if total > limit:
        biggest = sorted(files, key=lambda f: f.stat().st_size, reverse=True)[:3]
        names = ", ".join(
            f"{f.relative_to(root)} ({f.stat().st_size / 2**20:.1f} MiB)" for f in biggest
        )
        raise RlkitError(
            f"working dir {root} is {total / 2**20:.0f} MiB, over Ray's {limit / 2**20:.0f} MiB "
            f"limit; largest: {names}; add them to .gitignore or .rayignore"
        )
    return {"working_dir": str(root), "excludes": list(WORKING_DIR_EXCLUDES)}


PACKAGING_LOGGERS = {
    "ray.dashboard.modules.dashboard_sdk": logging.WARNING,  # "Uploading package gcs://..."
    "ray._private.runtime_env.packaging": logging.WARNING,  # each .gitignore, per pass
    # "Directory '.git' is now ignored by default": rlkit never ships .git (WORKING_DIR_EXCLUDES)
    "ray._private.runtime_env.working_dir": logging.ERROR,
}


@contextlib.contextmanager
def quiet_packaging() -> Iterator[None]:
    """Ray's per-file packaging INFO lines off while a working dir uploads (warnings stay)."""
    saved = {name: logging.getLogger(name).level for name in PACKAGING_LOGGERS}
    for name, level in PACKAGING_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
