"""vLLM as rlkit's engine on Qwen3-VL's real text side (`qwen_ckpt`: Qwen's tokenizer, 151,669
tokens in 151,936 rows, chat_template.json, eos [151645, 151643] and off-neutral sampling
defaults in generation_config.json; tiny random weights). vLLM's CPU build, nothing mocked.

- stops: the policy stops at every stop id the checkpoint names (`checkpoint_files.stop_ids`);
- rows with no token (151,669..151,935) are never drawn: `NoTokenRows` puts -inf there before
  vLLM samples and records processed logprobs;
- the checkpoint's sampling defaults never reach vLLM (`generation_config="vllm"`);
- greedy, `rlkit eval --engine vllm` (constrained) and free answers are the HF engine's, id
  for id, and so are VisGym's tuple answers (`visgym-sft`, an SFT start's format) on a VisGym
  maze (+11 s). About 2.7 minutes on 2 cores (three engine starts with 151,936 rows).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow  # vLLM engines, CLI evals on both engines

from rlkit.cli.main import main  # noqa: E402
from rlkit.env.maze_env import env_for_set  # noqa: E402
from rlkit.env.visgym_text import answer_view  # noqa: E402
from rlkit.episodes.evaluate import EvalResult  # noqa: E402
from rlkit.episodes.rollout import run_episodes  # noqa: E402
from rlkit.maze.sets import pinned_set  # noqa: E402
from rlkit.model.checkpoint_files import sampling_defaults  # noqa: E402
from rlkit.model.load import load  # noqa: E402
from rlkit.model.policy import ModelPolicy  # noqa: E402
from rlkit.model.vllm_engine import engine_limits, start_engine  # noqa: E402
from rlkit.model.vllm_policy import VllmPolicy  # noqa: E402

FIRST_NO_TOKEN, ROWS = 151_669, 151_936
IM_END, ENDOFTEXT = 151645, 151643
KV_GB = "0.25"
LOGPROB_TOL = 1e-4


@pytest.fixture(scope="module")
def engine(qwen_ckpt):
    return start_engine(qwen_ckpt, **engine_limits("test", history=1), kv_cache_gb=float(KV_GB))


def test_stops_and_no_sampling_defaults(engine, qwen_ckpt):
    assert engine.stop_ids == (IM_END, ENDOFTEXT)
    defaults = sampling_defaults(qwen_ckpt)
    assert defaults["top_k"] == 20 and defaults["repetition_penalty"] == 1.05  # off neutral
    # vLLM's own defaults for requests (what `LLM.get_default_sampling_params` and its servers
    # read from generation_config.json under "auto"): none
    assert engine.llm.llm_engine.model_config.get_diff_sampling_param() == {}
    assert engine.llm.get_default_sampling_params().top_k in (0, -1)


def test_rows_with_no_token_are_never_drawn(engine):
    """64 sampled answers of 32 tokens at temperature 1 from Qwen's chat prompt: no id past the
    tokenizer, and the processed logprobs vLLM records give those rows no probability."""
    from vllm import SamplingParams

    tok = engine.tokenizer
    assert len(tok) == FIRST_NO_TOKEN
    chat = "<|im_start|>user\nWhich way?<|im_end|>\n<|im_start|>assistant\n"
    prompt = tok.encode(chat, add_special_tokens=False)
    banned = list(range(FIRST_NO_TOKEN, FIRST_NO_TOKEN + 100)) + [ROWS - 1]
    params = [
        SamplingParams(
            temperature=1.0, max_tokens=32, ignore_eos=True, seed=s, detokenize=False, logprobs=0
        )
        for s in range(64)
    ]
    outs = engine.llm.generate([{"prompt_token_ids": prompt}] * 64, params, use_tqdm=False)
    drawn = [t for o in outs for t in o.outputs[0].token_ids]
    assert len(drawn) == 64 * 32 and max(drawn) < FIRST_NO_TOKEN
    # and what the sampler saw: those rows at -inf (a few asked by id beside the drawn one)
    probe = SamplingParams(
        temperature=1.0, max_tokens=1, seed=0, detokenize=False, logprob_token_ids=banned
    )
    (o,) = engine.llm.generate([{"prompt_token_ids": prompt}], probe, use_tqdm=False)
    top = o.outputs[0].logprobs[0]
    assert all(top[t].logprob == float("-inf") for t in banned if t in top)
    assert sum(t in top for t in banned) >= len(banned) - 1


def test_no_token_rows_processor_masks_only_those_rows():
    from types import SimpleNamespace

    from rlkit.model.vllm_rows import FIRST_ROW_KEY, NoTokenRows

    cfg = SimpleNamespace(additional_config={FIRST_ROW_KEY: 5})
    p = NoTokenRows(cfg, torch.device("cpu"), False)
    logits = torch.arange(16.0).reshape(2, 8)
    out = p.apply(logits.clone())
    assert torch.equal(out[:, :5], logits[:, :5]) and torch.isinf(out[:, 5:]).all()
    assert not p.is_argmax_invariant()


def test_greedy_free_answers_are_the_hf_engines(engine, qwen_ckpt):
    """Free answers (Qwen's 7-token tag, stops, the rows with no token banned on both sides):
    the same ids under greedy decoding."""
    mazes, cfg = pinned_set("test")[:2], env_for_set("test")
    kw = {"greedy": True, "constrained": False, "max_new_tokens": 12}
    v = run_episodes(VllmPolicy(engine, **kw), mazes, cfg, seed=3)
    h = run_episodes(ModelPolicy(load(qwen_ckpt), **kw), mazes, cfg, seed=3)
    same_turns(v, h)


def test_visgyms_tuple_format_plays_the_same_on_both_engines(engine, qwen_ckpt):
    """An SFT start's answer format (`visgym-sft`, VisGym's tuples and rules) on a VisGym maze:
    the same prompt and answer ids, free and greedy, on both engines."""
    cfg = replace(answer_view(env_for_set("visgym-easy"), "visgym-sft"), max_turns=3)
    mazes = pinned_set("visgym-easy")[:1]
    kw = {"greedy": True, "constrained": False, "max_new_tokens": 12}
    v = run_episodes(VllmPolicy(engine, **kw), mazes, cfg, seed=3)
    h = run_episodes(ModelPolicy(load(qwen_ckpt), **kw), mazes, cfg, seed=3)
    same_turns(v, h)
    assert len(v[0].turns) == 3  # random weights never stop on the target


def same_turns(v_trajs, hf_trajs) -> None:
    for a, b in zip(v_trajs, hf_trajs, strict=True):
        assert (a.reward, a.terminated, a.truncated) == (b.reward, b.terminated, b.truncated)
        for u, w in zip(a.turns, b.turns, strict=True):
            assert u.text == w.text
            assert (u.prompt_ids, u.response_ids) == (w.prompt_ids, w.response_ids)
            assert u.logprobs == pytest.approx(w.logprobs, abs=LOGPROB_TOL)
            assert max(u.response_ids) < FIRST_NO_TOKEN


def test_greedy_cli_eval_is_the_hf_engines(qwen_ckpt, tmp_path, capsys):
    """`rlkit eval --greedy` (constrained) on 4 mazes: the same moves, prompt and answer ids on
    both engines, logprobs to float32 noise. Last in the module: the CLI's in-process engine
    tears down vLLM's process-wide state that the module's engine runs in."""
    runs = {}
    for eng in ("hf", "vllm"):
        out = tmp_path / eng / "eval.json"
        argv = ["eval", "--policy", str(qwen_ckpt), "--set", "test", "--greedy", "--json"]
        argv += ["--mazes", "4", "--engine", eng, "--kv-cache-gb", KV_GB, "--out", str(out)]
        assert main(argv) == 0
        printed = json.loads(capsys.readouterr().out)
        runs[eng] = (printed, EvalResult.load(out).load_trajectories(out))
    (hf_printed, hf_trajs), (v_printed, v_trajs) = runs["hf"], runs["vllm"]
    assert v_printed == hf_printed and len(v_trajs) == 4
    same_turns(v_trajs, hf_trajs)
