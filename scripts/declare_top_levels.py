"""Write `top_level.txt` into every installed distribution that lacks one (make venv runs this).

transformers maps modules to distributions with `importlib.metadata.packages_distributions()`
when it is imported. For a distribution without `top_level.txt` (most wheels built today) the
standard library infers the names from RECORD and checks that each listed file exists: ~30,000
`stat` calls in this venv, 1.1 s in every process that imports transformers (trainer jobs,
notebook kernels, CLI runs, Ray workers). Declaring the same names once, as the standard library
infers them, makes that lookup read one small file per distribution instead.

    python scripts/declare_top_levels.py    # prints how many it declared
"""

from __future__ import annotations

import importlib.metadata as md
import inspect
import sys
from pathlib import Path


def inferred_top_levels(dist: md.Distribution) -> list[str]:
    """The importable top-level names `packages_distributions()` infers for `dist`: the first
    part of each installed file's path (a module's name for a file at the top), dotted ones
    left out."""
    names = set()
    for path in dist.files or ():
        if not Path(dist.locate_file(path)).exists():
            continue
        top, *rest = path.parts
        names.add(top if rest else inspect.getmodulename(path) or str(path))
    return sorted(n for n in names if "." not in n)


def declare(dist: md.Distribution) -> bool:
    """Write `dist`'s top_level.txt when it has none and its names are known; whether it did."""
    if dist.read_text("top_level.txt") is not None:
        return False
    metadata = [f for f in dist.files or () if f.name == "METADATA" and len(f.parts) == 2]
    names = inferred_top_levels(dist)
    if len(metadata) != 1 or not names:  # empty: read as "none declared", inference runs anyway
        return False
    info_dir = Path(dist.locate_file(metadata[0])).parent
    (info_dir / "top_level.txt").write_text("".join(f"{n}\n" for n in names))
    return True


def main() -> int:
    declared = sum(declare(d) for d in md.distributions())
    print(f"declared the top-level modules of {declared} installed distributions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
