"""The notebook-level steps, on a real smoke run trained in-process (~30 s) and scripted policies."""

import json
from pathlib import Path

import pytest

from rlkit.cluster import launch
from rlkit.episodes.evaluate import EvalResult, evaluate
from rlkit.episodes.failures import KINDS, classify
from rlkit.episodes.policies import scripted_policy
from rlkit.errors import UsageError
from rlkit.notebook import baselines, plots, report, workbench
from rlkit.run import open_run
from rlkit.run.rundir import RunDir
from rlkit.train.presets import preset
from rlkit.train.trainer import train


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("wb")
    plan = launch.plan_training("smoke", out)
    train(preset("smoke"), plan.run_dir, progress=False)
    return out, plan


def test_kernel_report_names_versions_and_problems():
    report = workbench.kernel_report()
    assert report["python"].count(".") == 2
    assert report["torch"].startswith("2.") and report["rlkit"] != "missing"
    assert report["problems"] == "none"  # this venv runs the cluster's versions


def test_kernel_report_of_a_torch_free_client_has_no_problem(monkeypatch):
    """environment.yml's kernel lacks torch and transformers on purpose; ray it needs."""
    real = workbench.metadata.version

    def version(name, missing=("torch", "transformers")):
        if name in missing:
            raise workbench.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(workbench.metadata, "version", version)
    report = workbench.kernel_report()
    assert report["torch"] == "missing" and report["problems"] == "none"
    assert "environment-train.yml" in report["local_training"]
    monkeypatch.setattr(workbench.metadata, "version", lambda n: version(n, ("torch", "ray")))
    assert workbench.kernel_report()["problems"] == "ray is not installed in this kernel"


def test_kernel_report_versions_are_the_cluster_pins():
    pins = (Path(__file__).parent.parent / "requirements" / "cluster-pins.txt").read_text()
    pinned = dict(
        line.split("==") for line in pins.splitlines() if "==" in line and not line.startswith("#")
    )
    for name, version in workbench.CLUSTER_VERSIONS.items():
        if name != "python":
            assert pinned[name] == version, name


def test_evaluate_cached_reuses_the_file_and_rebuilds_for_other_samples(tmp_path):
    built = []

    def make():
        built.append(1)
        return scripted_policy("oracle")

    path = tmp_path / "oracle.json"
    first, trajs = workbench.evaluate_cached(path, make, samples=1, label="oracle")
    again, trajs_again = workbench.evaluate_cached(path, make, samples=1)
    assert len(built) == 1  # the second call read the cache
    assert again.to_dict() == first.to_dict() and first.solve_rate == 1.0
    assert [t.solved for t in trajs_again] == [t.solved for t in trajs]
    bigger, _ = workbench.evaluate_cached(path, make, samples=2)
    assert len(built) == 2 and bigger.samples == 2


def test_baselines_are_cached_and_read_back(tmp_path):
    got = baselines.baseline_evals(tmp_path, "smoke", samples=1, policies=("random", "oracle"))
    assert got["oracle"].solve_rate == 1.0 and got["oracle"].policy == "oracle"
    assert 0.0 < got["random"].solve_rate < 0.8
    cached = baselines.baseline_evals(tmp_path, "smoke", samples=1, policies=("random", "oracle"))
    assert list(cached) == ["random", "oracle"]
    assert cached["random"].flat == got["random"].flat
    trajs = baselines.baseline_trajectories(tmp_path, "random")
    assert len(trajs) == got["random"].n_mazes


def test_baselines_are_keyed_by_seed_and_samples_not_only_by_name(tmp_path):
    a = baselines.baseline_evals(tmp_path, "smoke", samples=1, policies=("random",))
    b = baselines.baseline_evals(tmp_path, "smoke", samples=1, seed=1, policies=("random",))
    c = baselines.baseline_evals(tmp_path, "smoke", samples=2, policies=("random",))
    files = sorted(p.name for p in (tmp_path / "baselines").glob("random-*.json"))
    assert len(files) == 3  # three keys, three evaluations: none read another's cache
    assert a["random"].flat != b["random"].flat and c["random"].samples == 2
    index = json.loads((tmp_path / "baselines" / "index.json").read_text())
    assert sorted((k["seed"], k["samples"]) for k in index.values()) == [(0, 1), (0, 2), (1, 1)]
    # the same key again is a cache hit: the same episodes, no new file
    again = baselines.baseline_evals(tmp_path, "smoke", samples=1, seed=1, policies=("random",))
    assert again["random"].flat == b["random"].flat
    assert len(list((tmp_path / "baselines").glob("random-*.json"))) == 3


