"""Notebooks 00-05: stored clean and paired with their py:percent sources, and all executed
headless in order (`rlkit demo --quick`: smoke preset, small samples) on the session's Ray head."""

import json
from pathlib import Path
from urllib.parse import urlparse

import jupytext
import nbformat
import pytest

from rlkit.notebook import compare
from rlkit.notebook.demo import (
    NOTEBOOK_DIR,
    NOTEBOOKS,
    WIDGET_STATE,
    ensure_kernel,
    execute,
    run_demo,
    shown_widget_state,
)

STORED_NOTEBOOKS = (*NOTEBOOKS, "06_compare_runs")
"""Every notebook notebooks/ holds: the demo's sequence, and runs side by side, which needs two
runs while the demo trains one (tests/test_compare.py executes it on two)."""


def test_every_notebook_is_paired_stored_without_outputs_and_has_a_parameters_cell():
    assert sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb")) == sorted(STORED_NOTEBOOKS)
    for name in STORED_NOTEBOOKS:
        ipynb = NOTEBOOK_DIR / f"{name}.ipynb"
        stored = json.loads(ipynb.read_text())
        code = [c for c in stored["cells"] if c["cell_type"] == "code"]
        assert all(c["outputs"] == [] and c["execution_count"] is None for c in code), name
        assert "widgets" not in stored["metadata"], f"{name}: widget state stored"
        assert ["parameters" in c["metadata"].get("tags", []) for c in code][0], name
        assert stored["metadata"]["kernelspec"]["name"] == "rlkit", name
        pair = jupytext.read(NOTEBOOK_DIR / f"{name}.py")
        cells = [(c.cell_type, c.source) for c in pair.cells]
        assert cells == [(c["cell_type"], "".join(c["source"])) for c in stored["cells"]], (
            f"{name}.ipynb and {name}.py differ: run `make notebooks`"
        )


GLOSSARY = NOTEBOOK_DIR.parent / "docs" / "glossary.md"
TERMS = (  # issue 39's list, then terms the notebooks use without defining them
    "advantage", "KL", "clip fraction", "entropy", "behaviour cloning", "pass@k",
    "design effect", "logprob gap", "token_mean", "TIS", "collapse vs convergence",
    "zero-variance group", "warm start", "paired test", "failure kinds", "greedy vs sampled",
    "Dr. GRPO", "fail advantage", "recipe", "capture",
)  # fmt: skip


def test_every_notebook_links_the_glossary_which_defines_the_terms():
    headings = [ln for ln in GLOSSARY.read_text().splitlines() if ln.startswith("### ")]
    for term in TERMS:
        assert any(term.lower() in h.lower() for h in headings), f"glossary lacks {term!r}"
    for name in STORED_NOTEBOOKS:
        assert "](../docs/glossary.md" in (NOTEBOOK_DIR / f"{name}.py").read_text(), name


def test_notebook_00_counts_the_notebooks_there_are():
    words = {6: "six", 7: "seven", 8: "eight"}
    intro = (NOTEBOOK_DIR / "00_setup_and_connect.py").read_text()
    assert f"These {words[len(STORED_NOTEBOOKS)]} notebooks" in intro
    for name in STORED_NOTEBOOKS:
        assert f" {name[:2]} " in intro, f"notebook 00 does not name {name}"


