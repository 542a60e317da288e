"""The README, the runbook and the docs name only what exists: every file path, dotted `rlkit.`
name, constant or class in backticks, every `rlkit` command's flags and every preset it names
are checked against the code, so a rename cannot leave a page behind.

Each page (README.md, deploy/README.md and every docs/*.md) is checked on its own. Names are read from the pages
generically (backtick spans and code blocks), never from a list here; definitions are read from
the sources with `ast` (nothing imported), and the CLI's flags from its own argparse parser.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from rlkit.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP_DIRS = ("rlkit/", "tests/", "scripts/", "benchmarks/", "deploy/", "notebooks/", "requirements/")
pages = pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))


@cache
def spans(page: Path) -> list[str]:
    """Backtick spans outside code blocks."""
    return re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", page.read_text(), flags=re.S))


@cache
def blocks(page: Path) -> list[str]:
    return re.findall(r"```\w*\n(.*?)```", page.read_text(), flags=re.S)


def _defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module or class body defines (functions, classes, assignments, imports)."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            names |= {t.id: node for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0]: node for a in node.names}
    return names


@cache
def module_names(path: Path) -> dict[str, ast.AST]:
    return _defined(ast.parse(path.read_text()).body)


@cache
def all_rlkit_names() -> frozenset[str]:
    """Module-level and class-level names of every rlkit module, the environment variables
    rlkit reads (quoted UPPER_CASE strings), and the UPPER_CASE status words rlkit and its
    scripts print (a string that starts with one, such as set_hash's `DIFFERS from pinned`)."""
    names = set()
    for path in (ROOT / "rlkit").rglob("*.py"):
        defined = module_names(path)
        names |= set(defined)
        for node in defined.values():
            names |= set(_defined(node.body)) if isinstance(node, ast.ClassDef) else set()
        names |= set(re.findall(r"[\"']([A-Z][A-Z0-9_]{3,})[\"']", path.read_text()))
    for path in [*(ROOT / "rlkit").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names |= set(re.findall(r"^([A-Z][A-Z0-9_]{3,}) ", node.value))
    return frozenset(names)


def resolve(dotted: str) -> str | None:
    """None when `rlkit.a.b.Name.attr` exists (module file, then names defined in it)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        base = ROOT.joinpath(*parts[:cut])
        path = (
            base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        )
        if path.is_file():
            break
    else:
        return f"{dotted}: no such module"
    names, rest = module_names(path), parts[cut:]
    for name in rest:
        if name not in names:
            return f"{dotted}: {name} is not defined in {path.relative_to(ROOT)}"
        node = names[name]
        names = _defined(node.body) if isinstance(node, ast.ClassDef) else {}
    return None


def named_paths(page: Path) -> set[str]:
    paths = {
        s.split()[0].rstrip(".,:;)")
        for s in spans(page) + [w for b in blocks(page) for w in b.split()]
        if s.startswith(TOP_DIRS)
    }
    return {p for p in paths if not re.search(r"[A-Z*{}<]|_N\b|\.\.\.", p)}  # placeholders


def dotted_names(page: Path) -> set[str]:
    dotted = {m for s in spans(page) for m in re.findall(r"(?<![\w/.-])rlkit(?:\.\w+)+", s)}
    return dotted | {
        m for b in blocks(page) for m in re.findall(r"(?:from|import) (rlkit(?:\.\w+)+)", b)
    }


def defined_names(page: Path) -> set[str]:
    """UPPER_CASE constants (or the environment variables rlkit reads) and `name(...)` calls
    named alone in backticks (functions, or methods of rlkit's classes)."""
    names = set()
    for span in spans(page):
        names |= set(re.findall(r"^([A-Z][A-Z0-9_]{3,})$", span))
        names |= set(re.findall(r"^([a-z_]\w*)\(", span))
    return names


def test_the_parse_is_real():
    """The pages together name enough of each kind that an empty parse cannot pass."""
    assert len(set().union(*map(named_paths, PAGES))) > 20
    assert len(set().union(*map(dotted_names, PAGES))) > 15
    assert len(set().union(*map(defined_names, PAGES))) > 10
    assert sum(len(rlkit_commands(p)) for p in PAGES) > 25


@cache
def written_paths() -> str:
    """The text of every Python file of rlkit, scripts and benchmarks: a result file a script
    writes (`benchmarks/results/gpu_step.json`, once a GPU has run it) is named there."""
    files = [*(ROOT / "rlkit").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]
    return "\n".join(p.read_text() for p in [*files, *(ROOT / "benchmarks").glob("*.py")])


@pages
def test_paths_in_backticks_exist(page: Path):
    """Each path exists, or is one the code writes (named in a script or module as such)."""
    paths = named_paths(page)
    missing = [
        p
        for p in sorted(paths)
        if not (ROOT / p.split("::")[0]).exists() and p not in written_paths()
    ]
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


@pages
def test_dotted_rlkit_names_resolve(page: Path):
    problems = [p for d in sorted(dotted_names(page)) if (p := resolve(d))]
    assert not problems, problems


@pages
def test_constants_classes_and_calls_are_defined_in_rlkit(page: Path):
    undefined = sorted(n for n in defined_names(page) if n not in all_rlkit_names())
    assert not undefined, f"{page.relative_to(ROOT)} names what rlkit does not define: {undefined}"


@cache
def rlkit_commands(page: Path) -> list[list[str]]:
    lines = [ln for b in blocks(page) for ln in b.splitlines()] + spans(page)
    commands = []
    for line in lines:
        line = line.split("  #")[0].replace("\\", " ").strip()
        m = re.search(r"(?:^|\s)(?:\.venv/bin/)?rlkit ([a-z].*)", line)
        if m and not line.startswith(("from ", "import ")):
            try:
                commands.append(shlex.split(m.group(1)))
            except ValueError:
                continue
    return commands


def subparser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The deepest subcommand parser that `words` name."""
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            return parser
        parser = subs[0].choices[word]
    return parser


@pages
def test_every_rlkit_command_uses_real_flags_and_presets(page: Path):
    from rlkit.cluster.skyrl.presets import PRESETS as SKYRL
    from rlkit.train.presets import PRESETS as LOCAL

    root, problems = build_parser(), []
    for argv in rlkit_commands(page):
        parser = subparser(root, argv)
        known = {o for a in parser._actions for o in a.option_strings}
        for i, word in enumerate(argv):
            for flag in word.split("=")[0].split("/"):  # `--set/--algorithm`: two flags
                if flag.startswith("--") and flag not in known:
                    problems.append(
                        f"rlkit {' '.join(argv)}: {flag} is not a flag of {parser.prog}"
                    )
            if word == "--preset" and i + 1 < len(argv) and argv[i + 1] not in {*SKYRL, *LOCAL}:
                problems.append(f"rlkit {' '.join(argv)}: no preset {argv[i + 1]}")
    assert not problems, problems