def test_base_model_is_the_runs_initial_model(smoke_run, tmp_path):
    out, plan = smoke_run
    base = workbench.base_model("smoke", tmp_path)
    init = Path(plan.run_dir) / "init_model"
    for name in ("config.json", "model.safetensors"):
        assert (base / name).read_bytes() == (init / name).read_bytes()


def test_a_real_captured_group_is_worked_to_its_advantages(smoke_run):
    """The smoke run's newest captured step (notebook 03's worked group): the rule named
    reproduces the advantages its loss used."""
    from rlkit.notebook.groups import RULES, worked_group

    view = worked_group(open_run(smoke_run[1].run_dir))
    assert view.rule in (RULES["grpo"], RULES["dropped"])
    if view.rule == RULES["grpo"]:
        assert view.captured == pytest.approx(view.by_hand(), abs=1e-3)


def test_a_local_run_reads_back_through_the_one_run_interface(smoke_run):
    out, plan = smoke_run
    run = open_run(plan.run_dir)
    assert run.backend == "local" and run.preset == "smoke" and run.name == plan.run_name
    assert run.config()["schedule"] == json.loads(json.dumps(preset("smoke").to_dict()))["schedule"]
    assert workbench.run_config(run) == preset("smoke")
    assert sorted(run.evals()) == [0, 4, 6, 8] and run.warm_start_end() == 4
    ckpts = run.checkpoints()
    assert ckpts and all(c.complete and c.hf_export == c.path / "policy" for c in ckpts)
    assert run.latest_checkpoint().step == 8
    trajs = run.trajectories(8)
    assert len(trajs) == run.evals()[8].n_mazes * run.evals()[8].samples
    assert [r["step"] for r in run.metrics()] == [r["step"] for r in plots.load_metrics(run.path)]
    assert run.describe().startswith(f"{plan.run_name}: local run, preset smoke, last step 8")


def test_rescoring_uses_the_runs_own_recorded_config_not_the_presets(smoke_run, tmp_path):
    import shutil

    out, plan = smoke_run
    copy = tmp_path / "copy"
    shutil.copytree(plan.run_dir, copy)
    info = json.loads((copy / "run.json").read_text())
    info["config"]["schedule"]["eval_samples"] = 2  # as if trained with --set eval_samples=2
    (copy / "run.json").write_text(json.dumps(info))
    assert workbench.run_config(copy).schedule.eval_samples == 2
    (copy / "evals" / "global_step_8.json").unlink()
    rescored = workbench.checkpoint_evals(copy)[8]
    assert rescored.samples == 2  # the preset says 1: the run's own config decided


def test_checkpoint_evals_rescore_a_checkpoint_exactly_as_the_trainer_did(smoke_run):
    out, plan = smoke_run
    evals = workbench.checkpoint_evals(plan.run_dir)
    assert sorted(evals) == [0, 4, 6, 8]
    eval_file = RunDir(plan.run_dir).eval_path(8)
    original = json.loads(eval_file.read_text())
    eval_file.unlink()
    rescored = workbench.checkpoint_evals(plan.run_dir)[8]
    # Same weights, same eval seed and settings: the same episodes, maze by maze.
    assert rescored.per_maze == original["per_maze"]
    assert rescored.policy == f"{plan.run_name}@8" and rescored.step == 8


