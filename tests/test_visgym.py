"""VisGym's maze_2d as rlkit's squares game: pinned sets, rules, picture, env, baselines.

The ground truth below was recorded once from VisGym's own code (github visgym/VisGym at
0289034, `gymnasium.make("maze_2d/easy" | "maze_2d/hard").reset(seed=i)`, its `maze_map`,
`_agent_location`, `_target_location` and `render()` frames); all 128 mazes (seeds 0..63, both
sizes) and 19 frames of a played episode matched rlkit square for square and pixel for pixel,
and the pinned hashes below are of that ground truth. The suite does not need VisGym.
"""

import json

import numpy as np
import pytest

from rlkit.cli.main import main
from rlkit.env.maze_env import SET_ENV, EnvConfig, MazeEnv, env_for_set
from rlkit.episodes.evaluate import evaluate
from rlkit.episodes.failures import SQUARE_KINDS, classify
from rlkit.episodes.policies import Response, scripted_policy
from rlkit.episodes.rollout import Trajectory, play_episode, replay_states, run_episodes
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import STOP, Action, Maze, difficulty
from rlkit.maze.parsing import VISGYM_MAX_CHARS, parse_actions
from rlkit.maze.render import disc_mask, image_from_data_uri, render_array, to_ascii
from rlkit.maze.sets import TRAIN_SEED_BASE, pinned_set, pinned_set_hash, pinned_spec, train_mazes

EASY_HASH = "77603d3d07ddd54ec92c199cb7b9c377a1d936fc5f58c3e3c5b3248184e37d4a"
HARD_HASH = "f109157ab283c81ab421ec6d9d4b5812f628a491975fee0a483f60a2896d8c77"

# VisGym's maze_map (# = 1), A = _agent_location, T = _target_location, as recorded
VISGYM = {
    ("visgym-easy", 0): """\
#########
#.#.#.#T#
#.#.#.#.#
#.......#
###.#####
#.......#
###.###.#
#A..#...#
#########""",
    ("visgym-easy", 1): """\
#########
#...#..T#
###.#.###
#.#.....#
#.#.###.#
#.#...#.#
#.###.#.#
#A....#.#
#########""",
    ("visgym-hard", 0): """\
###########
#...#....T#
#.###.#####
#.#.......#
#.#.#######
#...#.....#
#.#######.#
#.......#.#
#.###.###.#
#A..#.....#
###########""",
}
STYLE = SET_ENV["visgym-easy"].style
BLUE, RED, GRAY, WHITE = (0, 0, 255), (255, 0, 0), (169, 169, 169), (255, 255, 255)


def test_pinned_sets_are_visgyms():
    assert pinned_set_hash("visgym-easy") == EASY_HASH
    assert pinned_set_hash("visgym-hard") == HARD_HASH
    for (name, seed), text in VISGYM.items():
        maze = pinned_set(name)[seed]  # verifies the set's pinned hash too
        assert to_ascii(rules.initial(maze)) == text, (name, seed)
        assert maze.game == "squares" and maze.seed == seed and maze.algorithm == "visgym"


def test_visgym_seeding_is_numpys_default_rng():
    """gymnasium's np_random(s) is Generator(PCG64(SeedSequence(s))): default_rng(s) exactly."""
    for s in (0, 7, 63):
        ref = np.random.Generator(np.random.PCG64(np.random.SeedSequence(s)))
        assert ref.integers(2**32) == np.random.default_rng(s).integers(2**32)


def test_path_lengths_and_budgets():
    easy = [difficulty(m).path_length for m in pinned_set("visgym-easy")]
    hard = [difficulty(m).path_length for m in pinned_set("visgym-hard")]
    assert (min(easy), max(easy)) == (12, 16)
    assert (min(hard), max(hard)) == (16, 32)
    assert sum(n + 1 <= 18 for n in hard) == 35  # 18 turns would leave 29 of 64 unsolvable
    assert [i for i, n in enumerate(hard) if n + 1 > 30] == [21]
    assert env_for_set("visgym-easy").max_turns == 18
    assert env_for_set("visgym-hard").max_turns == 30


def test_training_stream_is_disjoint_squares():
    spec = pinned_spec("visgym-easy")
    test = set(pinned_set("visgym-easy"))
    train = train_mazes(spec, 0, 40)
    assert all(m.game == "squares" and m.seed >= TRAIN_SEED_BASE for m in train)
    assert not test & set(train) and len(set(train)) > 30


