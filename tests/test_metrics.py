"""Metrics: JSONL + TensorBoard records, prefix rules, timers, null logger, Ray gauges."""

import builtins
import sys
import time

import pytest

from rlkit.errors import UsageError
from rlkit.run import metrics
from rlkit.run.metrics import NullLogger, timer
from rlkit.run.rundir import RunDir
from rlkit.train.trainer import MetricsLogger


@pytest.fixture
def no_ray_env(monkeypatch):
    for var in ("RAY_ADDRESS", "RAY_JOB_ID"):
        monkeypatch.delenv(var, raising=False)


def scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_timer_accumulates_phase_seconds():
    into: dict[str, float] = {}
    with timer("rollout", into):
        time.sleep(0.01)
    with timer("rollout", into):
        time.sleep(0.01)
    with pytest.raises(RuntimeError), timer("update", into):
        raise RuntimeError("a failed phase is still timed")
    assert set(into) == {"timing/rollout", "timing/update"}
    assert 0.02 <= into["timing/rollout"] < 1.0


def test_log_writes_jsonl_and_tensorboard(tmp_path, no_ray_env):
    run = RunDir(tmp_path)
    with MetricsLogger(run) as logger:
        assert logger.gauges == {}
        for step in (1, 2):
            with logger.timer("rollout"):
                pass
            record = logger.log(
                step,
                {"rollout/reward_mean": step / 4, "loss/kl": float("nan"), "train/phase": "grpo"},
            )
            assert set(record) == {
                "step",
                "timing/rollout",
                "rollout/reward_mean",
                "loss/kl",
                "train/phase",
            }
        logger.log_checkpoint(2)
    lines = run.read_metrics()
    assert [(r["step"], r["rollout/reward_mean"], r["train/phase"]) for r in lines] == [
        (1, 0.25, "grpo"),
        (2, 0.5, "grpo"),
    ]
    assert lines[0]["loss/kl"] is None
    got = scalars(tmp_path / "tensorboard")
    assert got["rollout/reward_mean"] == [(1, 0.25), (2, 0.5)]
    assert got["train/checkpoint_step"] == [(2, 2.0)]
    assert "loss/kl" not in got and "train/phase" not in got  # NaN and text stay out of TB


def test_resume_purges_tensorboard_after_the_checkpoint(tmp_path, no_ray_env):
    run = RunDir(tmp_path)
    with MetricsLogger(run) as logger:
        for step in (1, 2, 3):
            logger.log(step, {"rollout/reward_mean": float(step)})
    # TensorBoard orders event files by name: seconds, host, pid, then a per-process counter
    # (as text, so 10 < 9). A real resume is a later second; so is this one.
    second = int(time.time())
    while int(time.time()) == second:
        time.sleep(0.05)
    with MetricsLogger(run, resume_step=1) as logger:
        for step in (2, 3):
            logger.log(step, {"rollout/reward_mean": 10.0 * step})
    assert scalars(tmp_path / "tensorboard")["rollout/reward_mean"] == [
        (1, 1.0),
        (2, 20.0),
        (3, 30.0),
    ]


def test_without_tensorboard_only_jsonl(tmp_path, monkeypatch, no_ray_env):
    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "torch.utils.tensorboard", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    run = RunDir(tmp_path)
    logger = MetricsLogger(run)
    logger.log(1, {"eval/solve_rate": 0.5})
    logger.close()
    assert run.read_metrics() == [{"step": 1, "eval/solve_rate": 0.5}]
    assert not (tmp_path / "tensorboard").exists()


def test_metric_names_need_a_prefix(tmp_path, no_ray_env):
    logger = MetricsLogger(RunDir(tmp_path), tensorboard=False)
    with pytest.raises(UsageError, match=r"'reward' needs a group prefix"):
        logger.log(1, {"reward": 1.0})
    with pytest.raises(UsageError, match="'loss/'"):
        logger.log(1, {"loss/": 1.0})
    assert not (tmp_path / "metrics.jsonl").exists()


def test_null_logger_writes_nothing(tmp_path):
    logger = NullLogger()
    with logger.timer("rollout"):
        pass
    assert logger.log(3, {"rollout/reward_mean": 1.0}) == {"step": 3, "rollout/reward_mean": 1.0}
    logger.log_checkpoint(3)
    logger.close()
    with pytest.raises(UsageError):
        logger.log(3, {"reward": 1.0})
    assert list(tmp_path.iterdir()) == []


def test_ray_is_not_touched_outside_ray(no_ray_env, monkeypatch):
    assert metrics.ray_connected() is False
    # A Jobs API address in a notebook is not a cluster this process runs in.
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")
    assert metrics.ray_connected() is False


@pytest.mark.slow  # starts Ray in this process
def test_ray_gauges_under_a_real_local_ray(tmp_path, no_ray_env, monkeypatch):
    ray = pytest.importorskip("ray")
    # Ray's 30 s default for the raylet to register is too short on a busy 2-core CI box.
    monkeypatch.setenv("RAY_raylet_start_wait_time_s", "120")
    # "local": start a private instance even if another Ray runs on this machine.
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        assert metrics.ray_connected()
        run = RunDir(tmp_path / "run-a")
        with MetricsLogger(run, tensorboard=False) as logger:
            assert set(logger.gauges) == set(metrics.GAUGES)
            info = logger.gauges["rlkit_solve_rate"].info
            assert info["name"] == "rlkit_solve_rate"
            assert info["tag_keys"] == ("run", "split")
            assert info["default_tags"] == {"run": "run-a"}
            logger.log(1, {"rollout/reward_mean": 0.5, "rollout/solve_rate": 0.5})
            logger.log(2, {"eval/solve_rate": 0.75})
            logger.log_checkpoint(2)
        assert [r["step"] for r in run.read_metrics()] == [1, 2]
    finally:
        ray.shutdown()


class SetRecorder:
    """Stands where a Ray Gauge would: records `set` calls (the real gauges are tested under a
    real Ray above; this checks which logged name feeds which gauge, without a Ray head)."""

    def __init__(self):
        self.values = []

    def set(self, value, tags=None):
        self.values.append((value, tags))


def test_stability_gauges_are_fed_by_either_backends_names(tmp_path, monkeypatch):
    from rlkit.cluster.skyrl.bridge import rlkit_names

    monkeypatch.setattr(
        metrics.RunLogger,
        "_make_gauges",
        staticmethod(lambda run_name: {g: SetRecorder() for g in metrics.GAUGES}),
    )
    local = {"loss/entropy": 1.1, "loss/clip_fraction": 0.2, "loss/grad_norm": 0.5}
    skyrl = rlkit_names(
        {
            "policy/policy_entropy": 0.9,
            "policy/loss_metrics/clip_ratio": 0.1,
            "policy/grad_norm": 0.7,
            "policy/rollout_train_logprobs_abs_diff_mean": 0.03,
        }
    )
    logger = metrics.RunLogger(RunDir(tmp_path / "run"), ray_gauges=True)
    logger.log(0, local)
    logger.log(1, skyrl)
    got = {name: [v for v, _ in g.values] for name, g in logger.gauges.items()}
    assert got["rlkit_policy_entropy"] == [1.1, 0.9]
    assert got["rlkit_clip_fraction"] == [0.2, 0.1]
    assert got["rlkit_grad_norm"] == [0.5, 0.7]
    assert got["rlkit_logprob_gap"] == [0.03]  # SkyRL only: the local gap is 0 by construction
    assert got["rlkit_train_step"] == [0, 1]
