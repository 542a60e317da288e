"""SkyRL's metrics reach rlkit's run dir, Ray gauge names, the dashboard and MLflow.

Driven by SkyRL's own `Tracking` (through `BridgedTracking`, what `RlkitExp.get_tracker` gives
SkyRL's trainer), with dicts in SkyRL's key names, on the run dir of the skyrl_eval fixture,
whose eval dumps SkyRL's own `evaluate` wrote at step 10. The gauges reaching the head's
Prometheus endpoint are checked on the suite's SkyRL CPU run (test_skyrl_cpu_run.py), whose
bridge logs them from inside SkyRL's trainer task.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils.tracking import Tracking

from rlkit.cluster.hang import STEP_PATTERN
from rlkit.cluster.skyrl.bridge import MetricsBridge, rlkit_names
from rlkit.cluster.skyrl.experiment import RlkitExp, bridged_tracker
from rlkit.cluster.skyrl.overrides import build_overrides
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.notebook.curves import training_curves
from rlkit.notebook.plots import load_metrics
from rlkit.run.metrics import PREFIXES
from rlkit.run.rundir import RunDir
from rlkit.run.skyrl_dumps import read_eval_dumps

U0085_DUMP = Path(__file__).parent / "data" / "u0085_eval_dump"  # a real dump: 4 mazes x 2

TRAIN_STEP = {  # what SkyRL's trainer logs at a training step (a subset, its own names)
    "reward/avg_raw_reward": 0.25,
    "reward/avg_pass_at_8": 0.5,
    "environment/solve_rate": 0.25,
    "environment/turns_mean": 9.5,
    "generate/avg_num_tokens": 120.0,
    "policy/policy_loss": -0.01,
    "policy/final_loss": -0.008,
    "policy/policy_kl": 0.002,
    "trainer/global_step": 10,
    "trainer/epoch": 0,
    "timing/step": 41.5,
    "timing/generate": 30.0,
    "unprefixed_thing": 1.0,
}


def test_names_land_in_rlkit_groups():
    names = rlkit_names({**TRAIN_STEP, "eval/all/pass@4": 0.8, "text": "x", "nan": float("nan")})
    assert names["rollout/reward_mean"] == 0.25 and names["rollout/solve_rate"] == 0.25
    assert names["rollout/turns_mean"] == 9.5 and names["loss/policy"] == -0.01
    assert names["loss/total"] == -0.008 and names["loss/kl"] == 0.002
    assert names["train/global_step"] == 10 and names["timing/step"] == 41.5
    assert names["rollout/avg_pass_at_8"] == 0.5 and names["eval/all_pass_at_4"] == 0.8
    assert all(k.startswith(PREFIXES) for k in names)
    assert "unprefixed_thing" not in str(names) and "text" not in str(names)


def test_skyrl_tracker_feeds_metrics_jsonl_plots_and_mlflow(skyrl_eval, tmp_path, monkeypatch):
    cfg, eval_metrics = skyrl_eval
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file://{tmp_path / 'mlruns'}")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a real local MLflow file store
    run = Path(cfg.trainer.ckpt_path)
    (run / "latest_ckpt_global_step.txt").write_text("10")
    tracker = bridged_tracker(cfg)
    assert isinstance(tracker, Tracking) and tracker.backend == "console"
    assert RlkitExp.get_tracker is not Tracking  # SkyRL's extension point, overridden
    tracker.log(TRAIN_STEP, step=10)
    tracker.log(eval_metrics, step=10, commit=True)  # SkyRL logs its eval dict separately
    assert tracker.bridge.checkpoint == 10
    tracker.finish()

    records = load_metrics(run)
    assert [r["step"] for r in records] == [10, 10]
    train, evals = records
    assert train["rollout/solve_rate"] == 0.25 and train["loss/policy"] == -0.01
    result = read_eval_dumps(cfg.trainer.export_path)[10]
    assert evals["eval/solve_rate"] == eval_metrics["eval/all/avg_score"] == result.solve_rate
    assert (evals["eval/ci_low"], evals["eval/ci_high"]) == tuple(result.ci95)
    assert evals["eval/pass_at_2"] == result.pass_at_k["pass@2"]
    assert training_curves(run, run_id=run.name) is not None  # the notebook's curves read it

    import mlflow

    mlflow.set_tracking_uri(f"file://{tmp_path / 'mlruns'}")
    exp = mlflow.get_experiment_by_name("rlkit")
    (logged,) = mlflow.search_runs([exp.experiment_id], output_format="list")
    assert logged.info.run_name == cfg.trainer.run_name
    assert logged.data.metrics["rollout/solve_rate"] == 0.25
    assert logged.data.metrics["eval/ci_high"] == result.ci95[1]


def test_without_mlflow_or_ray_only_the_run_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    bridge = MetricsBridge(tmp_path / "run", tmp_path / "run" / "exports", ray_gauges=False)
    assert bridge.mlflow is None and not bridge.logger.gauges
    record = bridge.log({"eval/all/avg_score": 0.5}, step=0)  # no dump for step 0: no interval
    assert record == {"step": 0, "eval/solve_rate": 0.5}
    bridge.close()
    # every step prints the line HyperPod's hang rule waits for (rlkit.cluster.hang)
    (line,) = capsys.readouterr().out.splitlines()
    assert line == "rlkit: step 0 eval/solve_rate=0.5" and re.search(STEP_PATTERN, line)


def put_dump(export_path: Path, step: int) -> Path:
    """The real U+0085 dump as SkyRL's eval dump for `step`; returns its jsonl file."""
    step_dir = export_path / "dumped_evals" / f"global_step_{step}_evals"
    shutil.copytree(U0085_DUMP, step_dir, copy_function=shutil.copyfile)
    return step_dir / "rlkit-maze_test.jsonl"


