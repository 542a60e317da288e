"""SkyRL's whole trainer for one step on the checkpoint with Qwen3-VL's real text side
(`qwen_ckpt`: 151,936 rows, Qwen's template in chat_template.json, two stop ids, sampling
defaults in generation_config.json): rlkit's device seam, FSDP2 on one rank, SkyRL's vLLM server
and router, the weight sync, an eval, a checkpoint and its HF export, launched as a researcher
does (`rlkit submit --preset skyrl-tiny-cpu --model DIR`), with what a researcher's first 8B run
asks for together: the seed's eval and the sampled one, two eval sets, a history window of 2,
and the levers for long sparse episodes: GiGPO's step-level credit and the difficulty curriculum. It shares the SkyRL CPU run's worker
(`SHARED_FIXTURES`), so two SkyRL runs never hold the machine's memory at once.
"""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from rlkit.model import checkpoint_files
from rlkit.run import open_run
from rlkit.run.skyrl_dumps import read_eval_dumps

pytestmark = pytest.mark.timeout(900)

IM_END, ENDOFTEXT, N_TOKENS = 151645, 151643, 151669


def test_one_skyrl_step_runs_on_the_real_text_side(skyrl_qwen_step, qwen_ckpt):
    run = skyrl_qwen_step
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1]
    assert "rollout/solve_rate" in steps[1] and "eval/solve_rate" in steps[1]
    overrides = json.loads((run / "run.json").read_text())["config"]["overrides"]
    assert overrides["trainer.policy.model.path"] == str(qwen_ckpt)
    # the export keeps what the checkpoint said: template, stop ids, tokenizer
    policy = run / "exports" / "global_step_1" / "policy"
    assert checkpoint_files.stop_ids(policy) == (IM_END, ENDOFTEXT)
    assert checkpoint_files.template_source(policy) in ("chat_template.jinja", "chat_template.json")
    assert len(AutoTokenizer.from_pretrained(policy)) == N_TOKENS
    # SkyRL's eval dumps read back as rlkit results, before and after the step: one greedy
    # episode a maze though the window dumped a row a turn (the seed's protocol on 2 of the
    # set's mazes), per set, and the sampled eval beside it
    evals = read_eval_dumps(run / "exports")
    assert sorted(evals) == [0, 1] and all(r.n_mazes == 2 for r in evals.values())
    opened = open_run(run)
    by_set = opened.evals_by_set()
    assert list(by_set) == ["test", "test-large"]
    for results in by_set.values():
        assert sorted(results) == [0, 1]
        assert all(r.mode == "greedy" and r.samples == 1 for r in results.values())
    sampled = opened.sampled_evals()
    assert sorted(sampled) == [0, 1] and sampled[1].mode == "sampled"
    assert steps[1]["eval/samples"] == 1
    assert steps[1]["eval/test-large_samples"] == 1
    assert overrides["generator.step_wise_trajectories"] == "true"
    assert overrides["trainer.algorithm.advantage_estimator"] == "gigpo"
    assert "loss/gigpo_step_abs_mean" in steps[1]  # each row's step level was added
    assert steps[1]["rollout/turns_mean"] > 1  # rows a turn, episodes counted once
    assert [c.step for c in opened.checkpoints()] == [1]
