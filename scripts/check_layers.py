"""Enforce rlkit's layers (part of `make lint`): every import in every module, lazy ones included.

    python scripts/check_layers.py [ROOT]      # ROOT defaults to this checkout's rlkit/

Rules (the map: rlkit/__init__.py and docs/layout.md):
- a package imports only from packages below it, its own package, and the base modules
  (errors, fsio, stats, settings, recipe), which import nothing of rlkit but each other;
- torch, torchvision and transformers only in model/ and train/ (peft only in model/); torch
  also in cluster/skyrl/, the code that runs inside SkyRL's own processes (the CPU device
  seam); never in the modules a torch-free client reads (`TORCH_FREE`: the configs and
  SkyRL's presets);
- ray only in cluster/ and run/ (a run's Ray gauges, which both backends' trainers export);
- vllm only in model/vllm_engine.py, model/vllm_policy.py and model/vllm_rows.py (rlkit's vLLM
  engine, policy and logits processor; nothing else needs it installed);
- ipywidgets and matplotlib only in notebook/;
- no import circle between modules (lazy and TYPE_CHECKING imports count), but `KNOWN_CIRCLES`.
Prints one line per violation (`file:line: what, and the rule`) and exits 1 if there is any.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

BASE = ("errors", "fsio", "stats", "settings", "recipe")
ORDER = ("maze", "env", "episodes", "run", "model", "train", "cluster", "notebook", "cli")
HEAVY = {
    "torch": ("model", "train", "cluster/skyrl"),
    "torchvision": ("model", "train"),
    "transformers": ("model", "train"),
    "peft": ("model",),
    "ray": ("cluster", "run"),
    "vllm": ("model/vllm_engine.py", "model/vllm_policy.py", "model/vllm_rows.py"),
    "ipywidgets": ("notebook",),
    "matplotlib": ("notebook",),
}
TORCH_FREE = (
    "model/config.py",
    "train/config.py",
    "train/presets.py",
    "train/run_config.py",
    "cluster/skyrl/__init__.py",
    "cluster/skyrl/presets.py",
    "cluster/skyrl/preset_sections.py",
    "cluster/skyrl/overrides.py",
    "cluster/skyrl/preset_checks.py",
)
"""What a Studio kernel that only drives the cluster imports (tests/skyrl/test_torch_free_client.py)."""
KNOWN_CIRCLES: tuple[set[str], ...] = ()
"""Circles that were here when the check began (issue 53): each goes when it is broken."""


def rank(part: str) -> int:
    return -1 if part in BASE else ORDER.index(part)


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "rlkit":  # `from rlkit import x`: each name is a module or attr
                out += [(node.lineno, f"rlkit.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        top = rel.split("/")[0].removesuffix(".py")
        if top == "__init__":
            continue
        here = rank(top)
        for line, name in imported(ast.parse(path.read_text(), str(path))):
            where = f"{root.name}/{rel}:{line}"
            parts = name.split(".")
            if parts[0] == "rlkit" and len(parts) > 1 and parts[1] != "__version__":
                target = parts[1]
                if target not in BASE and target not in ORDER:
                    found.append(f"{where}: imports {name}, which is no rlkit package or module")
                elif target != top and rank(target) >= here and not (here < 0 and target in BASE):
                    found.append(
                        f"{where}: {top} imports {name} from the same or a higher layer "
                        f"({' < '.join(ORDER)}): move the shared piece down"
                    )
            allowed = HEAVY.get(parts[0])
            if allowed is not None:
                ok = any(rel == a or rel.startswith(a.rstrip("/") + "/") for a in allowed)
                torchy = parts[0] in ("torch", "torchvision", "transformers")
                if not ok or (torchy and rel in TORCH_FREE):
                    found.append(
                        f"{where}: imports {parts[0]}, allowed only in {', '.join(allowed)}"
                        + (" (not in a torch-free module: TORCH_FREE)" if torchy else "")
                    )
    return found


def upward(here: str, target: str) -> bool:
    """Whether module path `here` importing `target` breaks the layers (flagged on its own)."""
    a, b = here.split("/")[0], target.split("/")[0]
    if a == b or a not in BASE + ORDER or b not in BASE + ORDER:
        return False
    return rank(b) >= rank(a) and not (a in BASE and b in BASE)


def circles(root: Path) -> list[list[str]]:
    """Every set of modules that import each other round (Tarjan's strongly connected
    components of the module graph, imports that break the layers left out: they are flagged
    already), as paths under `root` without .py."""
    mods = {p.relative_to(root).with_suffix("").as_posix(): p for p in root.rglob("*.py")}
    mods = {m.removesuffix("/__init__").removesuffix("__init__"): p for m, p in mods.items()}

    def module(dotted: str) -> str | None:
        parts = dotted.split(".")[1:]
        while parts and "/".join(parts) not in mods:
            parts.pop()
        return "/".join(parts) or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            for n in names:
                target = module(n) if n.startswith("rlkit.") else None
                if target not in (None, m) and not upward(m, target):
                    graph[m].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = [stack.pop()]
            while comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "rlkit"
    found = violations(root)
    found += [
        f"{root.name}/: import circle {' <-> '.join(c)}: move what both need into one of them "
        "or below both"
        for c in circles(root)
        if set(c) not in KNOWN_CIRCLES
    ]
    for v in found:
        print(v)
    if found:
        print(f"{len(found)} layer violation(s): see scripts/check_layers.py for the rules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
