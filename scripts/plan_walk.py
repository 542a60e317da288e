"""How far notebook 03's plan walks through rlkit (issue 53, item 6): runs `plan_run` (a dry run,
no cluster) under `sys.setprofile` and prints the rlkit files its calls enter, in order.

    python scripts/plan_walk.py [PRESET ...]     # default: local-tiny, qwen3vl-8b, skyrl-tiny-cpu

A stay is a run of calls in one file; a return is a stay in a file the walk had left earlier; a
climb is a stay in a higher layer than the one before (scripts/check_layers.py: BASE, then ORDER).
Module code run by a first import is left out, and so is a generator resumed (one call, however
many items it yields).
"""

from __future__ import annotations

import inspect
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_layers import BASE, rank  # noqa: E402

PACKAGE = ROOT / "rlkit"
WATCHED = {
    "preset_backend": "backend resolution",
    "_paths": "settings-tree walk",
    "apply_settings": "settings applied",
    "maze_env.py:__init__": "env construction",
    "render_array": "maze renderer",
    "turn_budget": "token budget",
}
"""Function (or `file:function`) -> what its runs count as."""


@dataclass
class Walk:
    """One plan's walk: the stays in order and how often each watched function ran."""

    stays: list[str] = field(default_factory=list)
    ran: Counter = field(default_factory=Counter)

    @property
    def files(self) -> int:
        return len(set(self.stays))

    @property
    def returns(self) -> int:
        return sum(s in self.stays[:i] for i, s in enumerate(self.stays))

    @property
    def climbs(self) -> int:
        layers = [layer(s) for s in self.stays]
        return sum(b > a for a, b in zip(layers, layers[1:], strict=False))

    def summary(self) -> str:
        counts = ", ".join(f"{what} {self.ran[what]}" for what in WATCHED.values())
        return (
            f"{self.files} files crossed, {len(self.stays)} stays, {self.returns} returns to a "
            f"file left earlier, {self.climbs} climbs to a higher layer; ran: {counts}"
        )


def layer(rel: str) -> int:
    top = rel.split("/")[0].removesuffix(".py")
    return rank(top) if top != "__init__" else rank(BASE[0])


def walk(preset: str, **kwargs) -> Walk:
    """The walk of `plan_run(preset, a temporary dir, **kwargs)`."""
    from rlkit.notebook.workbench import plan_run

    out = Walk()
    in_import = [0]
    generators: set[FrameType] = set()  # generators entered once (held: ids get reused)

    def profile(frame, event, _arg):
        if event not in ("call", "return"):
            return
        code = frame.f_code
        if code.co_name == "<module>":
            in_import[0] += 1 if event == "call" else -1
            return
        if event == "return" or in_import[0]:
            return
        path = Path(code.co_filename)
        if not path.is_relative_to(PACKAGE):
            return
        if code.co_flags & inspect.CO_GENERATOR:
            if frame in generators:
                return
            generators.add(frame)
        rel = path.relative_to(PACKAGE).as_posix()
        caller = frame.f_back.f_code.co_name if frame.f_back else ""
        for key in (code.co_name, f"{path.name}:{code.co_name}"):
            if key in WATCHED and caller != code.co_name:  # a recursion is one run
                out.ran[WATCHED[key]] += 1
        if not out.stays or out.stays[-1] != rel:
            out.stays.append(rel)

    with tempfile.TemporaryDirectory() as tmp:
        sys.setprofile(profile)
        try:
            plan_run(preset, tmp, **kwargs)
        finally:
            sys.setprofile(None)
    return out


def main(argv: list[str]) -> int:
    for preset in argv or ["local-tiny", "qwen3vl-8b", "skyrl-tiny-cpu"]:
        w = walk(preset)
        print(f"{preset}: {w.summary()}")
        print("  " + " > ".join(s.removesuffix(".py") for s in w.stays))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
