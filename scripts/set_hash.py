"""Print a maze set's combined hash, the value to pin in `rlkit/maze/families.py`.

    python scripts/set_hash.py NAME [NAME ...]     # the named sets (no NAME: every set)

Each line is `NAME HASH STATUS`: `pinned` (matches the registry), `not pinned yet` (the entry's
`pinned_hash` is "": paste HASH there) or `DIFFERS from pinned ABC...` (the generator changed
the set: every published number on it would change). Exits 1 when a pinned hash differs and 2
on an unknown name, so CI can run it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rlkit.errors import UsageError
from rlkit.maze.families import maze_set, set_names
from rlkit.maze.sets import computed_set_hash


def main(argv: Sequence[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv) or list(set_names())
    differs = False
    for name in names:
        try:
            pinned = maze_set(name).pinned_hash
        except UsageError as e:
            print(f"set_hash: error: {e}", file=sys.stderr)
            return 2
        h = computed_set_hash(name)
        if not pinned:
            status = "not pinned yet"
        elif h == pinned:
            status = "pinned"
        else:
            status, differs = f"DIFFERS from pinned {pinned[:12]}...", True
        print(f"{name} {h} {status}")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
