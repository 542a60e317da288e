"""scripts/declare_top_levels.py: make venv declares each wheel's top-level modules once, with
the same mapping the standard library infers (transformers reads it in every process)."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location(
        "declare_top_levels", ROOT / "scripts" / "declare_top_levels.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _install(site: Path, name: str, files: dict[str, str], missing: tuple[str, ...] = ()) -> None:
    """A wheel-style install of `files` into `site`; RECORD also lists `missing` (not on disk)."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    listed = [*files, *missing, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in listed))


def _mapping(site: Path) -> dict[str, list[str]]:
    """What `packages_distributions()` gives for the distributions in `site` alone."""
    out: dict[str, list[str]] = {}
    for dist in md.distributions(path=[str(site)]):
        names = (dist.read_text("top_level.txt") or "").split() or md._top_level_inferred(dist)
        for name in names:
            out.setdefault(name, []).append(dist.metadata["Name"])
    return {k: sorted(v) for k, v in sorted(out.items())}


def test_declares_what_inference_finds_and_nothing_twice(tmp_path):
    script = _script()
    files = {"pkg_a/__init__.py": "", "pkg_a/sub/x.py": "", "mod_b.py": "", "bin_c.data/x": ""}
    _install(tmp_path, "two-tops", files, missing=("ghost/gone.py",))
    _install(tmp_path, "declared", {"own/__init__.py": ""})
    (tmp_path / "declared-1.0.dist-info" / "top_level.txt").write_text("own\n")
    _install(tmp_path, "nothing-importable", {})
    inferred = _mapping(tmp_path)
    assert inferred == {"mod_b": ["two-tops"], "own": ["declared"], "pkg_a": ["two-tops"]}

    dists = {d.metadata["Name"]: d for d in md.distributions(path=[str(tmp_path)])}
    assert [name for name, d in sorted(dists.items()) if script.declare(d)] == ["two-tops"]
    written = tmp_path / "two-tops-1.0.dist-info" / "top_level.txt"
    assert written.read_text() == "mod_b\npkg_a\n"  # the missing file's `ghost` is not declared
    assert _mapping(tmp_path) == inferred
    assert not any(script.declare(d) for d in md.distributions(path=[str(tmp_path)]))
