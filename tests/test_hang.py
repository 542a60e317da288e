"""HyperPod hang detection: the rules rlkit registers, its no-op paths, the real toolkit
talking to an agent (a local HTTP server standing in for HyperPod's) from inside a Ray job, and
`rlkit jobs watch`'s clock, which catches a zombie (RUNNING and logging, but no step line)."""

import json
import re
import shlex
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from rlkit.cluster.hang import (
    DONE_LINE,
    FATAL_PATTERN,
    STEP_PATTERN,
    STEP_PREFIX,
    HangRules,
    start_hang_detection,
    step_line,
)
from rlkit.cluster.skyrl.overrides import entrypoint_command
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.cluster.watch import StallClock
from rlkit.errors import UsageError


def test_the_progress_rule_matches_step_lines_only():
    line = step_line(12, {"rollout/solve_rate": 0.41, "eval/solve_rate": 0.5, "other": 1.0})
    assert line == "rlkit: step 12 rollout/solve_rate=0.41 eval/solve_rate=0.5"
    progress, fatal = HangRules().rules()
    assert re.search(progress["log_pattern"], line)
    for other in ("rlkit: reusing datasets in /fsx/x", "Step 3 of SkyRL", DONE_LINE):
        assert not re.search(STEP_PATTERN, other), other
    assert re.search(progress["stop_pattern"], DONE_LINE)
    assert (progress["timeout_minutes"], progress["start_timeout_minutes"]) == (30, 60)
    for crash in (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)",
    ):
        assert re.search(fatal["log_pattern"], crash) and fatal["fault_on_match"]
    for rule in (progress, fatal):  # the toolkit's limit on a pattern
        assert len(rule["log_pattern"]) <= 256 and rule["type"] == "log_pattern"
    assert len(FATAL_PATTERN) <= 256


def test_the_toolkit_config_carries_the_rules_and_action():
    wire = HangRules(45, 90, "cancel").config().to_wire_format()
    assert wire["enabled"] is True and wire["action_policy"] == {"action": "cancel"}
    assert [r["name"] for r in wire["rules"]] == ["rlkit_step_progress", "rlkit_fatal_error"]
    assert wire["rules"][0]["timeout_minutes"] == 45
    off = HangRules(0).config().to_wire_format()
    assert off["enabled"] is False and off["rules"] == []


def test_off_hyperpod_and_when_off_nothing_is_sent():
    assert start_hang_detection(HangRules(), env={}) == (
        "hang detection: off (not on HyperPod: HYPERPOD_JMA_HOST is not set)"
    )
    assert start_hang_detection(HangRules(0), env={"HYPERPOD_JMA_HOST": "10.0.0.1"}) == (
        "hang detection: off (stall minutes 0)"
    )


@pytest.mark.parametrize(
    "field, preset_field, value",
    [
        ("action", "hang_action", "kill"),
        ("minutes", "hang_minutes", -1),
        ("start_minutes", "hang_start_minutes", 0),
    ],
)
def test_bad_settings_are_one_line_errors(field, preset_field, value):
    with pytest.raises(UsageError) as e:
        HangRules(**{field: value})
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError):  # a preset refuses it before anything is submitted
        get_preset("qwen3vl-2b-smoke", **{preset_field: value})


def test_the_presets_job_command_passes_the_rules_to_the_entrypoint():
    from rlkit.cluster.skyrl.entry import parse_args

    cmd = entrypoint_command(get_preset("qwen3vl-8b-6gpu", hang_minutes=20), "maze-a")
    argv = shlex.split(cmd)[3:]
    args, _ = parse_args(argv)
    sky = args.sky
    assert (sky.hang.minutes, sky.hang.start_minutes, sky.hang.action) == (20, 60, "notify")


