"""The README names only what exists: every file path, dotted `rlkit.` name, constant or class in
backticks, every `rlkit` command's flags and every preset it names are checked against the code,
so a rename cannot leave the README behind.

Names are read from the README generically (backtick spans and code blocks), never from a list
here; definitions are read from the sources with `ast` (nothing imported), and the CLI's flags
from its own argparse parser.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from functools import cache
from pathlib import Path

from rlkit.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SPANS = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", README, flags=re.S))
BLOCKS = re.findall(r"```\w*\n(.*?)```", README, flags=re.S)
TOP_DIRS = ("rlkit/", "tests/", "scripts/", "benchmarks/", "deploy/", "notebooks/", "requirements/")


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
    """Module-level and class-level names of every rlkit module, and the environment variables
    rlkit reads (quoted UPPER_CASE strings)."""
    names = set()
    for path in (ROOT / "rlkit").rglob("*.py"):
        defined = module_names(path)
        names |= set(defined)
        for node in defined.values():
            names |= set(_defined(node.body)) if isinstance(node, ast.ClassDef) else set()
        names |= set(re.findall(r"[\"']([A-Z][A-Z0-9_]{3,})[\"']", path.read_text()))
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


def test_paths_in_backticks_exist():
    paths = {
        s.split()[0].rstrip(".,:;)")
        for s in SPANS + [w for b in BLOCKS for w in b.split()]
        if s.startswith(TOP_DIRS)
    }
    paths = {p for p in paths if not re.search(r"[A-Z*{}<]|_N\b|\.\.\.", p)}  # placeholders
    assert len(paths) > 20  # the parse is real
    missing = [p for p in sorted(paths) if not (ROOT / p.split("::")[0]).exists()]
    assert not missing, f"README names paths that do not exist: {missing}"


def test_dotted_rlkit_names_resolve():
    dotted = {m for s in SPANS for m in re.findall(r"(?<![\w/.-])rlkit(?:\.\w+)+", s)}
    dotted |= {m for b in BLOCKS for m in re.findall(r"(?:from|import) (rlkit(?:\.\w+)+)", b)}
    assert len(dotted) > 15
    problems = [p for d in sorted(dotted) if (p := resolve(d))]
    assert not problems, problems


def test_constants_classes_and_calls_are_defined_in_rlkit():
    """UPPER_CASE constants (or the environment variables rlkit reads) and `name(...)` calls
    named alone in backticks (functions, or methods of rlkit's classes)."""
    names = set()
    for span in SPANS:
        names |= set(re.findall(r"^([A-Z][A-Z0-9_]{3,})$", span))
        names |= set(re.findall(r"^([a-z_]\w*)\(", span))
    assert len(names) > 10
    undefined = sorted(n for n in names if n not in all_rlkit_names())
    assert not undefined, f"README names what rlkit does not define: {undefined}"


def rlkit_commands() -> list[list[str]]:
    lines = [ln for b in BLOCKS for ln in b.splitlines()] + SPANS
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


def test_every_rlkit_command_uses_real_flags_and_presets():
    from rlkit.cluster.skyrl.presets import PRESETS as SKYRL
    from rlkit.train.presets import PRESETS as LOCAL

    commands = rlkit_commands()
    assert len(commands) > 25
    root, problems = build_parser(), []
    for argv in commands:
        parser = subparser(root, argv)
        known = {o for a in parser._actions for o in a.option_strings}
        for i, word in enumerate(argv):
            flag = word.split("=")[0]
            if flag.startswith("--") and flag not in known:
                problems.append(f"rlkit {' '.join(argv)}: {flag} is not a flag of {parser.prog}")
            if word == "--preset" and i + 1 < len(argv) and argv[i + 1] not in {*SKYRL, *LOCAL}:
                problems.append(f"rlkit {' '.join(argv)}: no preset {argv[i + 1]}")
    assert not problems, problems
