"""SkyRL launch and readers: the override list, the entrypoint command, checkpoints, eval dumps.

SkyRL's own config classes and validation check the overrides in `tests/skyrl/test_config.py`;
here: what rlkit decides (preset values, the command line, reading SkyRL's files).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from rlkit.cluster.skyrl.entry import parse_args
from rlkit.cluster.skyrl.overrides import build_overrides, entrypoint_command
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.env.data import build_rows
from rlkit.env.maze_env import ENV_ID, EnvConfig, env_for_set
from rlkit.errors import UsageError
from rlkit.maze.core import optimal_action
from rlkit.maze.parsing import format_action
from rlkit.maze.sets import pinned_set, pinned_spec
from rlkit.run.checkpoints import MARKER as LATEST_MARKER
from rlkit.run.skyrl_dumps import read_eval_dumps, read_eval_episodes, split_turns
from rlkit.run.skyrl_layout import list_checkpoints


def as_dict(overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides)


def test_preset_matches_the_6_gpu_node_and_the_maze_env():
    o = as_dict(build_overrides(get_preset("qwen3vl-8b-6gpu"), "run-a"))
    assert o["trainer.policy.model.path"] == "Qwen/Qwen3-VL-8B-Instruct"
    assert o["trainer.algorithm.advantage_estimator"] == "grpo"
    assert o["environment.env_class"] == ENV_ID
    assert o["trainer.placement.colocate_all"] == "true"
    # colocate_all: policy GPUs == engines x TP
    gpus = int(o["trainer.placement.policy_num_gpus_per_node"]) * int(
        o["trainer.placement.policy_num_nodes"]
    )
    tp = int(o["generator.inference_engine.tensor_parallel_size"])
    assert gpus == 6 == int(o["generator.inference_engine.num_engines"]) * tp
    assert o["generator.vision_language_generator"] == "true" and o["generator.batched"] == "false"
    assert o["generator.max_turns"] == str(env_for_set("visgym-easy").max_turns) == "18"
    assert o["trainer.resume_mode"] == "latest" and o["trainer.dump_eval_results"] == "true"
    assert o["trainer.ckpt_path"] == "/fsx/rlkit/runs/run-a"
    assert o["data.val_data"] == "['/fsx/rlkit/runs/run-a/data/eval.parquet']"


def test_preset_rejects_batches_that_do_not_split_over_gpus():
    with pytest.raises(UsageError, match="must split into 6 GPUs"):
        get_preset("qwen3vl-8b-6gpu", prompts_per_node=32, mini_batches=2)
    with pytest.raises(UsageError, match="GRPO compares a group"):
        get_preset("qwen3vl-8b-6gpu", group_size=1)
    with pytest.raises(UsageError, match="unknown SkyRL preset"):
        get_preset("qwen3vl-70b")


def test_entrypoint_command_round_trips_through_the_shell():
    preset = get_preset("qwen3vl-8b-6gpu")
    argv = shlex.split(entrypoint_command(preset, "run-a"))
    assert argv[:3] == ["python", "-m", "rlkit.cluster.skyrl.entry"]
    args, overrides = parse_args(argv[3:])
    assert args.paths.data_dir == "/fsx/rlkit/runs/run-a/data" and args.sky.train_rows == 5040
    assert args.sky.train_rows == preset.batch.steps * preset.prompts_per_step  # one epoch: the run
    assert overrides == build_overrides(preset, "run-a")
    assert args.preset is None  # no name given: the entry records none
    named = shlex.split(entrypoint_command(preset, "run-a", "qwen3vl-8b-6gpu"))
    assert parse_args(named[3:])[0].preset == "qwen3vl-8b-6gpu"
    from rlkit.cluster.launch import plan_training

    plan = plan_training("skyrl-tiny-cpu", "runs/skyrl", run_name="a")
    assert parse_args(shlex.split(plan.command)[3:])[0].preset == "skyrl-tiny-cpu"
    with pytest.raises(UsageError, match="key=value"):
        parse_args(["--", "+trainer.new_key=1"])


# -- readers: small files in SkyRL's shapes ------------------------------------------------


def test_list_checkpoints_reads_the_latest_marker(tmp_path: Path):
    for step in (10, 20, 30):
        d = tmp_path / f"global_step_{step}"
        (d / "policy").mkdir(parents=True)
        (d / "trainer_state.pt").write_bytes(b"state")
    (tmp_path / "exports" / "global_step_20" / "policy").mkdir(parents=True)
    (tmp_path / LATEST_MARKER).write_text("20")  # step 30 was being written when the node died
    ckpts = list_checkpoints(tmp_path)
    assert [(c.step, c.complete) for c in ckpts] == [(10, True), (20, True), (30, False)]
    assert ckpts[1].hf_export == tmp_path / "exports" / "global_step_20" / "policy"
    assert ckpts[0].hf_export is None
    with pytest.raises(UsageError, match="no SkyRL run dir"):
        list_checkpoints(tmp_path / "missing")


def qwen_response(answers: list[str]) -> str:
    """Decoded multi-turn response as SkyRL's VLM generator dumps it: answers and observations."""
    obs = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Move.<|im_end|>\n"
    return (obs + "<|im_start|>assistant\n").join(a + "<|im_end|>\n" for a in answers)


