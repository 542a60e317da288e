"""What a newcomer reads agrees with the code: the module tables list every module, a constant
placed in a file is defined there, the cost figures deploy/README.md quotes are the dry run's,
every `rlkit submit` manifest or dry-run command in the docs runs, and the notebooks' HyperPod
steps, presets and numbers are the ones the code and the runbook use."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from pathlib import Path

import yaml

from rlkit.cli.main import build_parser
from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.preset_checks import estimate_cost, preset_budget, storage_estimate
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.maze.families import maze_set
from rlkit.train.presets import preset as local_preset

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "README.md"
PAGES = [ROOT / "README.md", DEPLOY, *sorted((ROOT / "docs").glob("*.md"))]
STAGED = "/fsx/models/Qwen3-VL-8B-Instruct"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlkit:test"


def words(text: str) -> str:
    """Markdown, or a notebook's markdown comments, as one line (line breaks as spaces)."""
    return " ".join(re.sub(r"^\s*#", "", line).strip() for line in text.splitlines())


# module tables --------------------------------------------------------------------------


def listed_modules() -> set[str]:
    """Modules docs/layout.md's table names, as paths below rlkit/ (`skyrl/{a,b}` expanded)."""
    listed = set()
    for line in (ROOT / "docs" / "layout.md").read_text().splitlines():
        row = re.match(r"\| `(\w+/)` \| (.*?) \|", line)
        if not row:
            continue
        package = "" if row.group(1) == "rlkit/" else row.group(1)
        for span in re.findall(r"`([^`]+)`", row.group(2)):
            brace = re.fullmatch(r"(\w+)/\{([\w,]+)\}", span)
            names = (
                [f"{brace.group(1)}/{n}" for n in brace.group(2).split(",")] if brace else [span]
            )
            listed |= {package + name for name in names}
    return listed


