"""The suite's own layout (suite_layout.py) and its timing table (scripts/suite_times.py)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
import suite_layout as layout

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {
    "tests/skyrl/test_run.py": "def test_a(skyrl_cpu_run):\n    ...",
    "tests/skyrl/test_copy.py": "def test_b(skyrl_run_dir):\n    ...",
    "tests/skyrl/test_eval.py": "def test_c(skyrl_eval):\n    ...",
    "tests/test_other.py": '"""see test_skyrl_cpu_run.py"""\ndef test_d(tmp_path):\n    ...',
}


def test_files_naming_a_shared_fixture_share_its_group_and_others_are_their_own():
    groups = layout.shared_groups(SOURCES)
    assert groups == {
        "tests/skyrl/test_run.py": "skyrl-cpu-run",
        "tests/skyrl/test_copy.py": "skyrl-cpu-run",
        "tests/skyrl/test_eval.py": "skyrl-eval",
    }  # a file name that merely contains the fixture's name is no use of it
    assert layout.group_of("tests/skyrl/test_copy.py::test_b[x]", groups) == "skyrl-cpu-run"
    assert layout.group_of("tests/test_other.py::test_d", groups) == "tests/test_other.py"


def test_this_suites_readers_of_the_skyrl_run_are_one_group():
    readers = {f for f, g in layout.file_groups().items() if g == layout.FIRST_GROUP}
    assert {
        "tests/skyrl/test_skyrl_cpu_run.py",
        "tests/skyrl/test_skyrl_run_reading.py",
        "tests/skyrl/test_skyrl_notebooks.py",
    } <= readers


def test_a_shared_fixture_used_outside_its_group_is_found():
    groups = layout.shared_groups(SOURCES)
    # reached through another fixture, so the file never names it
    assert layout.misplaced("tests/test_other.py::test_d", ["skyrl_eval"], groups) == "skyrl_eval"
    assert layout.misplaced("tests/skyrl/test_eval.py::test_c", ["skyrl_eval"], groups) is None


def test_tiers():
    assert layout.tier(False, ["tmp_path"]) == "fast"
    assert layout.tier(True, ["tmp_path"]) == "slow"
    assert layout.tier(False, ["tmp_path", "ray_cluster"]) == "slow"
    assert layout.TIMEOUT_S["fast"] < layout.TIMEOUT_S["slow"] < 600


def test_workers_share_the_cores():
    assert [layout.worker_threads(w, 2) for w in (0, 1, 2, 3)] == [2, 2, 1, 1]
    assert layout.worker_threads(2, 16) == 8
    assert layout.WORKER_ENV == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_the_skyrl_run_is_queued_first_then_slow_groups_in_collection_order():
    groups = layout.shared_groups(SOURCES)
    ids = [
        "tests/skyrl/test_eval.py::test_c",
        "tests/test_other.py::test_d",
        "tests/skyrl/test_run.py::test_a",
        "tests/test_z.py::test_e",
        "tests/skyrl/test_copy.py::test_b",
    ]
    order = layout.queue_order(ids, slow_groups={"tests/test_z.py"}, groups=groups)
    assert order == [
        "tests/skyrl/test_run.py::test_a",
        "tests/skyrl/test_copy.py::test_b",
        "tests/test_z.py::test_e",
        "tests/skyrl/test_eval.py::test_c",
        "tests/test_other.py::test_d",
    ]


def test_the_scheduler_splits_work_by_group():
    pytest.importorskip("xdist")
    cls = layout.scheduler_class()
    sched = cls.__new__(cls)  # its scope split needs none of a live session's state
    assert sched._split_scope("tests/skyrl/test_skyrl_notebooks.py::test_x") == "skyrl-cpu-run"
    assert sched._split_scope("tests/test_maze.py::test_y[3]") == "tests/test_maze.py"


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_slow" time="12.5"/>
<testcase classname="tests.test_a" name="test_quick" time="0.5"/>
<testcase classname="tests.skyrl.test_b" name="test_mid" time="3.0"/>
</testsuite></testsuites>"""


def test_suite_times_lists_the_slowest_and_compares_runs(tmp_path, capsys):
    after, before = tmp_path / "after.xml", tmp_path / "before.xml"
    after.write_text(JUNIT)
    before.write_text(JUNIT.replace('time="12.5"', 'time="25.0"'))
    script = runpy.run_path(str(ROOT / "scripts" / "suite_times.py"))
    assert script["main"]([str(after), "--before", str(before), "--top", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "3 tests, 16 s of test time (before: 3 tests, 28 s)"
    assert out[3].split() == ["25.0", "12.5", "0.50x", "tests/test_a.py::test_slow"]
    assert out[-2].split() == ["25.5", "13.0", "0.51x", "tests/test_a.py"]
    with pytest.raises(SystemExit, match="cannot read .* as a JUnit XML report"):
        script["main"]([str(tmp_path / "missing.xml")])


def test_suite_cpu_counts_a_child_that_burns_cpu_under_its_kind(tmp_path, capsys):
    script = runpy.run_path(str(ROOT / "scripts" / "suite_cpu.py"))
    assert script["kind_of"]("raylet | /x/raylet --raylet_socket_name=s") == "Ray head daemons"
    assert script["kind_of"]("python | ray::FSDPPolicyWorker.init_model") == (
        "Ray actors and tasks"
    )
    assert script["kind_of"]("VLLM::EngineCor | VLLM::EngineCore") == "vLLM engine processes"
    cli = "python | python -m rlkit.cli.main train --run-dir /tmp/pytest-of-root/pytest-8/r"
    assert script["kind_of"](cli) == "rlkit CLI subprocesses"
    # 1 s of CPU, then 3 s asleep: the last samples see the child's whole CPU time before it
    # exits (a process that has exited cannot be read)
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"
    burn += "time.sleep(3)"
    out_json = tmp_path / "cpu.json"
    argv = ["--json", str(out_json), "--top", "3", "--", sys.executable, "-c", burn]
    assert script["main"](argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.endswith("  other Python") for line in lines)
    assert lines[-1].startswith("wall ") and "core-s sampled" in lines[-1]
    # the child alone (other tests' processes may run beside it): its whole CPU time
    procs = json.loads(out_json.read_text()).values()
    (child,) = [last - first for first, last, label in procs if "process_time" in label]
    assert 0.95 <= child <= 2.0
    with pytest.raises(SystemExit):
        script["main"]([])