@pytest.mark.slow
def test_quick_demo_executes_every_notebook(ray_cluster, tmp_path, monkeypatch):
    port = urlparse(ray_cluster.address).port
    out = tmp_path / "demo"
    summary = run_demo(out, quick=True, local_port=port)
    for name in NOTEBOOKS:
        executed = json.loads((out / "notebooks" / f"{name}.ipynb").read_text())
        errors = [
            o
            for c in executed["cells"]
            for o in c.get("outputs", [])
            if o["output_type"] == "error"
        ]
        assert not errors, f"{name}: {errors}"
    for key in ("baseline", "final"):
        row = summary[key]
        assert 0.0 <= row["ci95"][0] <= row["solve_rate"] <= row["ci95"][1] <= 1.0
    assert summary["baseline"]["policy"] == "base" and summary["final"]["step"] == 8
    assert summary["baselines"]["oracle"]["solve_rate"] == 1.0
    assert summary["paired_test"]["steps"] == [4, 8]
    assert set(summary["timings_s"]) == {*NOTEBOOKS, "total"}
    curve = out / "plots" / "solve_rate_across_checkpoints.png"
    assert curve.read_bytes()[:4] == b"\x89PNG" and str(curve) in summary["plots"]
    # 01 shows VisGym's mazes beside rlkit's; 02 scores the seed's task and says what 43.75% is
    mazes = (out / "notebooks" / "01_mazes.ipynb").read_text()
    assert "visgym-easy" in mazes and (out / "plots" / "visgym_beside_rlkit.png").is_file()
    seed = (out / "notebooks" / "02_baseline_rollouts.ipynb").read_text()
    assert "The seed's 43.75% is 28 of 64" in seed and "64/64 = 100.00%" in seed
    # each saves the widget state of what it shows only: 05's replays are players, no widgets
    # (no state); 03 keeps its job monitor, its training-rollouts player in one HTML widget
    for name in NOTEBOOKS:
        executed = nbformat.read(out / "notebooks" / f"{name}.ipynb", as_version=4)
        assert shown_widget_state(executed)[1] == 0, f"{name} saved widgets it does not show"
    replay = json.loads((out / "notebooks" / "05_replay_and_failures.ipynb").read_text())
    assert "widgets" not in replay["metadata"]
    monitor = json.loads((out / "notebooks" / "03_train_grpo.ipynb").read_text())
    models = monitor["metadata"]["widgets"][WIDGET_STATE]["state"].values()
    players = [m for m in models if "class='rlkit-player'" in str(m["state"].get("value"))]
    assert [m["model_name"] for m in players] == ["HTMLModel"]
    # The cluster preset without an address is a dry run: the SkyRL command, nothing submitted.
    params = {"out_dir": str(out), "preset": "qwen3vl-8b-6gpu", "local_port": port}
    dry = execute("03_train_grpo", tmp_path / "dry", params, kernel=ensure_kernel())
    text = Path(dry).read_text()
    assert "no cluster: dry run" in text and "rlkit.cluster.skyrl.entry" in text
    # 03 worked one captured group of the run it trained, rewards to advantages
    trained = json.loads((out / "notebooks" / "03_train_grpo.ipynb").read_text())
    assert "(r - mean) / (std + 1e-6)  advantage used" in json.dumps(trained)
    # and after the job, its final state as text beside a static PNG of the monitor's curves
    final = [
        o["data"]
        for c in trained["cells"]
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {}) and ": SUCCEEDED" in "".join(o["data"]["text/plain"])
    ]
    assert len(final) == 1
    # 06 with its defaults after a plain `make demo` (one run): runs, touches nothing
    assert compare.ONE_RUN in run_06_with_defaults(out / "smoke", tmp_path / "home", monkeypatch)


def run_06_with_defaults(demo_run: Path, home: Path, monkeypatch) -> str:
    """Notebook 06 with no parameters, in a home where `make demo`'s one run sits at
    runs/demo/local-tiny (a link to `demo_run`): its text output."""
    (home / "runs" / "demo").mkdir(parents=True)
    (home / "runs" / "demo" / "local-tiny").symlink_to(demo_run)
    monkeypatch.setenv("RLKIT_HOME", str(home))
    before = sorted((p.relative_to(demo_run), p.stat().st_mtime) for p in demo_run.rglob("*"))
    path = execute("06_compare_runs", home / "out", {}, kernel=ensure_kernel())
    after = sorted((p.relative_to(demo_run), p.stat().st_mtime) for p in demo_run.rglob("*"))
    assert before == after, "notebook 06 wrote into the run it reads"
    outputs = [o for c in json.loads(path.read_text())["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    return "".join("".join(o.get("text", "")) for o in outputs)


def test_demo_kernels_keep_their_ipc_sockets_in_jupyters_runtime_dir():
    from jupyter_core.paths import jupyter_runtime_dir

    from rlkit.notebook.demo import kernel_config

    km = kernel_config()["KernelManager"]
    ip = Path(km["ip"])
    assert km["transport"] == "ipc" and ip.is_absolute()
    assert ip.parent == Path(jupyter_runtime_dir()) and ip.parent.is_dir()
    # jupyter_client takes the first free BASE-N: kernels started at once need bases of their own
    assert kernel_config()["KernelManager"]["ip"] != km["ip"]
    assert not [p for p in NOTEBOOK_DIR.iterdir() if p.is_socket()]  # none left in the tree


@pytest.mark.slow
def test_notebook_03_takes_one_recipe_for_either_backend(tmp_path):
    """Only `preset` and `recipe` change between the two executions; `submit=False` prints the
    plan and trains nothing (the SkyRL CPU preset would train ~8 min: the suite's one SkyRL
    run covers that path, and notebooks 04 -> 05 read it in tests/skyrl/test_run_interface.py)."""
    recipe = {"eps_clip_high": 0.28}
    for preset, wanted in (
        ("smoke", "--set recipe.eps_clip_high=0.28"),
        ("skyrl-tiny-cpu", "trainer.algorithm.eps_clip_high=0.28"),
    ):
        params = {"out_dir": str(tmp_path), "preset": preset, "recipe": recipe, "submit": False}
        path = execute("03_train_grpo", tmp_path / preset, params, kernel=ensure_kernel())
        cells = json.loads(Path(path).read_text())["cells"]
        outputs = [o for c in cells for o in c.get("outputs", [])]
        assert not [o for o in outputs if o["output_type"] == "error"], preset
        text = "".join("".join(o.get("text", "")) for o in outputs)
        assert wanted in text and "recipe:        eps_clip_high=0.28" in text, preset