def test_boundary_milestones_paired_test_and_summary(smoke_run):
    out, plan = smoke_run
    evals = workbench.checkpoint_evals(plan.run_dir)
    boundary = open_run(plan.run_dir).warm_start_end()
    assert boundary == 4
    rows = report.milestones(evals, boundary)
    assert list(rows) == ["step 0 (start)", "step 4 (warm start done)", "step 8 (final)"]
    paired = report.grpo_paired_test(evals, boundary)
    assert (paired.step_a, paired.step_b) == (4, 8)
    assert paired.test.n_mazes == 64 and 0.0 <= paired.test.p_value <= 1.0
    assert "on 64 mazes x 1 samples/maze, paired by maze; " in str(paired)
    assert ("step 8 is better" in str(paired)) == (
        paired.test.p_value < 0.05 and paired.test.diff > 0
    )
    summary = report.build_summary(
        {}, evals, boundary=boundary, paired=paired, run=plan.run_dir, plots=[]
    )
    assert summary["final"]["step"] == 8 and summary["baseline"]["step"] == 0
    assert summary["paired_test"]["steps"] == [4, 8]
    assert summary["paired_test"]["verdict"] == paired.verdict
    assert summary["paired_test"]["method"].startswith("exact sign-flip test")
    assert summary["final"]["ci_method"] == "wilson-maze-deff"
    assert summary["final"]["solve_rate"] == round(evals[8].solve_rate, 4)
    # a header, 3 rows, the interval's method, and the seed's exact intervals of the 64 x 1 rows
    assert len(summary["table"]) == 6 and summary["table"][-2].startswith("95% CI wilson-maze")
    assert (
        summary["table"][-1].startswith("one sample a maze")
        and "step 8 (final) [" in (summary["table"][-1])
    )
    e0, e4, e8 = (evals[s] for s in (0, 4, 8))
    rate = lambda r: f"{r.solve_rate:.1%} [{r.ci95[0]:.1%}, {r.ci95[1]:.1%}]"  # noqa: E731
    assert summary["headline"] == (
        f"base {rate(e0)} -> warm start {rate(e4)} (step 4) -> final {rate(e8)} (step 8); "
        f"95% CI wilson-maze-deff; paired by maze: {paired.verdict}"
    )
    path = report.write_summary(out, summary)
    assert json.loads(path.read_text())["warm_start_end"] == 4


def test_final_greedy_eval_plays_the_last_checkpoint_by_argmax_and_joins_the_summary(smoke_run):
    from rlkit.model.policy import load_policy

    out, plan = smoke_run
    greedy = workbench.final_greedy_eval(plan.run_dir)
    assert (greedy.step, greedy.mode, greedy.samples, greedy.n_mazes) == (8, "greedy", 1, 64)
    policy = load_policy(Path(plan.run_dir) / "global_step_8" / "policy", greedy=True)
    direct, _ = evaluate(policy, samples=1, mode="greedy")
    assert greedy.per_maze == direct.per_maze  # argmax: the same episodes whatever the seed
    cached = RunDir(plan.run_dir).evals_dir / "greedy" / "global_step_8.json"
    assert cached.is_file() and workbench.final_greedy_eval(plan.run_dir).flat == greedy.flat
    assert sorted(workbench.checkpoint_evals(plan.run_dir)) == [0, 4, 6, 8]  # not a 5th eval
    evals = workbench.checkpoint_evals(plan.run_dir)
    summary = report.build_summary(
        {}, evals, boundary=4, paired=None, run=plan.run_dir, plots=[], greedy=greedy
    )
    rate = f"{greedy.solve_rate:.1%} [{greedy.ci95[0]:.1%}, {greedy.ci95[1]:.1%}]"
    assert f"(step 8), greedy {rate}; 95% CI" in summary["headline"]
    assert summary["final_greedy"]["solve_rate"] == round(greedy.solve_rate, 4)
    assert any(line.startswith("step 8 greedy (k=1)") for line in summary["table"])
    with pytest.raises(UsageError, match="no complete checkpoint"):
        workbench.final_greedy_eval(out)


