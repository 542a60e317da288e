"""One run interface: `open_run` on a local run dir, its summary read back as a `SummaryRun`,
and the same summary read through a real local Ray head by a Ray job (what a Studio kernel
without /fsx does)."""

import json

import pytest

from rlkit.episodes.evaluate import evaluate
from rlkit.episodes.policies import scripted_policy
from rlkit.errors import RlkitError, UsageError
from rlkit.notebook import workbench
from rlkit.run import RunNotFound, open_run
from rlkit.run.backends import LocalRun, SummaryRun
from rlkit.run.captures import CapturedEpisode, pick_episodes, step_path, write_step
from rlkit.run.remote import TAG, main, read_answer
from rlkit.run.rundir import RunDir

STABILITY = {"loss/entropy": 1.2, "loss/clip_fraction": 0.05, "loss/grad_norm": 0.8}
"""The stability signals of the fixture's GRPO step."""


@pytest.fixture
def local_run(tmp_path):
    """A local run dir as the trainer leaves it: run.json, 3 steps of metrics (2 of warm start),
    an eval with its episodes and one complete checkpoint."""
    run = RunDir(tmp_path / "demo")
    run.init(preset="smoke", seed=0, backend="local", config={"schedule": {"steps": 4}})
    for step, phase in ((0, "warm_start"), (1, "warm_start"), (2, "grpo")):
        record = {"step": step, "train/phase": phase, "rollout/reward_mean": step / 2}
        run.append_metrics(record | (STABILITY if phase == "grpo" else {}))
    result, trajs = evaluate(scripted_policy("eps-oracle:0.25"), samples=1, step=2)
    result.save(run.eval_path(2), trajs)
    run.save_checkpoint(2, lambda d: (d / "policy").mkdir())
    for step in (1, 2):  # training rollouts captured at steps 1 and 2: two groups of two
        eps = pick_episodes(step, trajs[:4], [0, 0, 1, 1], [0.5, -0.5, 0.0, 0.0], n=2, seed=0)
        write_step(run.path, step, eps, keep=None)
    return run.path


def summary_from_logs(logs: str, path: str):
    """The run from a reading job's logs, as `read_run` reads it."""
    from rlkit.run.backends import SummaryRun

    return SummaryRun(read_answer(logs, TAG, f"the cluster could not read {path}"))


def test_open_run_reads_a_local_run(local_run):
    run = open_run(local_run)
    assert isinstance(run, LocalRun) and run.backend == "local" and run.name == "demo"
    assert run.preset == "smoke" and run.config() == {"schedule": {"steps": 4}}
    assert [r["step"] for r in run.metrics()] == [0, 1, 2] and run.warm_start_end() == 1
    assert list(run.evals()) == run.eval_steps() == [2] and run.evals()[2].step == 2
    assert len(run.trajectories(2)) == run.evals()[2].n_mazes
    (ckpt,) = run.checkpoints()
    assert (ckpt.step, ckpt.complete, ckpt.hf_export) == (
        2,
        True,
        local_run / "global_step_2" / "policy",
    )
    assert run.describe() == "demo: local run, preset smoke, last step 2, 1 evals, 1 checkpoints"


def test_open_run_refuses_what_is_not_a_run_dir_in_one_line(tmp_path, local_run):
    with pytest.raises(RunNotFound, match="not mounted in this kernel"):
        open_run(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="is a file: give the run directory"):
        open_run(local_run / "run.json")
    with pytest.raises(RunNotFound):  # no cluster to read it through: the same one line
        workbench.open_source(tmp_path / "elsewhere")


def test_a_skyrl_run_reads_the_names_older_bridges_wrote_as_todays(tmp_path):
    run = RunDir(tmp_path / "sky")
    run.init(preset="qwen3vl-2b-cpu", seed=0, backend="skyrl")
    run.append_metrics({"step": 1, "rollout/turns": 7.5, "loss/loss_metrics_clip_ratio": 0.1})
    (record,) = open_run(run.path).metrics()
    assert record == {"step": 1, "rollout/turns_mean": 7.5, "loss/clip_fraction": 0.1}


