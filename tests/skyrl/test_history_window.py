"""A history window on the cluster (`history`): rlkit's SkyRL generator against a real vLLM server.

The session's vLLM CPU server on the tiny Qwen3-VL (vllm_server.py) answers greedily, 2 mazes x 2
samples of up to 6 turns, three ways: on the `test` set the whole conversation (one row an
episode, SkyRL's loop) and a window that keeps every turn; on `visgym-easy` (drawn at 8 px, its
rules in a system message) a window of 2. With every turn kept, the step rows rebuild the
whole-conversation run exactly; with 2, each row's prompt holds at most 2 pictures and the
rules, and the tiny model's own forward on the row (what SkyRL's trainer scores) gives the
logprobs the engine sampled with.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from skyrl.backends.skyrl_train.inference_servers.engine_utils import (
    get_sampling_params_for_backend,
)
from skyrl.train.config import SkyRLGymConfig
from skyrl.train.dataset.dataset import PromptDataset
from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.utils.trainer_utils import validate_generator_output
from transformers import Qwen3VLForConditionalGeneration

from rlkit.cluster.skyrl.generator import DESYNC_METRIC, RlkitVLMGenerator, image_runs
from rlkit.cluster.skyrl.overrides import build_overrides
from rlkit.cluster.skyrl.preset_checks import check_budget
from rlkit.cluster.skyrl.preset_sections import set_view
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.env.data import write_datasets
from rlkit.env.maze_env import ENV_ID, register_env
from rlkit.errors import UsageError
from rlkit.run.skyrl_dumps import NEXT_TURN

try:  # tests/skyrl is a plain directory: a package named `skyrl` would shadow SkyRL itself
    from test_skyrl_render import greedy_config
    from vllm_server import make_client, run
except ImportError:  # pragma: no cover
    from .test_skyrl_render import greedy_config
    from .vllm_server import make_client, run

pytestmark = [pytest.mark.skyrl, pytest.mark.slow]  # a vLLM server

TURNS = 6


RUNS = (("test", None), ("test", TURNS), ("visgym-easy", 2))
"""(eval set, window) of each run."""


@pytest.fixture(scope="module")
def played(tiny_server, tokenizer, tmp_path_factory) -> dict:
    """Each run's generator output, keyed by window (None: the whole conversation)."""
    register_env()
    base, sampling = greedy_config(tokenizer)  # 2-token greedy answers, 6 turns
    outputs = {}
    for eval_set, window in RUNS:
        out_dir = tmp_path_factory.mktemp(f"data-{eval_set}")
        _, path = write_datasets(
            out_dir, n_train=1, eval_set=eval_set, cfg=set_view(eval_set, 8), n_eval=2
        )
        dataset = PromptDataset([str(path)], tokenizer, max_prompt_length=1024, num_workers=1)
        prompts = dataset.collate_fn([dataset[i] for i in range(2)])
        cfg = replace(base, step_wise_trajectories=window is not None)
        client = make_client(tiny_server, tokenizer=tokenizer)
        generator = RlkitVLMGenerator(
            cfg, SkyRLGymConfig(max_env_workers=0), client, tokenizer, merge_size=2, history=window
        )
        batch, _ = prepare_generator_input(
            prompts, 2, get_sampling_params_for_backend("vllm", sampling), ENV_ID, "train", 0
        )
        out = run(client, generator.generate(batch, disable_tqdm=True))
        validate_generator_output(len(batch["prompts"]), out, step_wise=window is not None)
        outputs[window] = out
    return outputs


def episodes(out: dict) -> list[list[int]]:
    """Row indices of each trajectory's steps, in order (rows are contiguous per trajectory)."""
    out_rows, current = [], []
    for i, last in enumerate(out["is_last_step"]):
        current.append(i)
        if last:
            out_rows.append(current)
            current = []
    return out_rows