def test_the_manifest_gives_every_pod_the_agents_host():
    root = Path(__file__).resolve().parent.parent
    spec = yaml.safe_load((root / "deploy" / "raycluster.yaml").read_text())["spec"]
    pods = [spec["headGroupSpec"]] + spec["workerGroupSpecs"]
    for pod in pods:
        for container in pod["template"]["spec"]["containers"]:
            env = {e["name"]: e for e in container["env"]}
            assert env["HYPERPOD_JMA_HOST"]["valueFrom"] == {
                "fieldRef": {"fieldPath": "status.hostIP"}
            }, container["name"]


class _Agent(BaseHTTPRequestHandler):
    """HyperPod's monitoring agent as the toolkit speaks to it: accepts, then rejects."""

    received: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((self.path, body))
        ok = len(self.received) == 1
        reply = b"{}" if ok else json.dumps({"error": "rule rejected: bad pattern"}).encode()
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        return


def test_inside_a_ray_job_the_toolkit_registers_the_rules(ray_cluster):
    """The toolkit's real client, in a Ray job on the local head, posts rlkit's rules with the
    job's Ray ids to the agent at HYPERPOD_JMA_HOST (its port is fixed: 8889), and a rejection
    comes back as one line."""
    host = "127.0.0.2"  # a loopback address of its own: nothing else here listens on :8889
    server = ThreadingHTTPServer((host, 8889), _Agent)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    code = (
        "import ray; ray.init()\n"
        "from rlkit.cluster.hang import HangRules, start_hang_detection\n"
        "print('JOB', ray.get_runtime_context().get_job_id())\n"
        "print('FIRST', start_hang_detection(HangRules(25)))\n"
        "print('SECOND', start_hang_detection(HangRules(25)))\n"
    )
    try:
        job = ray_cluster.submit(
            "hang-rules", f'python -c "{code}"', runtime_env_vars={"HYPERPOD_JMA_HOST": host}
        )
        status = job.wait(180)
    finally:
        server.shutdown()
    logs = job.logs()
    assert status.value == "SUCCEEDED", logs[-2000:]
    tagged = (line.split(" ", 1) for line in logs.splitlines())
    lines = {t[0]: t[1] for t in tagged if len(t) == 2 and t[0] in ("JOB", "FIRST", "SECOND")}
    assert lines["FIRST"] == (
        "hang detection: on (notify after 25 min without 'rlkit: step N', 60 min to the first step)"
    )
    assert lines["SECOND"] == "hang detection: error: rule rejected: bad pattern"
    (path, body), _ = _Agent.received
    assert path == "/configure-hang-detection-rules"
    assert body["job_id"] == lines["JOB"] and body["worker_id"]
    assert body["rules_content"] == HangRules(25).config().to_wire_format()


class FakeLog:
    """A job handle reduced to its log, which the test appends to."""

    def __init__(self) -> None:
        self.text = ""

    def logs(self) -> str:
        return self.text


def test_the_watcher_catches_a_zombie_that_logs_but_makes_no_step():
    now = [0.0]
    job, clock = FakeLog(), StallClock(60.0, clock=lambda: now[0])
    for t in range(0, 600, 30):  # start-up: any new output is progress, however long
        now[0], job.text = float(t), job.text + "INFO vllm loading...\n"
        assert not clock.stalled(job)
    job.text += f"{STEP_PREFIX} 1 rollout/solve_rate=0.4\n"
    now[0] += 10
    assert not clock.stalled(job)
    for _ in range(2):  # RUNNING, still logging warnings, but no new step line
        now[0] += 30
        job.text += "WARNING nccl retry\n"
        assert not clock.stalled(job)  # 60 s window not yet past
    now[0] += 1
    job.text += "WARNING nccl retry\n"
    assert clock.stalled(job) and clock.what() == "printed no step line"
    job.text += f"{STEP_PREFIX} 2\n"  # a step line resets the window
    assert not clock.stalled(job)
    silent = StallClock(5.0, clock=lambda: now[0])
    assert not silent.stalled(FakeLog())
    now[0] += 6
    assert silent.stalled(FakeLog()) and silent.what() == "wrote no output"
