"""Where a notebook's relative paths point: $RLKIT_HOME, else the project root, whatever the
kernel's working directory (the CLI reads them from its own: `cli_path_note`)."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "RLKIT_HOME"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def home() -> Path:
    """$RLKIT_HOME if set, else the project root (the checkout holding notebooks/)."""
    return Path(os.environ.get(HOME_ENV) or PROJECT_ROOT).expanduser()


def home_path(path: str | Path) -> Path:
    """`path` as given when absolute; else relative to `home()`."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else home() / p


def relative_rule() -> str:
    """The one rule for a relative run path, said where a notebook misses a run."""
    return (
        f"a notebook reads a relative path from {home()} (${HOME_ENV}, else the project root), "
        "the CLI from its current directory: give the run's absolute path (`rlkit train` "
        "prints it)"
    )


def cli_path_note(path: str | Path) -> str | None:
    """The absolute path `rlkit train --run-dir PATH` prints when a notebook would read PATH
    elsewhere (None: PATH is absolute or the CLI runs from `home()`)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.resolve() == home_path(p).resolve():
        return None
    return f"absolute path for a notebook: {p.resolve()} (a notebook reads {p} from {home()})"
