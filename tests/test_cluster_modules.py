"""The modules of rlkit/cluster/ import one way: no module imports one that imports it back.

Every import counts: top-level, inside a function, and under TYPE_CHECKING (a type-only cycle
is still two modules that cannot be read, or split, apart). The SkyRL subpackage counts as
one node: a cycle through it and back to a top-level module is a cycle too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rlkit.cluster

CLUSTER = Path(rlkit.cluster.__file__).parent
PACKAGE = "rlkit.cluster"


def _node(module: str, nodes: set[str]) -> str | None:
    """The graph node a dotted import names: a top-level module, or a subpackage as a whole."""
    if not module.startswith(PACKAGE + "."):
        return None
    head = f"{PACKAGE}.{module[len(PACKAGE) + 1 :].split('.')[0]}"
    return head if head in nodes else None


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: modules of the same package it imports}, nodes named `rlkit.cluster.NAME`."""
    files = {f"{PACKAGE}.{p.stem}": [p] for p in root.glob("*.py") if p.stem != "__init__"}
    for sub in root.iterdir():
        if (sub / "__init__.py").is_file():
            files[f"{PACKAGE}.{sub.name}"] = sorted(sub.rglob("*.py"))
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, paths in files.items():
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    # `from rlkit.cluster import launch` names a module by its last part
                    targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                else:
                    continue
                for target in targets:
                    found = _node(target, set(graph))
                    if found is not None and found != name:
                        graph[name].add(found)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle, each once, starting at its smallest module name."""
    cycles = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            here, path = stack.pop()
            for nxt in sorted(graph[here]):
                if nxt == start:
                    cycles.append([*path, start])
                elif nxt > start and nxt not in path:
                    stack.append((nxt, [*path, nxt]))
    return cycles


def test_cluster_modules_import_one_way():
    graph = import_graph(CLUSTER)
    assert {"rlkit.cluster.client", "rlkit.cluster.jobs", "rlkit.cluster.address"} <= set(graph)
    assert "rlkit.cluster.jobs" in graph["rlkit.cluster.client"]  # the graph sees real edges
    cycles = import_cycles(graph)
    assert not cycles, "import cycles in rlkit/cluster/: " + "; ".join(
        " -> ".join(c) for c in cycles
    )


@pytest.mark.parametrize(
    "importer",
    [
        "from rlkit.cluster.a import f\n",
        "def late():\n    from rlkit.cluster import a\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import rlkit.cluster.a\n",
        "from rlkit.cluster.sub.inner import g\n",  # back through the subpackage
    ],
    ids=["top-level", "lazy", "type-checking", "subpackage"],
)
def test_a_cycle_is_found_and_named(tmp_path, importer):
    (tmp_path / "a.py").write_text("from rlkit.cluster.b import g\n")
    (tmp_path / "b.py").write_text("import os\n" + importer)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    (tmp_path / "sub" / "inner.py").write_text("from rlkit.cluster.a import f\n")
    (tmp_path / "c.py").write_text("from rlkit.cluster.a import f\nfrom rlkit.errors import E\n")
    cycles = import_cycles(import_graph(tmp_path))
    if "sub" in importer:
        assert cycles == [
            ["rlkit.cluster.a", "rlkit.cluster.b", "rlkit.cluster.sub", "rlkit.cluster.a"]
        ]
    else:
        assert cycles == [["rlkit.cluster.a", "rlkit.cluster.b", "rlkit.cluster.a"]]
