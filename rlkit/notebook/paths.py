"""Where a notebook's relative paths point: the same place from JupyterLab and from `make demo`.

JupyterLab starts a notebook's kernel in the notebook's folder (notebooks/), `make demo` in
the project root. `home_path` resolves a relative path parameter against $RLKIT_HOME, else the
project root, so `out_dir="runs/demo"` is one directory for both. Torch-free: the cluster
notebooks use it too.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "RLKIT_HOME"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The checkout holding the `rlkit` package and notebooks/ (rlkit/notebook/paths.py -> it)."""


def home() -> Path:
    """$RLKIT_HOME if set, else the project root (the checkout holding notebooks/)."""
    return Path(os.environ.get(HOME_ENV) or PROJECT_ROOT).expanduser()


def home_path(path: str | Path) -> Path:
    """`path` as given when absolute; else relative to `home()`."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else home() / p