def test_solve_rate_table_lines():
    result, _ = evaluate(scripted_policy("oracle"), samples=2)
    text = report.solve_rate_table({"oracle": result})
    header, row, method = text.splitlines()
    assert header.startswith("policy") and "95% CI" in header
    # all solved: the 64 mazes count, not the 128 episodes (flat Wilson said [97.1%, 100%])
    assert row.split() == ["oracle", "100.0%", "[94.3%,", "100.0%]", "100%", "@2", "64x2"]
    assert (
        method == "95% CI wilson-maze-deff: Wilson on the effective n, episodes clustered by maze"
    )
    with pytest.raises(UsageError):
        report.solve_rate_table({})


def _result(solved: list[bool]) -> EvalResult:
    per_maze = [{"solved": [s]} for s in solved]
    return EvalResult(
        "p", "test", len(solved), 1, 0.5, (0.0, 1.0), "wilson-maze-deff", "h", per_maze=per_maze
    )


def test_diff_maze_prefers_newly_solved_then_newly_failed_then_zero():
    assert workbench.diff_maze(_result([True, False, True]), _result([True, False, False])) == 2
    assert workbench.diff_maze(_result([False, False, True]), _result([False, True, False])) == 1
    assert workbench.diff_maze(_result([True, True]), _result([True, True])) == 0


def test_episode_and_failure_examples():
    result, trajs = evaluate(scripted_policy("random"), samples=2, seed=3)
    ep = workbench.episode(trajs, result, 5, 1)
    assert ep is trajs[11]
    with pytest.raises(UsageError, match="choose maze < 64"):
        workbench.episode(trajs, result, 64)
    examples = workbench.failure_examples(trajs)
    assert examples and all(classify(t) == k for k, t in examples.items())
    order = [k for k in KINDS if k in examples]
    assert list(examples) == order


def test_plans_for_local_and_cluster_presets(tmp_path):
    local = launch.plan_training("smoke", tmp_path, run_name="my run")
    assert local.run_name == "my-run" and local.run_dir == str((tmp_path / "my-run").resolve())
    assert (
        local.command.startswith("python -m rlkit.cli.main train --preset smoke")
        and not local.dry_run
    )
    sky = launch.plan_training("qwen3vl-8b-6gpu", tmp_path, skyrl_changes={"nodes": 2})
    assert sky.dry_run and sky.sky.num_gpus == 12
    assert sky.run_dir == "/fsx/rlkit/runs/qwen3vl-8b-6gpu"
    text = str(sky)
    assert (
        "no cluster: dry run" in text
        and "rlkit.cluster.skyrl.entry" in text
        and "SkyRL asks for 12 GPUs" in text
    )
    assert launch.launch_plan(sky, None) is None
    with pytest.raises(UsageError, match="needs a cluster"):
        launch.launch_plan(local, None)
    with pytest.raises(UsageError, match="unknown preset 'huge'"):
        launch.plan_training("huge", tmp_path)


def test_checkpoint_evals_refuses_a_directory_that_is_no_run(tmp_path):
    with pytest.raises(UsageError, match="neither a run dir"):
        workbench.checkpoint_evals(tmp_path)


def test_save_png(tmp_path):
    from rlkit.maze.sets import pinned_set
    from rlkit.notebook.plots import maze_gallery

    path = workbench.save_png(maze_gallery(pinned_set()[:4]), tmp_path, "g")
    assert path == tmp_path / "plots" / "g.png" and path.read_bytes()[:4] == b"\x89PNG"


def test_run_baselines_are_those_of_the_runs_own_model_and_test_set(smoke_run, tmp_path):
    out, plan = smoke_run
    evals = workbench.checkpoint_evals(plan.run_dir)
    root = tmp_path / "baselines"
    root.mkdir()
    legacy = evals[8].to_dict() | {"policy": report.BASE, "trajectories": None}
    (root / "base.json").write_text(json.dumps(legacy))  # cached before keys: model unknown
    assert baselines.run_baselines(tmp_path, plan.run_dir, evals) == {}
    got = baselines.baseline_evals(tmp_path, "smoke", samples=1, policies=("oracle", report.BASE))
    kept = baselines.run_baselines(tmp_path, plan.run_dir, evals)
    assert list(kept) == ["oracle", report.BASE]  # the keyed base, never the legacy file
    assert kept[report.BASE].flat == got[report.BASE].flat
