"""The suite's one whole SkyRL run on CPU: the cluster's code path, launched as a researcher does.

`rlkit submit --preset skyrl-tiny-cpu` on the session's local head (logical GPUs, rlkit's
device seam); the job's entry builds the warm-started tiny Qwen3-VL into RUN/init_model, then
SkyRL trains 3 GRPO steps on 2 FSDP ranks, an eval before
training, at the resume and at the end, a checkpoint and HF export at step 2 and at the end.
After the checkpoint of step 2 the job is SIGKILLed and the export of step 2 removed (what a
kill between SkyRL's `save_checkpoints` and `save_models` leaves); `rlkit jobs watch
--resubmit 1` then brings the run back, it resumes at step 2 and finishes. While both jobs train, the head's
Prometheus endpoint is scraped for the bridge's gauges.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.cli.main import main
from rlkit.cluster.client import Cluster
from rlkit.run.rundir import RunDir
from rlkit.run.skyrl_layout import latest_step

RUN = "cpu"
STEPS, CKPT_EVERY, KILL_AFTER = 3, 2, 2
"""Step 1's gauges reach the head's endpoint while step 2 trains, before the kill."""
SETTINGS = {
    "steps": STEPS,
    "ckpt_interval": CKPT_EVERY,
    "eval_interval": STEPS,
    "eval_mazes": 8,
    "eval_samples": 2,
    "warm_start_to": 0.15,  # enough partial skill for GRPO's groups to differ, in less time
    # 8 groups a step, all captured: test_skyrl_captures.py reads them, and the learning check
    # (test_skyrl_cpu_run.py) re-scores those whose episodes differ (at a 15% warm start, 4
    # groups of 4 over 3 steps left one such group in a measured run)
    "prompts_per_node": 8,
    "capture_groups": 8,
    # the preset's cosine spends its rate over 3 steps (2.25e-4, then 0.75e-4); the learning
    # check needs the full rate's shift to stand clear of the observations' (measured with the
    # cosine: answers +0.026 nats/token against observations -0.056)
    "lr_schedule": "constant_with_warmup",
}
GAUGES = {
    "ray_rlkit_train_step": None,
    "ray_rlkit_reward_mean": ("rollout/reward_mean",),
    "ray_rlkit_solve_rate": ("rollout/solve_rate", "eval/solve_rate"),
    "ray_rlkit_policy_entropy": ("loss/entropy",),
    "ray_rlkit_logprob_gap": ("loss/rollout_train_logprobs_abs_diff_mean",),
}
"""The bridge's gauges scraped from the head while the run trains, and the metrics.jsonl keys
one of whose values each must show (the step gauge shows a step)."""
LIMIT_S = 1500.0
TIMEOUT = 2400
"""pytest-timeout for a test that may be the first to ask for the run (it pays for it)."""


@dataclass
class CpuRun:
    run_dir: Path
    jobs: list[str]
    gauges: dict[str, str] = field(default_factory=dict)
    """Bridge gauges scraped from the head while the run trained (name -> last value)."""
    watch_output: str = ""

    @property
    def export_dir(self) -> Path:
        return self.run_dir / "exports"

    @property
    def model_dir(self) -> Path:
        return self.run_dir / "init_model"


def run_cli(*argv: str) -> int:
    """`rlkit ARGV...` in this process: its exit code (errors raise, as the CLI's own tests
    expect)."""
    return main(list(argv))


def scrape(cluster: Cluster, run: str, into: dict[str, str]) -> None:
    port = cluster.local_head.metrics_port
    try:
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    except OSError:
        return  # a busy head may miss one scrape; the gauges test says if none ever came
    for line in page.decode().splitlines():
        name, _, rest = line.partition("{")
        if name in GAUGES and f'run="{run}"' in rest:
            into[name] = line.rsplit(" ", 1)[-1]


def kill_job(cluster: Cluster, submission_id: str) -> None:
    """SIGKILL the job's driver, as a node failure would: Ray then ends the processes it owned
    (SkyRL's trainer task, FSDP workers, vLLM servers) and marks the job FAILED."""
    pid = cluster.job_details(submission_id).driver_info.pid
    os.kill(int(pid), signal.SIGKILL)
    cluster.job(submission_id).wait(300)


def checkpointed_and_logged(run_dir: Path, step: int) -> bool:
    """Checkpoint `step` is complete and the bridge logged its training record (SkyRL logs a
    step after saving it: a kill in between loses that record for good, as on a cluster)."""
    if latest_step(run_dir) != step:
        return False
    records = RunDir(run_dir).read_metrics()
    return any(r["step"] == step and "rollout/solve_rate" in r for r in records)


def watch_while_scraping(cluster: Cluster, run: CpuRun) -> int | None:
    """`rlkit jobs watch RUN --resubmit 1` in a thread, scraping the head until it returns."""
    out, result = io.StringIO(), {}

    def watch() -> None:
        argv = ("jobs", "watch", RUN, "--resubmit", "1", "--poll", "2")
        result["code"] = run_cli(*argv, "--address", cluster.address)

    with contextlib.redirect_stdout(out):
        thread = threading.Thread(target=watch, name="rlkit-jobs-watch", daemon=True)
        thread.start()
        while thread.is_alive():
            scrape(cluster, RUN, run.gauges)
            thread.join(2)
    run.watch_output = out.getvalue()
    return result.get("code")


def run_skyrl_on_cpu(cluster: Cluster, root: Path) -> CpuRun:
    argv = ["submit", "--preset", "skyrl-tiny-cpu", "--address", cluster.address]
    argv += ["--runs-root", str(root), "--run-name", RUN]
    for key, value in SETTINGS.items():
        argv += ["--set", f"{key}={value}"]
    assert run_cli(*argv) == 0
    run = CpuRun(root / RUN, [cluster.reattach(RUN).submission_id])
    first = cluster.job(run.jobs[0])
    deadline = time.monotonic() + LIMIT_S
    while not checkpointed_and_logged(run.run_dir, KILL_AFTER):
        status = first.status().value
        assert status in ("PENDING", "RUNNING"), first.logs()[-3000:]
        assert time.monotonic() < deadline, first.logs()[-3000:]
        scrape(cluster, RUN, run.gauges)
        time.sleep(2)
    kill_job(cluster, first.submission_id)
    shutil.rmtree(run.export_dir / f"global_step_{KILL_AFTER}", ignore_errors=True)
    code = watch_while_scraping(cluster, run)
    run.jobs.append(cluster.reattach(RUN).submission_id)
    assert code == 0, cluster.job(run.jobs[-1]).logs()[-3000:]
    return run