def test_spec_round_trip_and_cell_specs_unchanged():
    maze = pinned_set("visgym-hard")[3]
    d = maze.to_dict()
    assert Maze.from_dict(d) == maze and Maze.from_dict(maze.to_json()) == maze
    assert "squares" not in pinned_set("test")[0].to_dict()
    with pytest.raises(UsageError, match="hash"):
        Maze.from_dict({**d, "squares": d["squares"].replace("#.", "..", 1)})
    with pytest.raises(UsageError, match="wall square"):
        Maze(None, (0, 0), (1, 1), squares=np.zeros((3, 3), bool) | np.eye(3, dtype=bool))


# ---------------------------------------------------------------- rules


def test_rules_one_square_walls_and_stop():
    maze = pinned_set("visgym-easy")[0]  # agent (7, 1), target (1, 7); see VISGYM above
    s = rules.initial(maze)
    s = rules.transition(s, [Action.DOWN])  # a wall square: no move
    assert s.pos == (7, 1) and s.bumps == 1 and s.turns == 1
    s = rules.transition(s, [Action.RIGHT])
    assert s.pos == (7, 2) and s.moves == 2
    assert not rules.terminal(s) and rules.reward(s) == 0.0
    off = rules.transition(s, [STOP])
    assert rules.terminal(off) and not rules.solved(off) and rules.reward(off) == 0.0
    assert rules.transition(off, [Action.LEFT]) == off  # over is over


def test_reaching_the_target_is_not_enough():
    maze = pinned_set("visgym-easy")[0]
    s = rules.initial(maze)
    while s.pos != maze.exit:
        s = rules.transition(s, [rules.best_move(s)])
    assert s.turns == 12 and not rules.terminal(s) and rules.reward(s) == 0.0
    assert rules.best_move(s) is STOP
    done = rules.transition(s, [STOP])
    assert rules.solved(done) and rules.reward(done) == 1.0 and done.turns == 13
    assert rules.truncated(rules.transition(s, [Action.LEFT]), max_turns=13)


# ---------------------------------------------------------------- picture


def test_picture_is_visgyms():
    maze = pinned_set("visgym-easy")[0]
    img = render_array(rules.initial(maze), STYLE)
    assert img.shape == (225, 225, 3)
    assert render_array(rules.initial(pinned_set("visgym-hard")[0]), STYLE).shape == (275, 275, 3)
    assert tuple(img[0, 0]) == GRAY and tuple(img[3 * 25 + 5, 2 * 25 + 5]) == WHITE
    assert (img[25:50, 175:200] == RED).all()  # target square (1, 7), no agent on it
    agent = img[175:200, 25:50]  # square (7, 1): a white square with a blue disc
    assert (agent == BLUE).all(-1).sum() == 104 == disc_mask(25).sum()
    assert tuple(agent[12, 12]) == BLUE and tuple(agent[0, 0]) == WHITE
    rows = (agent == BLUE).all(-1).sum(1)  # pygame's disc: 12 rows, 4..12 pixels wide
    assert rows[6:18].tolist() == [4, 6, 8, 10, 12, 12, 12, 12, 10, 8, 6, 4]
    assert set(map(tuple, img.reshape(-1, 3))) == {BLUE, RED, GRAY, WHITE}


def test_leaving_the_target_leaves_a_white_disc_as_visgym_does():
    maze = pinned_set("visgym-easy")[0]
    s = rules.initial(maze)
    while s.pos != maze.exit:
        s = rules.transition(s, [rules.best_move(s)])
    on = render_array(s, STYLE)[25:50, 175:200]
    assert (on == BLUE).all(-1).sum() == 104
    s = rules.transition(s, [Action.DOWN])
    target = render_array(s, STYLE)[25:50, 175:200]
    assert (target == WHITE).all(-1).sum() == 104 and (target == RED).all(-1).sum() == 625 - 104


