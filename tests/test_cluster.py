"""rlkit.cluster.client against a real local Ray head and the real Jobs API.

One head for the whole module (starting one costs ~10-40 s), on a free port so that other Ray
instances on the machine are neither reused nor disturbed; it is stopped at the end.
"""

from __future__ import annotations

import asyncio
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import ray
from ray.job_submission import JobStatus

from rlkit.cluster import launch
from rlkit.cluster.address import LOCAL, resolve_address
from rlkit.cluster.client import connect, mask_env
from rlkit.cluster.jobs import next_submission_id, records_for_run
from rlkit.cluster.localhead import (
    LOGICAL_GPUS,
    _start_lock,
    free_port,
    ray_temp_dir,
    start_local_head,
)
from rlkit.cluster.workdir import PACKAGING_LOGGERS, working_dir_runtime_env
from rlkit.errors import RlkitError, UsageError


@pytest.fixture(scope="module")
def cluster(ray_cluster):
    """The session's one real local head (tests/conftest.py): one start for the whole suite."""
    return ray_cluster


def test_summary_of_local_head(cluster):
    s = cluster.summary()
    assert s.nodes_alive == 1 and s.nodes_dead == 0
    assert s.cpus == 2 + LOGICAL_GPUS  # a CPU for each logical GPU (SkyRL bundles them)
    assert s.gpus == {"logical": LOGICAL_GPUS}
    assert s.cluster_ray == ray.__version__ == s.client_ray
    assert not s.warnings
    text = str(s)
    assert "1 alive, 0 dead" in text and cluster.address in text
    assert "<table>" in s._repr_html_()


def test_second_connect_reuses_the_head(cluster):
    again = connect(local_port=cluster.local_head.port)
    assert again.address == cluster.address
    assert again.local_head is not None and not again.local_head.started
    assert any("reusing" in n for n in again.notes)


def test_a_connect_during_a_start_waits_for_it_then_reuses_the_head(cluster):
    """Held here as a starting `ray start` holds it, the port's start lock makes other callers
    wait, and the waiter then reuses the head instead of starting a second one on the port."""
    port = cluster.local_head.port
    pool = ThreadPoolExecutor(1)
    with _start_lock(port, timeout_s=5.0):
        with pytest.raises(RlkitError, match="another process has been starting") as e:
            start_local_head(port, timeout_s=0.5)
        assert "\n" not in str(e.value)
        waiting = pool.submit(connect, local_port=port)
        time.sleep(1.0)
        assert not waiting.done()
    again = waiting.result(timeout=60)
    pool.shutdown()
    assert again.address == cluster.address and not again.local_head.started


def test_a_job_runs_against_its_own_head(cluster):
    """The head keeps its own Ray temp dir, whose ray_current_cluster Ray's job supervisor
    hands each driver as RAY_ADDRESS: a head started later on the machine cannot take it."""
    current = (ray_temp_dir(cluster.local_head.port) / "ray_current_cluster").read_text().strip()
    code = "import os; print('RAY_ADDRESS', os.environ['RAY_ADDRESS'])"
    job = cluster.submit("own head", f'python -c "{code}"', metadata={"preset": "none"})
    assert job.wait(120).value == "SUCCEEDED", job.logs()
    assert f"RAY_ADDRESS {current}" in job.logs()


def test_job_round_trip_with_live_tail(cluster):
    code = (
        "import os, rlkit; print('hello from rlkit', rlkit.__version__); "
        "print('secret length', len(os.environ['RLKIT_TEST_TOKEN']))"
    )
    job = cluster.submit(
        "round trip",
        f'python -c "{code}"',
        runtime_env_vars={"RLKIT_TEST_TOKEN": "s3cret-value"},
        metadata={"preset": "none"},
    )
    assert job.submission_id == "rlkit-round-trip-1"
    assert "s3cret-value" not in cluster.last_submission
    assert "RLKIT_TEST_TOKEN=***" in cluster.last_submission

    async def collect() -> str:
        return "".join([chunk async for chunk in job.tail(idle_s=60)])

    tailed = asyncio.run(asyncio.wait_for(collect(), timeout=120))
    assert job.wait(60) == JobStatus.SUCCEEDED
    assert "hello from rlkit" in tailed and "secret length 12" in tailed
    assert "hello from rlkit" in job.logs()
    record = next(r for r in cluster.jobs() if r.submission_id == job.submission_id)
    assert record.run_name == "round trip" and record.status == "SUCCEEDED"