def test_a_broken_eval_dump_costs_only_its_interval(tmp_path, caplog):
    run, export = tmp_path / "run", tmp_path / "run" / "exports"
    with open(put_dump(export, 3), "ab") as f:
        f.write(b'{"input_prompt": "a write cut sh')  # step 3: a torn last line
    garbage = export / "dumped_evals" / "global_step_6_evals" / "x.jsonl"
    garbage.parent.mkdir()
    garbage.write_bytes(b"\x00\xffnot json\n")  # step 6: no record at all
    (export / "dumped_evals" / "global_step_9_evals" / "x.jsonl").mkdir(parents=True)  # unreadable
    bridge = MetricsBridge(run, export, mlflow=False, ray_gauges=False)
    with caplog.at_level(logging.WARNING, logger="rlkit.cluster.skyrl.bridge"):
        for step in (3, 6, 9, 10):  # step 3 reads its own dump only, not step 6's garbage
            bridge.log({"eval/all/avg_score": 0.0}, step=step)
    bridge.close()
    r3, r6, r9, r10 = load_metrics(run)
    assert r3["eval/bad_records"] == 1.0 and r3["eval/mazes"] == 4.0
    assert r3["eval/ci_low"] == 0.0 and r3["eval/pass_at_2"] == 0.0  # the dump's own result
    assert f"{export}/dumped_evals/global_step_3_evals/rlkit-maze_test.jsonl:9" in caplog.text
    for r in (r6, r9, r10):  # no interval, but the step is logged and the run goes on
        assert r == {"step": r["step"], "eval/solve_rate": 0.0}
    assert "no interval for the eval at step 6" in caplog.text
    assert (
        "no interval for the eval at step 9" in caplog.text and "IsADirectoryError" in caplog.text
    )


def skyrl_config(runs_root: Path, name: str) -> SkyRLTrainConfig:
    """SkyRL's own config for a preset run: the run dir is its ckpt_path, and it resumes."""
    preset = get_preset("qwen3vl-8b-6gpu", runs_root=str(runs_root))
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, name))
    assert cfg.trainer.resume_mode == "latest" and cfg.trainer.eval_before_train
    return cfg


def test_a_resumed_run_keeps_only_the_steps_its_checkpoint_holds(tmp_path):
    """SkyRL resumes from its marker's step N, logs its eval-before-training at step N again and
    then steps N+1, ...: the records after N go, those of 0..N stay."""
    cfg = skyrl_config(tmp_path, "resumed")
    run = RunDir(cfg.trainer.ckpt_path)
    run.append_metrics({"step": 0, "eval/solve_rate": 0.1})  # eval before training
    for s in range(1, 8):  # a killed run: checkpoint 5 complete, steps 6 and 7 logged past it
        run.append_metrics({"step": s, "rollout/solve_rate": s / 10})
    run.append_metrics({"step": 5, "eval/solve_rate": 0.4})  # step 5 was evaluated too
    (run.path / "global_step_5").mkdir()
    run.marker_path.write_text("5")
    tracker = bridged_tracker(cfg)
    assert [r["step"] for r in run.read_metrics()] == [0, 1, 2, 3, 4, 5]
    tracker.log({"eval/all/avg_score": 0.5}, step=5, commit=True)  # SkyRL's eval at the resume
    tracker.log({"environment/solve_rate": 0.75}, step=6, commit=True)
    tracker.finish()
    assert [r["step"] for r in load_metrics(run.path)] == [0, 1, 2, 3, 4, 5, 5, 6]
    evals = [
        (r["step"], r["eval/solve_rate"]) for r in run.read_metrics() if "eval/solve_rate" in r
    ]
    assert evals == [(0, 0.1), (5, 0.5)]  # step 5 evaluated once: the resumed run's eval
    reward = training_curves(run.path).axes[0]
    (line,) = [ln for ln in reward.lines if ln.get_label() == "rollout/solve_rate"]
    assert list(line.get_xdata()) == [1, 2, 3, 4, 5, 6]  # each step once


def test_a_restart_before_any_checkpoint_starts_the_metrics_over(tmp_path):
    cfg = skyrl_config(tmp_path, "restarted")
    run = RunDir(cfg.trainer.ckpt_path)
    for s in range(3):
        run.append_metrics({"step": s, "rollout/solve_rate": 0.5})
    bridged_tracker(cfg).finish()  # SkyRL starts again from step 0
    assert run.read_metrics() == []
