"""Launching on a real local head: entrypoints, checkpoint evaluation and threads as Ray jobs.

The smoke preset trained as a Ray job, resumed through `submit_training` and resubmitted once
finished, is in tests/test_faults.py (its killed-and-stopped job test ends that way).
"""

import pytest

from rlkit.cluster.launch import training_entrypoint
from rlkit.errors import UsageError


def test_entrypoint_is_validated_before_submitting(tmp_path):
    cmd = training_entrypoint("smoke", tmp_path / "r", overrides=["grpo.lr=1e-4"])
    assert cmd.startswith("python -m rlkit.cli.main train --preset smoke --run-dir ")
    assert "--set grpo.lr=1e-4" in cmd
    with pytest.raises(UsageError, match="unknown preset"):
        training_entrypoint("huge", tmp_path)
    with pytest.raises(UsageError, match="section.field=value"):
        training_entrypoint("smoke", tmp_path, overrides=["lr"])


@pytest.mark.slow
def test_checkpoint_evaluation_as_a_ray_job(ray_cluster, tmp_path):
    from rlkit.cluster.launch import submit_eval
    from rlkit.episodes.evaluate import EvalResult

    out = tmp_path / "oracle.json"
    handle = submit_eval(
        "oracle", str(out), address=ray_cluster, set_name="test", samples=2, device="cpu", gpus=0
    )
    assert handle.wait(300) == "SUCCEEDED", handle.logs()[-2000:]
    result = EvalResult.load(out)
    assert result.solve_rate == 1.0 and result.samples == 2
    assert len(result.load_trajectories(out)) == 128


def test_eval_on_a_cluster_needs_shared_output(capsys):
    from rlkit.cli.main import main

    assert main(["eval", "--policy", "oracle", "--address", "http://127.0.0.1:1"]) == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.slow
def test_a_ray_job_trains_on_every_core_although_ray_sets_omp_to_one(ray_cluster):
    code = (
        "import os, torch; from rlkit.train.trainer import torch_threads; "
        "torch.set_num_threads(torch_threads(None)); "
        "print('omp', os.environ.get('OMP_NUM_THREADS'), 'torch', torch.get_num_threads(), "
        "'cores', len(os.sched_getaffinity(0)))"
    )
    handle = ray_cluster.submit("threads-probe", f'python -c "{code}"')
    assert handle.wait(300) == "SUCCEEDED", handle.logs()[-2000:]
    line = next(x for x in handle.logs().splitlines() if x.startswith("omp "))
    _, omp, _, threads, _, cores = line.split()
    assert omp == "1"  # Ray's default in its workers: it left the demo's trainer on one core
    assert threads == cores
