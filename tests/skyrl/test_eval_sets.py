"""Several eval sets in one SkyRL run (`eval_sets=visgym-easy,visgym-hard`): the dry run's
command through SkyRL's config classes, one-line refusals, the rows each set's eval plays with
its own turn budget, and SkyRL's per-set dumps read back per set by `open_run` and the bridge."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils import validate_cfg
from test_eval_protocol import write_dump

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.bridge import MetricsBridge
from rlkit.cluster.skyrl.entry import add_eval_sets, ensure_datasets, parse_args
from rlkit.cluster.skyrl.preset_sections import set_view
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.cluster.skyrl.window import row_turns
from rlkit.env.data import read_rows
from rlkit.errors import UsageError
from rlkit.notebook import compare, plots, workbench
from rlkit.notebook.progress import read_progress
from rlkit.run import open_run
from rlkit.run.rundir import RunDir

CELLS, SAMPLED = "qwen3vl-8b", {"eval_protocol": "sampled"}
"""rlkit's cell mazes at their own view, `test` and `test-large` (12 and 24 turns)."""


def test_the_dry_run_plays_each_set_with_its_budget(capsys):
    argv = ["submit", "--preset", "qwen3vl-8b", "--address", "http://127.0.0.1:8265"]
    argv += ["--set", "eval_sets=visgym-easy,visgym-hard", "--dry-run"]
    assert rlkit_main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    (command,) = [ln for ln in out if ln.startswith("command:")]
    (line,) = [ln for ln in out if ln.startswith("eval:")]
    (episode,) = [ln for ln in out if ln.startswith("per episode:")]
    assert " 30 turns x " in episode  # the token budget of the set with the longest episodes
    _, overrides = parse_args(shlex.split(command.removeprefix("command:"))[3:])
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)
    assert cfg.generator.max_turns == 30  # visgym-hard's; visgym-easy's rows say 18
    assert "limit_mm_per_prompt.image=31" in " ".join(overrides)
    assert line.endswith("on visgym-easy (18 turns), visgym-hard (30 turns)")


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ("visgym-easy,nope", "no env config for maze set 'nope'"),
        ("visgym-easy,test", "test is another game than eval_set visgym-easy"),
    ],
)
def test_bad_eval_sets_are_refused_in_one_line(sets, message):
    with pytest.raises(UsageError, match=message) as e:
        get_preset("qwen3vl-8b", eval_sets=sets)
    assert "\n" not in str(e.value)


def test_a_set_drawn_smaller_scales_its_walls():
    """The CPU preset draws 8 px a cell: test-large's 4 px walls (at 64 px) become 1 px."""
    sky = get_preset("skyrl-tiny-cpu", eval_sets="test,test-large")
    assert set_view("test-large", sky.task.cell_px).style.wall_px == 1
    assert set_view("test-large").style.wall_px == 4


def test_the_rows_carry_each_sets_budget_once(tmp_path):
    sky = get_preset(CELLS, eval_set="test", eval_sets="test,test-large", **SAMPLED, eval_mazes=4)
    assert sky.eval_set_names == ("test", "test-large") and sky.turn_limit == 24
    data = str(tmp_path / "data")
    ensure_datasets(data, 2, "test", 4)
    add_eval_sets(data, sky)
    evals, train = (
        read_rows(tmp_path / "data" / "eval.parquet"),
        read_rows(tmp_path / "data" / "train.parquet"),
    )
    turns = {(r["data_source"], r["extra_info"]["max_turns"]) for r in evals}
    assert turns == {("rlkit-maze/test", 12), ("rlkit-maze/test-large", 24)} and len(evals) == 8
    assert {r["extra_info"]["max_turns"] for r in train} == {12}
    assert [row_turns({"extra_info": r["extra_info"]}, 24) for r in evals[3:5]] == [12, 24]
    assert row_turns({"extra_info": {"maze": "{}"}}, 18) == 18  # a row written without one
    before = (tmp_path / "data" / "eval.parquet").read_bytes()
    add_eval_sets(data, sky)  # a resumed run: already written
    assert (tmp_path / "data" / "eval.parquet").read_bytes() == before


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory) -> tuple[Path, dict]:
    """A SkyRL run dir that evaluated `test` and `test-large` at step 0, as its bridge logged."""
    sky = get_preset(CELLS, eval_set="test", eval_sets="test,test-large", **SAMPLED)
    run = tmp_path_factory.mktemp("runs") / "two"
    ensure_datasets(str(run / "data"), 2, "test", 64)
    add_eval_sets(str(run / "data"), sky)
    entry = {"task": {"eval_set": "test"}}
    RunDir(run).init(preset=CELLS, seed=0, backend="skyrl", config={"entry": entry})
    write_dump(run / "exports", read_rows(run / "data" / "eval.parquet"), samples=2, solved=16)
    bridge = MetricsBridge(run, run / "exports", ray_gauges=False, mlflow=False, greedy=False)
    return run, bridge.log({"eval/all/avg_score": 0.25}, step=0)


def test_open_run_and_the_bridge_read_each_set(two_sets):
    run, record = two_sets
    assert record["eval/solve_rate"] == record["eval/test-large_solve_rate"] == 16 / 64
    assert record["eval/mazes"] == record["eval/test-large_mazes"] == 64
    by_set = open_run(run).evals_by_set()
    assert list(by_set) == ["test", "test-large"]
    assert [r[0].set for r in by_set.values()] == ["test", "test-large"]
    assert open_run(run).evals()[0] == by_set["test"][0]
    line = read_progress(run).eval_text()  # the monitor's line: a rate a set
    assert (
        line.startswith("eval step 0: 25.0% [")
        and "(sampled, 2 a maze); test-large: 25.0% [" in line
    )


def test_notebooks_04_and_06_show_each_set(two_sets):
    run, _ = two_sets
    others = workbench.other_eval_sets(run)
    assert list(others) == ["test-large"]
    fig = plots.solve_rate_curve(workbench.checkpoint_evals(run), others=others)
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert labels[:2] == [
        "solve rate, test, rlkit's protocol (sampled, 2 a maze)",
        "solve rate, test-large, rlkit's protocol (sampled, 2 a maze)",
    ]
    (view,) = compare.load_runs([run], eval_set="test-large")
    assert view.evals[0].set == "test-large"
    with pytest.raises(UsageError, match="no evals of visgym-hard: its sets are test, test-large"):
        compare.load_runs([run], eval_set="visgym-hard")