def test_qwen3vl_processor_sizes():
    """What Qwen3-VL's processor (patch 16, merge 2, min 65,536 px) makes of the pictures."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    for side, resized, tokens in ((225, 256, 64), (275, 288, 81)):
        h, w = smart_resize(side, side, factor=32, min_pixels=65536, max_pixels=16777216)
        assert (h, w) == (resized, resized)
        assert (h // 16) * (w // 16) // 4 == tokens


# ---------------------------------------------------------------- env


def _env(seed=0, name="visgym-easy"):
    return MazeEnv(env_for_set(name), {"maze": pinned_set(name)[seed]})


def _image(msg):
    return next(p["image_url"]["url"] for p in msg["content"] if p["type"] == "image_url")


def _text(msg):
    return next(p["text"] for p in msg["content"] if p["type"] == "text")


def test_env_api_feedback_and_render_smoke():
    env = _env()
    conv, meta = env.init()
    assert [m["role"] for m in conv] == ["system", "user"]
    rules_text = conv[0]["content"]
    for fact in ("9x9", "Gray", "blue circle", "red square", "stop", "<action>ACTION</action>"):
        assert fact in rules_text
    assert image_from_data_uri(_image(conv[1])).size == (225, 225)
    assert "Turns left: 18" in _text(conv[1]) and meta["solved"] is False
    out = env.step("The wall is below me. <action>down</action>")
    assert not out["done"] and out["reward"] == 0.0
    assert out["metadata"]["feedback"] in _text(out["observations"][0])
    assert "into a wall" in out["metadata"]["feedback"] and out["metadata"]["wall_bumps"] == 1
    out = env.step("<action>RIGHT</action>")
    assert out["metadata"]["feedback"] == "You moved right." and env.state.pos == (7, 2)
    assert "You moved right." in _text(out["observations"][0])
    assert set(env.get_metrics()) >= {"solved", "turns", "wall_bumps", "parse_errors"}


def test_env_same_answers_same_observations():
    answers = ["<action>right</action>", "<action>up</action>", "nonsense", "<action>left</action>"]
    a, b = _env(5), _env(5)
    obs_a = [a.init()[0]] + [a.step(t)["observations"] for t in answers]
    obs_b = [b.init()[0]] + [b.step(t)["observations"] for t in answers]
    assert obs_a == obs_b


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("<action>jump</action>", "unknown action"),
        ("('move', 0)", "tuple"),
        ("", "empty answer"),
        ("   \n", "empty answer"),
        ("x" * (VISGYM_MAX_CHARS + 1) + "<action>up</action>", "longer than"),
        ("I would go up.", "no <action> tag"),
        (None, "not text"),
    ],
)
def test_bad_answers_cost_the_turn_and_get_feedback(answer, reason):
    env = _env()
    first = _image(env.init()[0][-1])
    out = env.step(answer)  # never raises
    assert not out["done"] and out["reward"] == 0.0
    assert reason in out["metadata"]["parse_error"] and reason in out["metadata"]["feedback"]
    obs = out["observations"][0]
    assert _image(obs) == first and "<action>ACTION</action>" in _text(obs)
    assert env.state.turns == 1 and env.state.parse_errors == 1


def test_parser_reads_skyrls_format():
    assert parse_actions("Think... <action>up</action> <action> Stop </action>", "visgym") == (
        [STOP],
        None,
    )
    assert parse_actions("<action>left</action><action>fly</action>", "visgym")[0] == []
    assert parse_actions("<action>stop</action>", "relaxed")[0] == []  # cells: no stop


def test_visgym_parser_refuses_cell_mazes():
    with pytest.raises(UsageError, match="stop"):
        MazeEnv(EnvConfig(parser="visgym"), {"maze": pinned_set("test")[0]})


# ---------------------------------------------------------------- episodes


class _Scripted:
    """Answers from a per-state rule: the tests' small fakes for failure kinds."""

    def __init__(self, name, rule):
        self.name, self.rule = name, rule

    def act(self, states, messages, rngs):
        return [Response(self.rule(s)) for s in states]


def test_stop_off_target_ends_unsolved_and_says_so():
    policy = _Scripted("stopper", lambda s: "<action>stop</action>")
    traj = play_episode(policy, pinned_set("visgym-easy")[0], env_for_set("visgym-easy"), rng=None)
    assert len(traj.turns) == 1 and traj.terminated and not traj.truncated
    assert traj.reward == 0.0 and not traj.solved
    assert "off the target" in traj.turns[0].note
    assert classify(traj) == "stopped_off_target"
    back = Trajectory.from_dict(json.loads(traj.to_json()))
    assert back.turns[0].note == traj.turns[0].note and replay_states(back)[-1].stopped


def test_never_stopping_on_the_target_is_its_own_failure():
    def walker(s):
        move = rules.best_move(s)
        return f"<action>{'left' if move is STOP else move.word}</action>"

    traj = play_episode(
        _Scripted("walker", walker),
        pinned_set("visgym-easy")[0],
        env_for_set("visgym-easy"),
        rng=None,
    )
    assert traj.truncated and not traj.terminated and len(traj.turns) == 18
    assert classify(traj) == "never_stopped"


def test_oracle_solves_all_easy_mazes():
    result, trajs = evaluate(scripted_policy("oracle"), set_name="visgym-easy")
    assert result.solve_rate == 1.0 and result.n_mazes == 64
    assert list(result.failures) == list(SQUARE_KINDS)
    assert all(t.turns[-1].actions == ["stop"] and t.terminated for t in trajs)
    assert [len(t.turns) - 1 for t in trajs] == [
        difficulty(m).path_length for m in pinned_set("visgym-easy")
    ]