def test_a_window_that_keeps_every_turn_rebuilds_the_whole_conversation(played):
    whole, steps = played[None], played[TURNS]
    trajectories = episodes(steps)
    assert len(trajectories) == len(whole["response_ids"]) == 4
    for i, rows in enumerate(trajectories):
        pairs = zip(whole["response_ids"][i], whole["loss_masks"][i], strict=True)
        sampled = [t for t, m in pairs if m]
        assert sum((steps["response_ids"][j] for j in rows), []) == sampled
        last = rows[-1]
        assert (
            steps["prompt_token_ids"][last] + steps["response_ids"][last]
            == whole["prompt_token_ids"][i] + whole["response_ids"][i]
        )
        assert torch.equal(steps["pixel_values"][last], whole["pixel_values"][i])
        assert sum(steps["rewards"][last]) == sum(whole["rewards"][i])
        assert not any(sum(steps["rewards"][j]) for j in rows[:-1])  # the reward sits at the end
        assert {steps["stop_reasons"][j] for j in rows[:-1]} <= {NEXT_TURN}
        assert steps["stop_reasons"][last] == whole["stop_reasons"][i]
    assert len(steps["response_ids"]) > len(trajectories)  # episodes of several turns


def test_a_window_of_two_keeps_the_rules_and_two_pictures(played, tokenizer):
    out = played[2]
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    user = tokenizer.encode("<|im_start|>user", add_special_tokens=False)
    first = out["prompt_token_ids"][0]
    rules = first[: next(k for k in range(len(first)) if first[k : k + len(user)] == user)]
    assert len(rules) > 10  # the system message with the game's rules
    counts = []
    for ids, grid in zip(out["prompt_token_ids"], out["image_grid_thw"], strict=True):
        counts.append(len(image_runs(ids, image_id)))
        assert ids[: len(rules)] == rules
        assert counts[-1] == len(grid)  # each row's pictures are its prompt's
    assert max(counts) == 2 and min(counts) == 1
    assert out["rollout_metrics"][DESYNC_METRIC] == 0
    # the episode-level metrics count each episode once, whatever its number of rows
    assert out["rollout_metrics"]["environment/turns_mean"] == pytest.approx(
        sum(len(rows) for rows in episodes(out)) / 4
    )


@torch.no_grad()
def test_the_trainer_scores_what_the_engine_saw(played, tiny_dir):
    """Each row of the window-2 run through the tiny model as SkyRL's model wrapper calls it:
    the sampled tokens' logprobs are the engine's (float32 on both sides)."""
    out = played[2]
    model = Qwen3VLForConditionalGeneration.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    worst = 0.0
    for i in range(len(out["response_ids"])):
        prompt, response = out["prompt_token_ids"][i], out["response_ids"][i]
        ids = torch.tensor([prompt + response])
        logits = model(
            ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=out["pixel_values"][i],
            image_grid_thw=out["image_grid_thw"][i],
            mm_token_type_ids=(ids == model.config.image_token_id).long(),
        ).logits[0]
        logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1], -1)
        ours = logprobs.gather(1, torch.tensor(response)[:, None])[:, 0]
        engine = torch.tensor(out["rollout_logprobs"][i])
        worst = max(worst, float((ours - engine).abs().max()))
    assert worst < 1e-3, worst


def test_history_is_refused_where_skyrl_cannot_train_rows_by_turn():
    with pytest.raises(UsageError, match=r"history \(0\) must be >= 1"):
        get_preset("qwen3vl-8b", history=0)
    with pytest.raises(UsageError, match="advantage_estimator=rloo|not advantage_estimator=gae"):
        get_preset("qwen3vl-8b", history=2, recipe={"advantage_estimator": "gae"})
    with pytest.raises(UsageError, match="apply_overlong_filtering"):
        get_preset("qwen3vl-8b", history=2, recipe={"apply_overlong_filtering": True})


def test_the_dry_run_counts_the_kept_turns():
    """18 turns at 1024-token answers: the whole conversation passes max_input_length at turn
    7; a window of 2 keeps every prompt under it, and vLLM's image limit follows."""
    whole, window = get_preset("qwen3vl-8b"), get_preset("qwen3vl-8b", history=2)
    assert check_budget(whole).budget.warning() is not None
    budget = check_budget(window).budget
    assert budget.warning() is None and budget.worst_case < whole.task.max_input_length
    assert budget.worst_case == budget.system + 2 * budget.per_turn()
    assert (whole.images_per_episode, window.images_per_episode) == (19, 2)
    assert "generator.step_wise_trajectories=true" in build_overrides(window, "r")
    assert "generator.step_wise_trajectories=false" in build_overrides(whole, "r")