def repository_modules() -> set[str]:
    """rlkit's modules as paths below rlkit/: those git tracks in a checkout (a file still being
    written is not yet the repository's), else every one on disk."""
    rlkit = ROOT / "rlkit"
    try:
        tracked = subprocess.run(
            ["git", "ls-files", "rlkit"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
        files = [ROOT / f for f in tracked if f.endswith(".py")]
    except (OSError, subprocess.CalledProcessError):
        files = list(rlkit.rglob("*.py"))
    return {str(p.relative_to(rlkit).with_suffix("")) for p in files if p.name != "__init__.py"}


def test_the_layout_tables_list_every_module_and_only_modules():
    modules = repository_modules()
    listed = listed_modules()
    assert len(listed) > 100  # the parse found the tables
    assert not modules - listed, f"docs/layout.md does not list {sorted(modules - listed)}"
    assert not listed - modules, f"docs/layout.md lists no such modules {sorted(listed - modules)}"


def test_a_constant_placed_in_a_file_is_defined_there():
    """`NAME`, `rlkit/x.py` or `rlkit/x.py` `NAME`: NAME is assigned in that file."""
    pairs = re.compile(
        r"`([A-Z][A-Z0-9_]{3,})`[,\s]+(?:in\s+)?`(rlkit/[\w/]+\.py)`"
        r"|`(rlkit/[\w/]+\.py)`[,\s]+`([A-Z][A-Z0-9_]{3,})`"
    )
    found, wrong = 0, []
    for page in PAGES:
        for m in pairs.finditer(page.read_text()):
            name, path = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
            tree = ast.parse((ROOT / path).read_text())
            assigned = {
                t.id
                for node in tree.body
                if isinstance(node, ast.Assign | ast.AnnAssign)
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(t, ast.Name)
            }
            found += 1
            if name not in assigned:
                wrong.append(f"{page.name}: {name} is not defined in {path}")
    assert found >= 2 and not wrong, wrong


def numeric_constants() -> dict[str, set[float]]:
    """rlkit's module-level names bound to a number literal, each with its values."""
    values: dict[str, set[float]] = {}
    for path in (ROOT / "rlkit").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            literal = node.value.value if isinstance(node.value, ast.Constant) else None
            if type(literal) in (int, float):
                for t in targets:
                    if isinstance(t, ast.Name):
                        values.setdefault(t.id, set()).add(float(literal))
    return values


def test_a_number_quoted_beside_its_constant_is_the_constants_value():
    """`below 20% of ... (`ENTROPY_COLLAPSE_FRACTION`)`: the number a page puts just before a
    constant in parentheses is that constant's value (a percentage as its fraction)."""
    beside = re.compile(r"(\d+(?:\.\d+)?(?:e-?\d+)?)(%?)[^()`\d]{0,50}\(`([A-Z][A-Z0-9_]{3,})`")
    values = numeric_constants()
    checked, wrong = 0, []
    for page in PAGES:
        for m in beside.finditer(words(page.read_text())):
            said = float(m.group(1)) / (100 if m.group(2) else 1)
            if m.group(3) not in values:
                continue  # a constant that is no number literal (a recipe, a path)
            checked += 1
            if not any(abs(said - v) <= 1e-9 * max(1.0, abs(v)) for v in values[m.group(3)]):
                wrong.append(f"{page.relative_to(ROOT)}: {m.group(0)}: {values[m.group(3)]}")
    assert checked >= 4 and not wrong, wrong


# the runbook's numbers ------------------------------------------------------------------


def _cost(tmp_path, **changes):
    p = get_preset("qwen3vl-8b", **changes)
    return estimate_cost(p, preset_budget(p).budget, bench=tmp_path / "no-measurement.json")


def _range(lo: float, hi: float) -> str:
    return f"~{lo:.0f}-{hi:.0f}"


def test_deploy_readme_quotes_the_dry_runs_cost_and_storage(tmp_path):
    text = words(DEPLOY.read_text())
    staged, hub = _cost(tmp_path, model_path=STAGED), _cost(tmp_path)
    for cost, where in ((staged, "staged"), (hub, "from the hub")):
        gpu_hours = _range(*(h * cost.gpus_paid for h in cost.run_hours)) + " GPU-hours"
        first = _range(*cost.first_step_min) + " min"
        assert gpu_hours in text and first in text, (where, gpu_hours, first)
    steps = get_preset("qwen3vl-8b").batch.steps
    assert f"billed for {steps} steps" in text
    est = storage_estimate(get_preset("qwen3vl-8b"))
    fsx = (
        f"~{staged.fsx_gb:.0f} GB for `qwen3vl-8b` ({est.checkpoints_kept} kept checkpoints x "
        f"{est.checkpoint_gb:.0f} GB, {est.exports} HF exports x {est.export_gb:.0f} GB"
    )
    assert fsx in text


# commands that run without a cluster ----------------------------------------------------


def submit_commands(page: Path) -> list[list[str]]:
    """`rlkit submit` commands in code blocks (continued lines joined) and backtick spans that
    write a manifest or dry-run, placeholders in capitals left as they are."""
    text = page.read_text()
    lines = [
        line
        for block in re.findall(r"```\w*\n(.*?)```", text, flags=re.S)
        for line in block.replace("\\\n", " ").splitlines()
    ] + re.findall(r"`([^`\n]*rlkit submit[^`\n]*)`", text)
    commands = []
    for line in lines:
        m = re.search(r"(?:^|\s)(?:\.venv/bin/)?rlkit (submit .*)", line.split("  #")[0])
        if not m or "..." in m.group(1):
            continue
        argv = shlex.split(m.group(1))
        if "--preset" in argv and {"--dry-run", "--rayjob", "--raycluster"} & set(argv):
            commands.append(argv)
    return commands


def _runnable(argv: list[str], tmp_path: Path) -> list[str]:
    out = []
    for i, word in enumerate(argv):
        before = argv[i - 1] if i else ""
        if before in ("--rayjob", "--raycluster"):
            word = str(tmp_path / Path(word).name)
        elif before == "--image":
            word = IMAGE
        elif before == "--address" and word == "ADDR":
            word = "http://127.0.0.1:8265"
        out.append(word)
    return out


def test_every_submit_command_the_docs_show_runs(tmp_path, monkeypatch, capsys):
    for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    commands = [(page, argv) for page in PAGES for argv in submit_commands(page)]
    assert sum("--rayjob" in argv for _, argv in commands) >= 2
    assert sum("--raycluster" in argv for _, argv in commands) >= 2
    failed = []
    for page, argv in commands:
        for i, word in enumerate(argv):
            if argv[i - 1] == "--env":
                monkeypatch.setenv(word, "not-a-secret")
        code = rlkit_main(_runnable(argv, tmp_path))
        err = capsys.readouterr().err
        if code != 0:
            failed.append(f"{page.relative_to(ROOT)}: rlkit {' '.join(argv)} -> {code}: {err}")
    assert not failed, failed


# the notebooks' HyperPod path and numbers ------------------------------------------------


def notebook(name: str) -> str:
    return words((ROOT / "notebooks" / f"{name}.py").read_text())


def _preflight_default() -> str:
    parser = build_parser()._subparsers._group_actions[0].choices["preflight"]
    return next(a.default for a in parser._actions if "--preset" in a.option_strings)


def test_the_hyperpod_files_submit_the_preset_the_runbook_makes_the_default():
    default = _preflight_default()
    assert default == "qwen3vl-8b" and f"the default preset `{default}`" in words(
        DEPLOY.read_text()
    )
    setup = ROOT / "notebooks" / "presets" / "hyperpod-qwen3vl-8b"
    assert yaml.safe_load((setup / "03_train_grpo.yaml").read_text())["preset"] == default
    assert (
        yaml.safe_load((setup / "00_setup_and_connect.yaml").read_text())["preflight_preset"]
        == default
    )
    gpus = get_preset(default).num_gpus
    assert f"on one {gpus}-GPU node" in (setup / "03_train_grpo.yaml").read_text()
    for name in ("00_setup_and_connect", "03_train_grpo", "05_replay_and_failures"):
        text = notebook(name)
        assert "qwen3vl-8b-6gpu" not in text, name
        assert f"`{default}`" in text or f'"{default}"' in text, name


def test_notebook_00_sends_the_reader_to_the_runbooks_raycluster_step():
    steps = dict(re.findall(r"^## (\d+)\. (.*)$", DEPLOY.read_text(), flags=re.M))
    named = re.findall(r"`deploy/README\.md` step (\d+)", notebook("00_setup_and_connect"))
    assert named and all("RayCluster" in steps[n] for n in named), (named, steps)


def test_notebook_05_counts_the_final_evals_episodes():
    cfg = local_preset("local-tiny")
    mazes = maze_set(cfg.task.eval_set).n
    samples = cfg.schedule.eval_samples
    said = re.search(
        r"the final eval's (\d+) episodes, (\d+) mazes x (\d+) samples",
        notebook("05_replay_and_failures"),
    )
    assert said and tuple(map(int, said.groups())) == (mazes * samples, mazes, samples)


def test_notebook_03_says_which_groups_local_tiny_trains():
    assert local_preset("local-tiny").recipe.fail_advantage == -1
    text = notebook("03_train_grpo")
    assert "is skipped" not in text
    assert "`local-tiny` still trains a group that all failed, at -1" in text


def test_the_clip_fraction_captions_quote_local_tinys_step_size():
    grpo = local_preset("local-tiny").grpo
    caption = re.search(r"lr (\S+) over (\d+) passes", notebook("04_solve_rate_across_checkpoints"))
    glossary = words((ROOT / "docs" / "glossary.md").read_text())
    entry = re.search(r"`local-tiny`'s large steps \(lr (\S+), (\d+) passes over a batch", glossary)
    for said in (caption, entry):
        assert said and (float(said.group(1)), int(said.group(2))) == (grpo.lr, grpo.epochs)
    gpu = {get_preset(n).batch.lr for n in ("qwen3vl-8b", "qwen3vl-2b-smoke")}
    assert gpu == {1e-6} and "the GPU presets' 1e-6, one pass" in glossary
    assert all(get_preset(n).batch.epochs == 1 for n in ("qwen3vl-8b", "qwen3vl-2b-smoke"))


# the README's first look ----------------------------------------------------------------

LIGHT_INSTALL_LACKS = (
    "torch",
    "torchvision",
    "transformers",
    "matplotlib",
    "ipywidgets",
    "papermill",
    "vllm",
    "skyrl",
)
"""What `pip install ".[cluster]"` leaves out (the train, notebook and skyrl extras)."""


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert m, f"README.md has no section {title!r}"
    return m.group(1)


def test_the_readmes_first_look_runs_on_the_light_install(tmp_path):
    """Its three commands exit 0 with output, in a process where every package the light
    install leaves out fails to import; "Two commands" still names `make demo` and `make test`."""
    import os
    import sys

    block = re.search(r"```bash\n(.*?)```", readme_section("A first look in a minute"), re.S)
    install, *_ = block.group(1).splitlines()
    assert 'pip install ".[cluster]"' in install
    extras = {"train", "notebook", "skyrl"}
    assert not extras & set(re.findall(r"\[(\w+)\]", install))
    commands = [
        shlex.split(line.split("  #")[0])[1:]
        for line in block.group(1).splitlines()
        if line.startswith("rlkit ")
    ]
    assert len(commands) == 3
    script = (
        "import sys\n"
        f"for name in {LIGHT_INSTALL_LACKS!r}: sys.modules[name] = None\n"
        "from rlkit.cli.main import main\n"
        f"sys.exit(max(main(argv) for argv in {commands!r}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RLKIT_HOME")}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "hash=" in out and "oracle on test: 100.0% solved" in out
    assert "nothing submitted (--dry-run)" in out
    two = readme_section("Two commands")
    assert re.search(r"^make demo\b", two, re.M) and re.search(r"^make test\b", two, re.M)