def test_baselines_on_squares():
    mazes = pinned_set("visgym-hard")[:8]
    cfg = env_for_set("visgym-hard")
    random = run_episodes(scripted_policy("random"), mazes, cfg, samples=4, seed=1)
    words = {a for t in random for turn in t.turns for a in turn.actions}
    assert words == {"up", "down", "left", "right", "stop"}  # the five actions, stop included
    assert all(turn.move_probs is None for t in random for turn in t.turns)
    assert sum(t.solved for t in random) == 0
    eps = run_episodes(scripted_policy("eps-oracle:0.1"), mazes, cfg, samples=4, seed=1)
    assert 0.3 < np.mean([t.solved for t in eps]) < 1.0
    zero = run_episodes(scripted_policy("eps-oracle:0"), mazes, cfg)
    assert all(t.solved for t in zero)


def test_cli_eval_maze_and_data(tmp_path, capsys):
    assert main(["eval", "--set", "visgym-easy", "--policy", "oracle", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["solve_rate"] == 1.0 and out["test_set_hash"] == EASY_HASH
    assert (
        main(["maze", "--set", "visgym-easy", "--seed", "1", "--png", str(tmp_path / "m.png")]) == 0
    )
    assert VISGYM[("visgym-easy", 1)] in capsys.readouterr().out
    assert main(["data", "--set", "visgym-easy", "--out", str(tmp_path / "d"), "--train", "4"]) == 0
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["test_set_hash"] == EASY_HASH and manifest["env_config"]["parser"] == "visgym"


def test_replays_play_a_squares_episode():
    """Replays (frames, move bars, rollouts' chosen-move odds) take `stop` and its notes."""
    from rlkit.cli.rollouts import p_chosen
    from rlkit.notebook.player import move_bars, replay_frames

    (traj,) = run_episodes(
        scripted_policy("oracle"), pinned_set("visgym-easy")[:1], env_for_set("visgym-easy")
    )
    frames = replay_frames(traj, STYLE)
    assert len(frames) == len(traj.turns) + 1 == 14
    bars = move_bars(traj)
    assert bars[-2].chosen is None and bars[0].chosen == Action.RIGHT.value
    traj.turns[-1].move_probs = (0.1, 0.2, 0.3, 0.4)  # a model's odds on a `stop` turn
    assert p_chosen(traj.turns[-1]) is None
    assert traj.turns[-1].note == "You stopped on the red target square: solved."


def test_skyrl_dumps_count_solved_by_the_same_rule():
    """A SkyRL eval dump of squares episodes: the game's verdict on the replay decides solved,
    SkyRL's reward agrees (no warning), and a `stop` off the target is classified from the
    replay."""
    import warnings

    from rlkit.env.data import build_rows
    from rlkit.run.skyrl_dumps import EvalEpisode, episodes_to_result

    cfg = env_for_set("visgym-easy")
    _, rows = build_rows(
        n_train=1, spec=pinned_spec("visgym-easy"), eval_set="visgym-easy", cfg=cfg, n_eval=2
    )
    oracle = run_episodes(scripted_policy("oracle"), pinned_set("visgym-easy")[:1], cfg)[0]
    plays = [([t.text for t in oracle.turns], 1.0), (["<action>stop</action>"], 0.0)]
    episodes = [
        EvalEpisode(
            maze=Maze.from_dict(row["extra_info"]["maze"]).to_dict(),
            maze_index=i,
            maze_hash="",
            data_source=row["data_source"],
            reward=reward,
            solved=reward > 0,
            responses=answers,
            stop_reason="stop",
            max_turns=18,
            extras={"extra_info": row["extra_info"]},
        )
        for i, (row, (answers, reward)) in enumerate(zip(rows, plays, strict=True))
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = episodes_to_result(episodes, step=0, policy="skyrl")
    assert result.solve_rate == 0.5 and result.set == "visgym-easy"
    assert result.failures["stopped_off_target"] == 1


def test_skyrl_training_rows_hold_only_mazes_an_episode_can_solve():
    from rlkit.env.data import build_rows

    cfg = env_for_set("visgym-easy")
    train, _ = build_rows(
        n_train=40, spec=pinned_spec("visgym-easy"), eval_set="visgym-easy", cfg=cfg
    )
    lengths = [row["extra_info"]["path_length"] for row in train]
    assert len(train) == 40 and max(lengths) + 1 <= cfg.max_turns  # moves and the closing stop
    assert (
        max(difficulty(m).path_length for m in train_mazes(pinned_spec("visgym-easy"), 0, 40)) > 17
    )
