import hashlib

import numpy as np
import pytest
import skyrl_gym
from hypothesis import given, settings
from hypothesis import strategies as st

from rlkit.env.maze_env import ENV_ID, EnvConfig, MazeEnv, make_env, register_env
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import Action, Maze, optimal_action
from rlkit.maze.parsing import format_action
from rlkit.maze.sets import pinned_set


@pytest.fixture(scope="module")
def maze() -> Maze:
    return pinned_set()[5]


def test_skyrl_gym_make_init_step_roundtrip(maze):
    register_env()
    register_env()  # idempotent
    env = skyrl_gym.make(
        ENV_ID,
        env_config={"max_turns": 20, "cell_px": 8},
        extras={"extra_info": {"maze": maze.to_json()}},
    )
    assert isinstance(env, MazeEnv)
    msgs, meta = env.init([{"role": "user", "content": "ignored"}])
    assert [m["role"] for m in msgs] == ["user"]  # compact style: the task rides in the user turn
    parts = msgs[0]["content"]
    assert parts[0]["type"] == "image_url" and parts[0]["image_url"]["url"].startswith(
        "data:image/png;base64,"
    )
    assert meta["position"] == list(maze.start) and meta["turns"] == 0
    out = env.step(format_action(optimal_action(maze, maze.start)))
    assert set(out) >= {"observations", "reward", "done", "metadata"}
    assert out["metadata"]["turns"] == 1


def test_generator_max_turns_extra_overrides_config(maze):
    env = MazeEnv({"max_turns": 50}, {"maze": maze.to_dict(), "max_turns": 3})
    assert env.max_turns == 3


@pytest.mark.parametrize("observation", ["image", "text", "both"])
@pytest.mark.parametrize("prompt_style", ["compact", "full"])
def test_oracle_solves_with_reward_one_every_config(maze, observation, prompt_style):
    env = make_env(maze, EnvConfig(observation=observation, prompt_style=prompt_style))
    msgs, _ = env.init()
    content = msgs[-1]["content"]
    assert isinstance(content, str) == (observation == "text")
    done, turns = False, 0
    while not done:
        out = env.step(format_action(optimal_action(maze, env.state.pos)))
        done, turns = out["done"], turns + 1
    assert out["reward"] == 1.0 and env.terminated and not env.truncated
    assert out["observations"] == []
    assert env.get_metrics()["solved"] == 1.0 and turns == len(rules_path(maze)) - 1


def rules_path(maze):
    from rlkit.maze.core import shortest_path

    return shortest_path(maze)


def test_truncation_gives_zero_reward_and_wall_bumps_counted(maze):
    env = make_env(maze, EnvConfig(max_turns=4))
    env.init()
    blocked = next(a for a in Action if not maze.can_move(maze.start, a))
    for _ in range(4):
        out = env.step(format_action(blocked))
    assert out["done"] and out["reward"] == 0.0 and env.truncated and not env.terminated
    assert out["metadata"]["wall_bumps"] == 4 and out["metadata"]["position"] == list(maze.start)


def test_parse_failure_costs_turn_and_gives_feedback_with_same_picture(maze):
    env = make_env(maze)
    msgs, _ = env.init()
    out = env.step("I am not sure")
    assert not out["done"] and out["reward"] == 0.0
    assert out["metadata"]["parse_errors"] == 1 and env.state.turns == 1
    parts = out["observations"][0]["content"]
    assert "Invalid answer" in parts[1]["text"]
    before = msgs[-1]["content"][0]["image_url"]["url"]
    assert parts[0]["image_url"]["url"] == before  # same position, same trail


def test_multiple_moves_per_turn(maze):
    env = make_env(maze, EnvConfig(moves_per_turn=3))
    env.init()
    s = rules.initial(maze)
    moves = []
    for _ in range(3):
        a = optimal_action(maze, s.pos)
        if a is None:
            break
        moves.append(a)
        s = rules.transition(s, [a])
    out = env.step(format_action(*moves))
    assert out["metadata"]["position"] == list(s.pos) and env.state.turns == 1


def test_episode_determinism_same_seed(maze):
    from rlkit.episodes.policies import scripted_policy
    from rlkit.episodes.rollout import run_episodes

    def digest():
        trajs = run_episodes(scripted_policy("eps-oracle:0.5"), pinned_set()[:8], samples=3, seed=7)
        return hashlib.sha256("".join(t.to_json() for t in trajs).encode()).hexdigest()

    assert digest() == digest()


def test_aggregate_metrics():
    agg = MazeEnv.aggregate_metrics([{"solved": 1.0, "turns": 2.0}, {"solved": 0.0, "turns": 12.0}])
    assert agg == {"solve_rate": 0.5, "turns_mean": 7.0}


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"max_turns": 0}, "max_turns"),
        ({"observation": "video"}, "observation"),
        ({"parser": "lenient"}, "parser"),
        ({"moves_per_turn": 0}, "moves_per_turn"),
        ({"colour": "red"}, "unknown env config keys"),
        ({"cell_px": 1}, "cell_px"),
    ],
)
def test_bad_config_says_what_to_fix(cfg, match, maze):
    with pytest.raises(UsageError, match=match):
        MazeEnv(cfg, {"maze": maze.to_dict()})


def test_missing_maze_in_extras():
    with pytest.raises(UsageError, match="extra_info.maze"):
        MazeEnv({}, {})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=60), min_size=1, max_size=14))
def test_env_never_raises_on_any_model_text(texts):
    env = make_env(pinned_set()[0], EnvConfig(max_turns=12, observation="text"))
    env.init()
    for t in texts:
        out = env.step(t)
        assert out["reward"] in (0.0, 1.0)
        if out["done"]:
            break
    assert env.state.turns <= 12
    assert np.isfinite(env.get_metrics()["turns"])


def test_rows_carry_their_env_and_sets_have_their_own_task(tmp_path):
    from rlkit.env.data import read_rows, write_datasets
    from rlkit.env.maze_env import env_for_set

    _, evals = write_datasets(tmp_path, 4, eval_set="test-large")
    row = read_rows(evals)[0]
    env = MazeEnv({}, {k: v for k, v in row.items() if k != "prompt"})
    assert env.cfg == env_for_set("test-large") and env.max_turns == 24
    assert env.cfg.style.view == "full"
    # SkyRL's env_config still wins over the row
    env = MazeEnv({"max_turns": 5}, {k: v for k, v in row.items() if k != "prompt"})
    assert env.max_turns == 5 and env.cfg.style.cell_px == 64
    with pytest.raises(UsageError, match="no env config"):
        env_for_set("nope")


def test_test_large_images_reach_qwen3vl_unresized_with_cells_on_token_edges():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    from rlkit.env.maze_env import QWEN3VL_IMAGE, env_for_set, make_env
    from rlkit.maze.render import image_from_data_uri
    from rlkit.maze.sets import pinned_set

    cfg = env_for_set("test-large")
    maze = pinned_set("test-large")[0]
    first, _ = make_env(maze, cfg).init()
    (part,) = [p for p in first[-1]["content"] if p["type"] == "image_url"]
    w, h = image_from_data_uri(part["image_url"]["url"]).size
    q = QWEN3VL_IMAGE
    token_px = q["patch"] * q["merge"]
    resized = smart_resize(
        h, w, factor=token_px, min_pixels=q["min_pixels"], max_pixels=q["max_pixels"]
    )
    assert resized == (h, w) == (maze.height * cfg.style.cell_px, maze.width * cfg.style.cell_px)
    assert cfg.style.cell_px % token_px == 0  # every cell edge on a merged-token edge