def test_tail_reconnects_without_repeating_output(cluster):
    # The stream goes quiet for longer than idle_s, so tail drops it and reconnects; Ray
    # replays the log from the start, and nothing may be yielded twice.
    code = "import time; print('first', flush=True); time.sleep(4); print('second', flush=True)"
    job = cluster.submit("tail-reconnect", f'python -c "{code}"')

    connections = []
    real_tail = cluster.client.tail_job_logs

    def counting_tail(submission_id: str):
        connections.append(submission_id)
        return real_tail(submission_id)

    cluster.client.tail_job_logs = counting_tail
    try:

        async def collect() -> str:
            return "".join([chunk async for chunk in job.tail(idle_s=1.0, retry_s=0.2)])

        tailed = asyncio.run(asyncio.wait_for(collect(), timeout=120))
    finally:
        del cluster.client.tail_job_logs
    lines = tailed.splitlines()
    assert len(connections) >= 2, "the quiet stream was never dropped and reconnected"
    assert lines.count("first") == 1 and lines.count("second") == 1
    assert lines.index("first") < lines.index("second")


def test_stop_running_job_then_reattach_and_resubmit(cluster):
    sleeper = "python -c \"import time; print('sleeping', flush=True); time.sleep(600)\""
    job = cluster.submit("sleeper", sleeper)
    deadline = time.monotonic() + 90
    while job.status() != JobStatus.RUNNING:
        assert time.monotonic() < deadline, "the sleeper never started"
        time.sleep(0.5)
    same = cluster.reattach("sleeper")
    assert same.submission_id == job.submission_id == "rlkit-sleeper-1"
    assert job.stop()
    assert job.wait(60) == JobStatus.STOPPED

    again = cluster.submit("sleeper", "python -c \"print('resumed')\"")
    assert again.submission_id == "rlkit-sleeper-2"
    assert cluster.reattach("sleeper").submission_id == "rlkit-sleeper-2"
    assert again.wait(90) == JobStatus.SUCCEEDED
    with pytest.raises(RlkitError, match="no job for run 'never-ran'"):
        cluster.reattach("never-ran")


