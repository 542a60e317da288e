"""A newcomer's friction: where a relative run path points from the CLI and from a notebook, how
`rlkit eval` names a run's checkpoint, what an executed notebook 03 shows, and notebooks that
count a run's evals alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlkit.cli import evaluate as eval_cli
from rlkit.cli import main as cli
from rlkit.episodes.policies import scripted_policy
from rlkit.notebook import compare, paths
from rlkit.run import RunNotFound

ROOT = Path(__file__).resolve().parent.parent


def test_a_cli_path_from_elsewhere_gets_the_absolute_path_a_notebook_needs(tmp_path, monkeypatch):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv(paths.HOME_ENV, str(home))
    monkeypatch.chdir(elsewhere)
    note = paths.cli_path_note("runs/smoke")
    assert note is not None and str(elsewhere / "runs" / "smoke") in note and str(home) in note
    assert paths.cli_path_note(elsewhere / "runs" / "smoke") is None  # absolute: one place
    monkeypatch.chdir(home)
    assert paths.cli_path_note("runs/smoke") is None  # from home both read it alike


@pytest.mark.parametrize("spec", ["runs/smoke", "smoke"])
def test_a_notebook_missing_a_relative_run_says_the_rule(tmp_path, monkeypatch, spec):
    monkeypatch.setenv(paths.HOME_ENV, str(tmp_path))
    with pytest.raises(RunNotFound) as e:
        compare.resolve_run(spec)
    message = str(e.value)
    assert str(tmp_path) in message and "$RLKIT_HOME" in message
    assert "current directory" in message and "absolute path" in message
    assert "\n" not in message


def test_notebook_06_says_where_its_relative_runs_are_read_from():
    text = (ROOT / "notebooks" / "06_compare_runs.py").read_text()
    assert "--run-dir runs/smoke` from the project root" in text
    assert "absolute path" in text


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        (("local-tiny", "global_step_204", "policy"), ("local-tiny", 204)),
        (("local-tiny", "global_step_204"), ("local-tiny", 204)),
        (("qwen", "exports", "global_step_20", "policy"), ("qwen", 20)),
        (("models", "tiny"), None),
    ],
)
def test_a_run_checkpoints_model_is_known_by_run_and_step(tmp_path, parts, expected):
    assert eval_cli.checkpoint_of(tmp_path.joinpath(*parts)) == expected


def test_rlkit_eval_labels_a_run_checkpoint_with_run_and_step(tmp_path, monkeypatch, capsys):
    model = tmp_path / "local-tiny" / "global_step_204" / "policy"
    model.mkdir(parents=True)
    # the oracle stands in for the checkpoint's model: the label is what is under test
    monkeypatch.setattr(eval_cli, "load_policy", lambda name, **kw: scripted_policy("oracle"))
    assert cli.main(["eval", "--policy", str(model), "--mazes", "2"]) == 0
    assert capsys.readouterr().out.startswith("local-tiny@204 on test: 100.0% solved")


@pytest.mark.parametrize(
    ("notebook", "scoring"),
    [
        ("04_solve_rate_across_checkpoints.py", "workbench.checkpoint_evals(run)"),
        ("05_replay_and_failures.py", "workbench.run_replays(run"),  # it calls checkpoint_evals
    ],
)
def test_notebooks_04_and_05_count_a_runs_evals_after_scoring_its_unscored_checkpoints(
    notebook, scoring
):
    """`run.describe()` counts the eval files there are: printed before `checkpoint_evals`
    scores a checkpoint the trainer did not evaluate, 04 counted fewer than 05 did after it."""
    text = (ROOT / "notebooks" / notebook).read_text()
    assert text.count("run.describe()") == 1
    assert text.index(scoring) < text.index("run.describe()")


@pytest.fixture(scope="module")
def results():
    from rlkit.episodes.evaluate import evaluate

    def run(name, **kw):
        return evaluate(scripted_policy(name), **{"n_mazes": 16, **kw})[0]

    return {
        "random": run("random", samples=2),
        "eps": run("eps-oracle:0.3", samples=4),
        "oracle": run("oracle", samples=2),
        "greedy": run("eps-oracle:0.3", mode="greedy", protocol="seed", n_mazes=None),
    }


def test_the_summary_table_names_both_intervals_of_a_greedy_result(results):
    from rlkit.notebook import report

    greedy = results["greedy"]
    table = report.solve_rate_table({"final": results["eps"], "step 204 greedy (k=1)": greedy})
    lo, hi = greedy.exact_ci95
    note = table.splitlines()[-1]
    assert table.splitlines()[-2].startswith("95% CI wilson-maze-deff")  # every row's
    assert note.startswith("one sample a maze: the seed's protocol reports the exact interval")
    assert "(clopper-pearson)" in note and f"step 204 greedy (k=1) [{lo:.1%}, {hi:.1%}]" in note
    assert "clopper" not in report.solve_rate_table({"final": results["eps"]})


@pytest.mark.parametrize("last", ["random", "eps", "oracle"])
def test_the_curves_end_label_stays_inside_the_axes(results, last):
    from rlkit.notebook import plots

    fig = plots.solve_rate_curve({0: results["random"], 204: results[last]})
    fig.canvas.draw()
    ax = fig.axes[0]
    label = next(t for t in ax.texts if t.get_text() == f"{results[last].solve_rate:.1%}")
    box, inside = label.get_window_extent(), ax.get_window_extent()
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1, (box, inside)
    assert inside.y0 <= box.y0 and box.y1 <= inside.y1, (box, inside)


def test_a_finished_jobs_snapshot_saves_its_final_state_and_a_static_figure(tmp_path):
    from rlkit.notebook.monitor import JobMonitor
    from rlkit.run.rundir import RunDir

    class Job:
        submission_id = "rlkit-demo-1"

        def __init__(self):
            self.statuses = ["PENDING", "SUCCEEDED"]

        def status(self):
            return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

        def logs(self):
            return "done\n"

        def stop(self):
            return True

    run = RunDir(tmp_path / "run")
    monitor = JobMonitor(Job(), run.path)
    shown = monitor._repr_mimebundle_()
    assert shown["text/plain"].startswith("job monitor, PENDING when shown")
    for s in range(3):
        run.append_metrics({"step": s, "rollout/reward_mean": s / 3, "rollout/solve_rate": s / 3})
    saved = monitor.snapshot()
    assert repr(saved).splitlines()[0] == "job rlkit-demo-1: SUCCEEDED"
    png = saved._repr_png_()
    assert isinstance(png, bytes) and png[:4] == b"\x89PNG" and png == bytes(monitor.curves.value)


def test_notebook_03_shows_the_snapshot_after_the_job_ends():
    text = (ROOT / "notebooks" / "03_train_grpo.py").read_text()
    finish = text.index("launch.finish(job, monitor, wait_s)")
    assert finish < text.index("display(monitor.snapshot())")
