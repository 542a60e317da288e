"""The local trainer on the seed's task (`local-tiny-visgym`): the constrained answer's fifth
word `stop`, the warm start's stop examples, the squares game's turn budgets, and the preset
training two steps and evaluating on `visgym-easy` (fast and deterministic)."""

import json
from dataclasses import replace

import pytest
import torch

from rlkit.env.maze_env import prompt_messages
from rlkit.episodes.rollout import run_episodes
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import STOP, Action, shortest_path
from rlkit.maze.sets import pinned_set, pinned_spec, train_mazes
from rlkit.model.batching import AnswerSpec, turn_logprobs
from rlkit.model.build import build_tiny
from rlkit.model.load import load
from rlkit.model.policy import ModelPolicy
from rlkit.train.presets import preset
from rlkit.train.step import turn_budgets
from rlkit.train.trainer import train
from rlkit.train.warmstart import bc_batch, squares_bc_states

SMALL = {  # the smoke model's shape, one patch a cell: seconds, not minutes
    "model.tiny.hidden": 64,
    "model.tiny.layers": 1,
    "model.tiny.heads": 2,
    "model.tiny.kv_heads": 1,
    "model.tiny.intermediate": 128,
    "model.tiny.vision_hidden": 32,
    "model.tiny.vision_heads": 2,
}


@pytest.fixture(scope="module")
def cfg():
    return preset("local-tiny-visgym").with_overrides(SMALL)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, cfg):
    return load(build_tiny(tmp_path_factory.mktemp("tiny"), seed=0, config=cfg.model.tiny))


def test_the_preset_plays_visgyms_mazes_and_rules_on_a_view_of_one_patch_a_cell(cfg):
    env = cfg.task.env
    assert cfg.task.eval_set == "visgym-easy" and cfg.task.spec == pinned_spec("visgym-easy")
    assert (env.max_turns, env.parser, env.style.view) == (18, "visgym", "full")
    # 8 px squares, a one-square pad: 2 x 2 squares (a cell and its passages) a 16 px patch
    assert (env.style.cell_px, env.style.pad) == (8, 1)
    assert cfg.model.tiny.patch_size == 16 and cfg.model.tiny.merge == 1
    assert (env.style.wall, env.style.exit, env.style.agent) == (
        (169, 169, 169),
        (255, 0, 0),
        (0, 0, 255),
    )


def test_the_squares_answer_has_stop_fifth_and_the_cell_answer_stays_four(loaded):
    cells, squares = AnswerSpec.from_loaded(loaded), AnswerSpec.from_loaded(loaded, "squares")
    assert cells.moves == tuple(Action) and len(cells.choices) == 4
    assert squares.moves == (*Action, STOP) and squares.choices[:4] == cells.choices
    assert squares.index(STOP) == 4 and squares.response(STOP) == squares.response(4)
    text = loaded.tokenizer.decode(squares.response(STOP), skip_special_tokens=True)
    assert text == "<action>stop</action>"
    with pytest.raises(UsageError, match="not an action"):
        cells.index(STOP)
    with pytest.raises(UsageError, match="unknown game"):
        AnswerSpec.from_loaded(loaded, "hexes")


def test_the_policy_says_stop_on_squares_and_records_the_trainers_logprobs(loaded, cfg):
    pol = ModelPolicy(loaded)
    mazes = pinned_set("visgym-easy")[:2]
    trajs = run_episodes(pol, mazes, cfg.task.env, samples=4, seed=0, history=1)
    turns = [t for tr in trajs for t in tr.turns]
    assert any(t.actions == ["stop"] for t in turns)  # an untrained policy stops somewhere
    assert all(t.parse_error is None and t.move_probs is None for t in turns)
    answer = pol.answer_for("squares")
    prompts = [
        loaded.encoder.encode(prompt_messages(rules.initial(m), cfg.task.env)) for m in mazes
    ]
    first = [tr.turns[0] for tr in trajs[::4]]
    with torch.no_grad():
        logp, _, _ = turn_logprobs(loaded, prompts, [t.response_ids for t in first], answer=answer)
    recorded = torch.tensor([t.logprobs[answer.choice_pos] for t in first])
    assert torch.allclose(logp[:, answer.choice_pos], recorded, atol=1e-5)


def test_squares_bc_states_clone_the_oracle_with_stop_on_the_target_and_the_envs_feedback():
    spec = pinned_spec("visgym-easy")
    triples = squares_bc_states(spec, step=0, batch=64, random_steps=5, seed=0)
    assert triples == squares_bc_states(spec, step=0, batch=64, random_steps=5, seed=0)
    stops = [s for s, a, _ in triples if a == STOP]
    assert 8 <= len(stops) <= 30 and all(s.pos == s.maze.exit for s in stops)
    assert all(a == rules.best_move(s) and not s.stopped for s, a, _ in triples)
    assert all(n.startswith("You moved") or "into a wall" in n for s, _, n in triples if s.turns)


def test_bc_batch_keeps_the_cell_games_states(loaded):
    cells = preset("smoke")
    w = replace(cells.warm_start, batch=8, random_steps=5)
    prompts, actions, mazes = bc_batch(loaded, cells.task.spec, cells.task.env, 0, w, 0)
    assert len(prompts) == len(mazes) == 8 and all(isinstance(a, Action) for a in actions)


def test_a_squares_mazes_tight_budget_counts_its_stop(cfg):
    mazes = train_mazes(cfg.task.spec, 0, 4)
    budgets = turn_budgets(mazes, cfg.task.env, slack=0, tight_fraction=1.0)
    # shortest_path lists the start too: its length is the moves + the closing stop
    assert budgets == [len(shortest_path(m)) for m in mazes]


def test_the_preset_trains_two_steps_and_evaluates_on_visgym_easy(tmp_path, cfg):
    small = cfg.with_overrides(
        {
            "warm_start.max_steps": 1,
            "warm_start.batch": 16,
            "warm_start.val_samples": 1,
            "grpo.mazes_per_step": 2,
            "grpo.group_size": 2,
            "schedule.steps": 1,
            "schedule.eval_every": 2,
            "schedule.ckpt_every": 2,
            "schedule.eval_samples": 1,
            "schedule.eval_before_train": False,
            "schedule.threads": 1,
        }
    )
    summary = train(small, tmp_path, progress=False)
    assert (summary["steps"], summary["warm_start_end"], summary["grpo_steps"]) == (2, 1, 1)
    assert set(summary["solve_rate"]) == {1, 2}  # the warm start's end and the last step
    result = json.loads((tmp_path / "evals" / "global_step_2.json").read_text())
    assert (result["set"], result["n_mazes"], result["samples"]) == ("visgym-easy", 64, 1)