def test_explicit_address_wins_over_ray_address_and_says_so(cluster, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:1")
    c = connect(cluster.address)
    assert c.summary().nodes_alive == 1
    assert any("ignoring RAY_ADDRESS=http://127.0.0.1:1" in n for n in c.notes)


def test_unreachable_address_fails_fast_and_clearly(port):
    address = f"http://127.0.0.1:{port}"
    t = time.monotonic()
    with pytest.raises(RlkitError) as e:
        connect(address)
    assert time.monotonic() - t < 10
    msg = str(e.value)
    assert address in msg and "dashboard port" in msg and "\n" not in msg


def test_silent_address_hits_the_deadline():
    # A listener that accepts but never answers: only the deadline can end the wait.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"http://127.0.0.1:{server.getsockname()[1]}"
        t = time.monotonic()
        with pytest.raises(RlkitError, match="did not answer within 2 s"):
            connect(address, timeout_s=2)
        assert time.monotonic() - t < 5


# -- what "local" means: one decision, `resolve_address` ---------------------------------------


@pytest.fixture
def no_address_env(monkeypatch):
    for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_no_address_and_local_mean_the_local_head(no_address_env):
    for given in (None, "", " ", LOCAL, "auto", "LOCAL"):
        target = resolve_address(given)
        assert target.local and target.url is None and target.notes == (), given
    remote = resolve_address("http://127.0.0.1:8265/")  # a port-forward listens there too
    assert not remote.local and remote.url == "http://127.0.0.1:8265"


def test_the_environment_decides_only_when_no_address_is_given(no_address_env):
    no_address_env.setenv("RAY_ADDRESS", "http://head:8265")
    unset = resolve_address(None)
    assert unset.url == "http://head:8265" and not unset.local
    assert unset.notes == (
        "using RAY_ADDRESS=http://head:8265 from the environment (unset it for a local head)",
    )
    local = resolve_address(LOCAL)
    assert local.local
    assert local.notes == (
        "ignoring RAY_ADDRESS=http://head:8265 from the environment: local was given",
    )
    same = resolve_address("http://head:8265/")  # the environment's own address: no note
    assert same.url == "http://head:8265" and same.notes == ()
    no_address_env.setenv("RAY_API_SERVER_ADDRESS", "http://api:8265")  # Ray reads it first
    assert resolve_address(None).url == "http://api:8265"
    no_address_env.setenv("RAY_API_SERVER_ADDRESS", "auto")  # Ray's word for the local head
    auto = resolve_address(None)
    assert auto.local and auto.notes == ("using RAY_API_SERVER_ADDRESS=auto: the local Ray head",)


def test_reusing_a_local_head_that_is_not_there_is_one_line(no_address_env):
    port = free_port()
    with pytest.raises(RlkitError, match=f"no local Ray head answers on 127.0.0.1:{port}") as e:
        connect(LOCAL, local_port=port, start_local=False)
    assert "\n" not in str(e.value)


def test_a_plan_is_a_dry_run_only_for_gpu_presets_on_the_local_head(tmp_path, no_address_env):
    gpu = "qwen3vl-8b-6gpu"
    for address in (None, LOCAL):
        plan = launch.plan_training(gpu, tmp_path, address=address)
        assert plan.dry_run and "no cluster: dry run" in str(plan)
    assert not launch.plan_training(gpu, tmp_path, address="http://head:8265").dry_run
    cpu = launch.plan_training("skyrl-tiny-cpu", tmp_path)  # SkyRL on the local head's CPUs
    assert not cpu.dry_run and "the local Ray head" in str(cpu)
    assert not launch.plan_training("smoke", tmp_path).dry_run
    no_address_env.setenv("RAY_ADDRESS", "http://head:8265")  # connect(None) would go there
    assert not launch.plan_training(gpu, tmp_path).dry_run


def test_cli_submit_of_a_gpu_preset_to_the_local_head_is_refused_before_connecting(
    no_address_env,
):
    for argv in ([], ["--address", LOCAL]):
        with pytest.raises(UsageError, match="needs 6 GPUs and the local Ray head has none"):
            run_cli("submit", "--preset", "qwen3vl-8b-6gpu", *argv)


@pytest.mark.parametrize(
    ("address", "error", "words"),
    [
        ("ray://head:10001", UsageError, "drops the job after 30 s"),
        ("head:6379", UsageError, "Jobs API URL"),
        ("ftp://head:8265", UsageError, "unknown scheme"),
    ],
)
def test_refused_addresses(address, error, words):
    with pytest.raises(error, match=words):
        connect(address)


def test_sagemaker_address_goes_through_the_toolkit(tmp_path, monkeypatch):
    """The real toolkit (the sagemaker extra) handles sagemaker_ray://; off HyperPod its
    missing kubeconfig comes back as one line naming the command that fixes it."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    with pytest.raises(RlkitError) as e:
        connect("sagemaker_ray://my-cluster/my-namespace")
    message = str(e.value)
    assert "\n" not in message and "aws eks update-kubeconfig" in message


def test_sagemaker_address_without_toolkit_says_what_to_install(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(  # as in an environment without the sagemaker extra
        importlib.util,
        "find_spec",
        lambda n, *a: None if n == "sagemaker_ray" else find_spec(n, *a),
    )
    with pytest.raises(RlkitError, match=r"pip install 'rlkit\[sagemaker\]'"):
        connect("sagemaker_ray://my-cluster/my-namespace")


def test_submitting_keeps_rays_packaging_chatter_out_of_the_output(cluster):
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler(level=logging.DEBUG)
    handler.emit = records.append
    loggers = [logging.getLogger(name) for name in PACKAGING_LOGGERS]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        job = cluster.submit("quiet-upload", "python -c \"print('ok')\"")
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
    assert job.wait(90) == JobStatus.SUCCEEDED
    assert [r.getMessage() for r in records if r.levelno < logging.ERROR] == []
    assert [lg.level for lg in loggers] == before  # restored after the upload


def test_submission_ids_count_up_per_run():
    existing = ["rlkit-a-1", "rlkit-a-3", "rlkit-ab-7", "raysubmit_x", "rlkit-b-2"]
    assert next_submission_id("a", existing) == "rlkit-a-4"
    assert next_submission_id("ab", existing) == "rlkit-ab-8"
    assert next_submission_id("new run/x", existing) == "rlkit-new-run-x-1"
    with pytest.raises(UsageError):
        next_submission_id("///", existing)


def test_records_for_run_ordered_by_index():
    from rlkit.cluster.jobs import JobRecord

    def rec(sid: str) -> JobRecord:
        return JobRecord(sid, "SUCCEEDED", None, "true", 0, 0, None)

    got = records_for_run("a", [rec("rlkit-a-10"), rec("rlkit-a-2"), rec("rlkit-ab-1")])
    assert [r.submission_id for r in got] == ["rlkit-a-2", "rlkit-a-10"]


def test_working_dir_size_is_checked_before_submitting(tmp_path: Path):
    (tmp_path / "small.py").write_text("print(1)\n")
    (tmp_path / "big.bin").write_bytes(b"\0" * (2 * 2**20))
    with pytest.raises(RlkitError, match=r"big\.bin \(2\.0 MiB\).*\.gitignore"):
        working_dir_runtime_env(tmp_path, limit=2**20)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "huge.bin").write_bytes(b"\0" * (2 * 2**20))
    (tmp_path / "big.bin").unlink()
    env = working_dir_runtime_env(tmp_path, limit=2**20)
    assert env["working_dir"] == str(tmp_path.resolve()) and ".venv" in env["excludes"]


def test_env_values_are_masked():
    assert mask_env({"HF_TOKEN": "hf_abc", "X": "1"}) == {"HF_TOKEN": "***", "X": "***"}


# -- the `rlkit jobs` / `rlkit submit` subcommands --------------------------------------------


def run_cli(*argv: str) -> int:
    import argparse

    from rlkit.cli import cluster as cli_cluster

    parser = argparse.ArgumentParser(prog="rlkit")
    cli_cluster.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_cli_jobs_list_status_logs(cluster, capsys):
    job = cluster.submit("cli-run", "python -c \"print('from the cli job')\"")
    assert job.wait(90) == JobStatus.SUCCEEDED
    capsys.readouterr()
    assert run_cli("jobs", "list", "--address", cluster.address, "--run", "cli-run") == 0
    assert "rlkit-cli-run-1" in capsys.readouterr().out
    assert run_cli("jobs", "status", "cli-run", "--address", cluster.address) == 0
    assert capsys.readouterr().out.strip() == "rlkit-cli-run-1 SUCCEEDED"
    assert run_cli("jobs", "logs", "rlkit-cli-run-1", "--address", cluster.address) == 0
    assert "from the cli job" in capsys.readouterr().out
    assert run_cli("jobs", "stop", "rlkit-cli-run-1", "--address", cluster.address) == 0
    assert "had already ended" in capsys.readouterr().out
    with pytest.raises(RlkitError, match="no job rlkit-nope-1"):
        run_cli("jobs", "status", "rlkit-nope-1", "--address", cluster.address)


def test_cli_submit_refuses_a_cluster_without_the_gpus(cluster):
    with pytest.raises(RlkitError, match=f"has {LOGICAL_GPUS} GPUs, the preset needs 6"):
        run_cli("submit", "--preset", "qwen3vl-8b-6gpu", "--address", cluster.address)


def test_cli_submit_dry_run_prints_the_whole_command(capsys, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-123")
    argv = ["submit", "--preset", "qwen3vl-8b-6gpu", "--address", "http://127.0.0.1:8265"]
    assert run_cli(*argv, "--dry-run", "--run-name", "a", "--env", "WANDB_API_KEY") == 0
    out = capsys.readouterr().out
    assert "python -m rlkit.cluster.skyrl.entry --preset qwen3vl-8b-6gpu --config '{" in out
    assert "/fsx/rlkit/runs/a/data/train.parquet" in out  # the run's rows, where the entry writes
    assert "generator.inference_engine.num_engines=6" in out
    assert "WANDB_API_KEY=***" in out and "wandb-secret-123" not in out
    with pytest.raises(UsageError, match="NOT_SET_ANYWHERE: not set"):
        run_cli(*argv, "--dry-run", "--env", "NOT_SET_ANYWHERE")
