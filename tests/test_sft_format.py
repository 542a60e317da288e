"""VisGym's SFT answer format (`visgym-sft`), its format reward, and the prompt file (issue 51,
items 4 and 6): the parser against VisGym's maze_2d numbering, episodes on a pinned VisGym maze,
one-line refusals, run.json's record, and the real-Qwen fixture's view of the first turn."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from rlkit.cli.main import main as rlkit_main
from rlkit.env.maze_env import EnvConfig, env_for_set, make_env
from rlkit.env.visgym_text import answer_view, format_share
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import STOP, Action
from rlkit.maze.parsing import format_tuple, parse_actions
from rlkit.maze.sets import pinned_set
from rlkit.settings import apply_settings
from rlkit.train.config import TaskConfig
from rlkit.train.presets import preset
from rlkit.train.run_config import config_from_dict

SFT = answer_view(env_for_set("visgym-easy"), "visgym-sft")
TAGGED = "<observation>a maze</observation><justification>closer</justification><action>{}</action>"


@pytest.mark.parametrize(
    ("text", "move"),
    [  # VisGym maze_2d `_action_to_direction`: 0 right, 1 up, 2 left, 3 down
        ("('move', 0)", Action.RIGHT),
        ("('move', 1)", Action.UP),
        ("('move', 2)", Action.LEFT),
        ("('move', 3)", Action.DOWN),
        ("('stop', 'stop')", STOP),
        ('I go down. ("move", 3)', Action.DOWN),
        ("(move, 2)", Action.LEFT),  # an unquoted name is read too
        ("('move', x) no, ('move', 1)", Action.UP),  # the first tuple literal counts
        (TAGGED.format("('move', 0)"), Action.RIGHT),
    ],
)
def test_tuples_read_with_visgyms_numbering(text, move):
    assert parse_actions(text, "visgym-sft") == ([move], None)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("('move', 4)", "move direction 4 is not 0, 1, 2 or 3"),
        ("('move', '0')", "move direction '0' is not 0, 1, 2 or 3"),
        ("('move', True)", "move direction True is not 0, 1, 2 or 3"),
        ("('jump', 1)", "unknown action name 'jump': use 'move' or 'stop'"),
        ("('stop',)", "no two-element action tuple"),  # VisGym's step wants two elements
        ("('move', 0, 1)", "no two-element action tuple"),
        ("<action>up</action>", "no two-element action tuple"),
    ],
)
def test_bad_tuples_spend_the_turn_with_a_reason(text, reason):
    moves, error = parse_actions(text, "visgym-sft")
    assert moves == [] and error.startswith(reason)


def test_format_tuple_round_trips():
    for move in (*Action, STOP):
        assert parse_actions(format_tuple(move), "visgym-sft") == ([move], None)


def test_the_prompt_says_the_tuple_format_and_numbering():
    msgs, _ = make_env(pinned_set("visgym-easy")[0], SFT).init()
    system = msgs[0]["content"]
    assert "('move', D)" in system and "0=right, 1=up, 2=left, 3=down" in system
    assert "('stop', 'stop')" in system and "<action>" not in system
    out = make_env(pinned_set("visgym-easy")[0], SFT).step("<action>up</action>")
    assert "('move', D), D one of 0=right, 1=up, 2=left, 3=down" in out["metadata"]["feedback"]
    assert env_for_set("visgym-easy") == answer_view(env_for_set("visgym-easy"))  # default kept


def _play(cfg: EnvConfig, answer) -> tuple[float, rules.State]:
    env = make_env(pinned_set("visgym-easy")[0], cfg)
    env.init()
    while True:
        out = env.step(answer(env.state))
        if out["done"]:
            return out["reward"], env.state


def test_the_oracle_in_tuples_solves_and_the_format_weight_pays_tags():
    def bare(s):
        return format_tuple(rules.best_move(s))

    def tagged(s):
        return TAGGED.format(bare(s))

    reward, state = _play(SFT, bare)
    assert reward == 1.0 and rules.solved(state) and state.parse_errors == 0
    weighted = replace(SFT, format_weight=0.2)  # VisGym's SFT recipe: 0.8 task + 0.2 format
    assert _play(weighted, bare)[0] == pytest.approx(0.8)
    assert _play(weighted, tagged)[0] == pytest.approx(1.0)
    # never stopping: 18 tagged turns, unsolved: 0.8 * 0 + 0.2 * 18/18
    reward, state = _play(weighted, lambda s: TAGGED.format("('move', 2)"))
    assert reward == pytest.approx(0.2) and state.turns == 18 and not rules.solved(state)
    assert format_share([TAGGED.format("x"), "<observation> </observation>"]) == 0.5


def test_a_format_reward_asks_for_the_tags_it_pays_for():
    maze = pinned_set("visgym-easy")[0]
    for fmt, action in (
        ("visgym-sft", "<action>('move', D)</action>"),
        ("visgym", "<action>ACTION"),
    ):
        cfg = answer_view(env_for_set("visgym-easy"), fmt)
        plain = make_env(maze, cfg).init()[0][0]["content"]
        weighted = make_env(maze, replace(cfg, format_weight=0.2)).init()[0][0]["content"]
        assert "<justification>" not in plain
        assert all(f"<{tag}>" in weighted for tag in ("observation", "justification"))
        assert action in weighted
    compact = replace(env_for_set("visgym-easy"), prompt_style="compact")
    with pytest.raises(UsageError, match="format_weight pays for tags the compact prompt"):
        replace(compact, format_weight=0.2)


def test_bad_values_are_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError, match="must both be visgym-sft"):
        replace(SFT, prompt_style="visgym")
    with pytest.raises(UsageError, match=r"format_weight \(1.5\) must be in \[0, 1\]"):
        replace(SFT, format_weight=1.5)
    with pytest.raises(UsageError, match="answer_format 'tuple': use visgym or visgym-sft"):
        answer_view(SFT, "tuple")
    with pytest.raises(UsageError, match="for squares sets"):
        answer_view(env_for_set("test"), "visgym-sft")
    with pytest.raises(UsageError, match="needs model.constrained=false"):
        sft = {"task.env.parser": "visgym-sft", "task.env.prompt_style": "visgym-sft"}
        apply_settings(preset("local-tiny-visgym"), sft)
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    with pytest.raises(UsageError, match="holds 0 characters"):
        TaskConfig(prompt_file=str(empty))
    with pytest.raises(UsageError, match="cannot be read"):
        TaskConfig(prompt_file=str(tmp_path / "missing.txt"))


def test_a_prompt_file_replaces_the_rules_and_run_json_records_it(tmp_path, capsys):
    text = "You are navigating a 9x9 maze. Answer ('move', 0) to go right.\n"
    path = tmp_path / "prompt.txt"
    path.write_text(text)
    cfg = apply_settings(preset("local-tiny-visgym"), {"task.prompt_file": str(path)})
    assert cfg.task.env.rules == text
    recorded = json.loads(json.dumps(cfg.to_dict()))["task"]  # run.json's `config`
    assert recorded["prompt_file"] == str(path) and recorded["env"]["rules"] == text
    assert recorded["prompt_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    msgs, _ = make_env(pinned_set("visgym-easy")[0], cfg.task.env).init()
    assert msgs[0] == {"role": "system", "content": text}
    argv = ["eval", "--set", "visgym-easy", "--prompt-file", str(path), "--show-prompt"]
    assert rlkit_main(argv) == 0
    assert capsys.readouterr().out.startswith(f"[system]\n{text}\n[user]\n[image]\nTurns left")


def test_the_qwen_fixture_sees_and_plays_the_sft_format(qwen_ckpt, capsys, tmp_path):
    argv = ["eval", "--set", "visgym-easy", "--policy", str(qwen_ckpt), "--answer-format"]
    assert rlkit_main([*argv, "visgym-sft", "--show-prompt"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("<|im_start|>system\nYou are in a 9x9 grid maze")
    assert "0=right, 1=up, 2=left, 3=down" in shown
    assert "<|vision_start|><|image_pad|><|vision_end|>Turns left: 18" in shown
    assert shown.rstrip().endswith("(1 image(s) where the image pad stands; visgym-sft answers)")
    out = tmp_path / "eval.json"
    run = [*argv, "visgym-sft", "--free", "--mazes", "1", "--max-new-tokens", "8"]
    assert rlkit_main([*run, "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["set"], result["n_mazes"]) == ("visgym-easy", 1)
    turns = [
        json.loads(line) for line in (tmp_path / "eval.trajectories.jsonl").read_text().splitlines()
    ]
    assert turns and all(t["turns"] for t in turns)


def test_a_run_read_back_keeps_the_prompt_text_it_trained_on(tmp_path):
    path = tmp_path / "prompt.txt"
    path.write_text("Answer ('move', 0) to go right.\n")
    cfg = apply_settings(preset("local-tiny-visgym"), {"task.prompt_file": str(path)})
    recorded = cfg.to_dict()
    path.write_text("Another text since.\n")  # changed, then gone where the run is read
    path.unlink()
    back = config_from_dict(recorded)
    assert back.task.env.rules == cfg.task.env.rules
    assert back.task.prompt_sha256 == cfg.task.prompt_sha256