def oracle_answers(maze, n: int | None = None) -> list[str]:
    out, cell = [], maze.start
    while cell != maze.exit and (n is None or len(out) < n):
        a = optimal_action(maze, cell)
        out.append(f"I go {a.word}. {format_action(a)}")
        cell = (cell[0] + a.delta[0], cell[1] + a.delta[1])
    return out


def dump_record(row: dict, answers: list[str], solved: bool, max_turns: int) -> dict:
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    extras["max_turns"] = max_turns  # SkyRL's generator writes it into the extras it dumps
    n_tokens = 7 * len(answers)
    score = [0.0] * n_tokens
    score[-1] = 1.0 if solved else 0.0
    return {
        "input_prompt": "<|im_start|>system\n...",
        "output_response": qwen_response(answers),
        "score": score,
        "stop_reason": "stop",
        "env_class": ENV_ID,
        "env_extras": extras,
        "data_source": row["data_source"],
    }


def test_split_turns_recovers_the_answers():
    answers = ["<action>up</action>", "hmm <action>left</action>"]
    assert split_turns(qwen_response(answers)) == answers
    assert split_turns("<action>down</action><|im_end|>") == ["<action>down</action>"]


def test_eval_dumps_become_rlkit_eval_results(tmp_path: Path):
    cfg = EnvConfig()
    _, rows = build_rows(n_train=1, spec=pinned_spec("test"), eval_set="test", cfg=cfg)
    mazes = pinned_set("test")
    step_dir = tmp_path / "dumped_evals" / "global_step_10_evals"
    step_dir.mkdir(parents=True)
    records = []
    # Maze 0: solved twice. Maze 1: solved once, once walked into a wall until out of turns.
    for i, outcomes in ((0, (True, True)), (1, (True, False))):
        for solved in outcomes:
            answers = oracle_answers(mazes[i]) if solved else ["<action>up</action>"] * 12
            records.append(dump_record(rows[i], answers, solved, cfg.max_turns))
    lines = "\n".join(json.dumps(r) for r in records) + "\n"
    (step_dir / "rlkit-maze_test.jsonl").write_text(lines)
    (step_dir / "aggregated_results.jsonl").write_text(json.dumps({"eval/all/avg_score": 0.75}))

    episodes = read_eval_episodes(step_dir)
    assert [e.solved for e in episodes] == [True, True, True, False]
    assert episodes[0].maze_hash == mazes[0].content_hash and episodes[0].maze_index == 0
    assert episodes[3].turns == 12 and episodes[0].reward == 1.0

    results = read_eval_dumps(tmp_path)
    assert list(results) == [10]
    r = results[10]
    assert (r.n_mazes, r.samples, r.step, r.set) == (2, 2, 10, "test")
    assert r.solve_rate == 0.75  # 3 of 4 episodes
    assert r.pass_at_k["pass@1"] == 0.75 and r.pass_at_k["pass@2"] == 1.0
    assert r.episodes == [[True, True], [True, False]]
    assert sum(r.failures.values()) == 1


def test_eval_dump_with_missing_fields_names_the_line(tmp_path: Path):
    step_dir = tmp_path / "dumped_evals" / "global_step_5_evals"
    step_dir.mkdir(parents=True)
    (step_dir / "x.jsonl").write_text(json.dumps({"output_response": "hi"}) + "\n")
    with pytest.raises(UsageError, match=r"x\.jsonl:1: not a SkyRL eval dump record"):
        read_eval_dumps(tmp_path)
    with pytest.raises(UsageError, match="dump_eval_results"):
        read_eval_dumps(tmp_path / "nowhere")