def test_a_summary_reads_back_as_the_same_run_without_eval_episodes(local_run, capsys):
    assert main([str(local_run)]) == 0
    line = capsys.readouterr().out
    assert line.startswith(TAG)
    back = summary_from_logs("some job chatter\n" + line, str(local_run))
    run = open_run(local_run)
    assert isinstance(back, SummaryRun) and back.backend == "local" and back.name == "demo"
    assert back.metrics() == run.metrics() and back.config() == run.config()
    assert back.evals()[2].per_maze == run.evals()[2].per_maze
    assert back.checkpoints() == run.checkpoints() and back.warm_start_end() == 1
    with pytest.raises(UsageError, match="read where its files are"):
        back.trajectories(2)
    # the newest captured step comes along (what a monitor plays); older ones on request
    assert back.capture_steps() == run.capture_steps() == [1, 2]
    assert back.captures(2) == run.captures(2) and len(back.captures(2)) == 4
    with pytest.raises(UsageError, match=r"step 1's captured rollouts .* brought \[2\]"):
        back.captures(1)
    assert main([str(local_run), "--captured", "2"]) == 0
    both = summary_from_logs(capsys.readouterr().out, str(local_run))
    assert both.captures(1) == run.captures(1) and both.captures(2) == run.captures(2)
    assert main([str(local_run), "--captured", "0"]) == 0
    none = summary_from_logs(capsys.readouterr().out, str(local_run))
    assert none.capture_steps() == [1, 2]
    with pytest.raises(UsageError, match="not brought"):
        none.captures(2)
    with pytest.raises(UsageError, match=r"no captured rollouts for step 9 .* are \[1, 2\]"):
        none.captures(9)
    with pytest.raises(SystemExit):
        main([str(local_run), "--captured", "-1"])
    assert "--captured (-1) must be >= 0" in capsys.readouterr().err
    # a damaged capture file travels as its one-line error; the rest of the summary still reads
    step_path(local_run, 2).write_text("{not json\n")
    assert main([str(local_run)]) == 0
    damaged = summary_from_logs(capsys.readouterr().out, str(local_run))
    assert damaged.metrics() == run.metrics()
    with pytest.raises(RlkitError, match=r"global_step_2.jsonl:1 is not a captured episode"):
        damaged.captures(2)
    # a NaN (a diverged run's advantage) cannot travel in strict JSON: that step says so
    nan = CapturedEpisode(2, 0, float("nan"), run.captures(1)[0].trajectory)
    write_step(local_run, 2, [nan], keep=None)
    assert main([str(local_run)]) == 0
    diverged = summary_from_logs(capsys.readouterr().out, str(local_run))
    with pytest.raises(RlkitError, match="non-finite number .* read them where the files are"):
        diverged.captures(2)
    with pytest.raises(RlkitError, match="could not read /x: rlkit: no run"):
        summary_from_logs("rlkit: no run at /x", "/x")


@pytest.mark.timeout(300)
def test_the_cluster_reads_a_run_this_kernel_cannot_see(ray_cluster, local_run, capsys):
    """One small Ray job through the Jobs API (the reader Studio uses without /fsx)."""
    from rlkit.cli.main import main as rlkit
    from rlkit.run.remote import read_run

    back = read_run(ray_cluster, local_run)
    run = open_run(local_run)
    assert json.dumps(back.summary()) == json.dumps(run.summary())
    assert any(j.submission_id.startswith("rlkit-read-demo-") for j in ray_cluster.jobs())
    # `rlkit rollouts --address`: the same answers read on the cluster (every step for a list)
    outputs = {}
    for where in ([], ["--address", ray_cluster.address]):
        for argv in (["--json"], ["--step", "1", "--json"]):
            assert rlkit(["rollouts", str(local_run), *argv, *where]) == 0
            outputs.setdefault(tuple(argv), []).append(json.loads(capsys.readouterr().out))
    for here, there in outputs.values():
        assert here == there
    assert [s["step"] for s in outputs[("--json",)][0]["steps"]] == [1, 2]


def test_rlkit_plot_and_eval_read_a_local_run_through_the_same_interface(
    local_run, tmp_path, capsys
):
    from rlkit.cli.main import main

    solve, curves, stable = (tmp_path / f"{n}.png" for n in ("solve", "curves", "stability"))
    argv = ["plot", "--run-dir", str(local_run), "--out", str(solve), "--curves", str(curves)]
    assert main([*argv, "--stability", str(stable)]) == 0, capsys.readouterr().err
    assert f"and {stable}" in capsys.readouterr().out
    assert (
        solve.read_bytes()[:4] == curves.read_bytes()[:4] == stable.read_bytes()[:4] == b"\x89PNG"
    )
    assert main(["eval", "--policy", str(local_run)]) == 2
    err = capsys.readouterr().err
    assert "is a local run, not a model" in err
    assert f"--policy {local_run}/global_step_2/policy" in err
