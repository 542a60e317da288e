import json
import math

import pytest

from rlkit.env.maze_env import EnvConfig
from rlkit.episodes.evaluate import EvalResult, compare, evaluate
from rlkit.episodes.failures import classify
from rlkit.episodes.policies import Response, scripted_policy
from rlkit.episodes.rollout import (
    Trajectory,
    episode_rngs,
    history_window,
    load_trajectories,
    play_episode,
    replay_states,
    run_episodes,
    save_trajectories,
    turn_prompts,
)
from rlkit.errors import UsageError
from rlkit.maze.core import Action
from rlkit.maze.parsing import format_action
from rlkit.maze.sets import pinned_set
from rlkit.stats import (
    CI_METHOD,
    FLAT_CI_METHOD,
    clopper_pearson,
    maze_interval,
    pass_at_k,
    wilson,
)


def test_wilson_hand_computed():
    # p=0.5, n=10, z=1.96: centre 0.5, half = 1.96*sqrt(0.025+0.0096)/1.38416 = 0.2634
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-3) and hi == pytest.approx(0.7634, abs=1e-3)
    # 28/64 (the reference baseline): [0.3229, 0.5599]
    lo, hi = wilson(28, 64)
    assert lo == pytest.approx(0.3229, abs=1e-3) and hi == pytest.approx(0.5599, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0)


def test_pass_at_k_hand_computed():
    # n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert pass_at_k(4, 1, 2) == 0.5
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 3, 2) == 1.0
    assert pass_at_k(8, 2, 1) == pytest.approx(0.25)
    with pytest.raises(UsageError):
        pass_at_k(2, 1, 3)


def test_an_eval_on_the_first_mazes_of_a_set_scores_exactly_those():
    result, trajs = evaluate(scripted_policy("oracle"), samples=1, n_mazes=4)
    first = pinned_set("test")[:4]
    assert result.n_mazes == 4 and [t.maze_obj.content_hash for t in trajs] == [
        m.content_hash for m in first
    ]
    with pytest.raises(UsageError, match=r"n_mazes \(65\) must be 1..64"):
        evaluate(scripted_policy("oracle"), n_mazes=65)


def test_oracle_solves_every_test_maze_and_json_schema(tmp_path):
    result, trajs = evaluate(scripted_policy("oracle"), samples=2)
    assert result.solve_rate == 1.0 and result.n_mazes == 64 and result.samples == 2
    d = json.loads(json.dumps(result.to_dict()))
    for key in (
        "policy",
        "set",
        "n_mazes",
        "samples",
        "solve_rate",
        "ci95",
        "test_set_hash",
        "pass_at_k",
        "failures",
    ):
        assert key in d
    path = result.save(tmp_path / "oracle.json", trajs)
    again = EvalResult.load(path)
    assert again.flat == result.flat
    assert len(again.load_trajectories(path)) == 128


def test_intervals_are_clustered_by_maze_overall_and_by_path_length():
    result, _ = evaluate(scripted_policy("eps-oracle:0.5"), samples=4, seed=2)
    assert result.ci_method == CI_METHOD == result.to_dict()["ci_method"]
    assert result.ci95 == maze_interval(result.episodes)
    flat = wilson(sum(result.flat), len(result.flat))
    assert result.ci95[1] - result.ci95[0] > flat[1] - flat[0]  # this policy's mazes differ
    for n, cell in result.by_path_length.items():
        mazes = [m["solved"] for m in result.per_maze if str(m["path_length"]) == n]
        assert cell["mazes"] == len(mazes) and cell["episodes"] == 4 * len(mazes)
        assert tuple(cell["ci95"]) == maze_interval(mazes)
    one, _ = evaluate(scripted_policy("eps-oracle:0.5"), samples=1, seed=2)
    assert one.ci95 == wilson(sum(one.flat), 64)  # k = 1: Wilson exactly


def test_old_eval_json_without_ci_method_reads_with_intervals_redone():
    result, _ = evaluate(scripted_policy("eps-oracle:0.5"), samples=4, seed=2)
    old = result.to_dict()
    del old["ci_method"]
    old["ci95"] = list(wilson(sum(result.flat), len(result.flat)))  # what old files hold
    for cell in old["by_path_length"].values():
        del cell["mazes"]
        cell["ci95"] = [0.4, 0.6]
    again = EvalResult.from_dict(old)
    assert again.ci_method == CI_METHOD and again.ci95 == result.ci95
    assert again.by_path_length == result.by_path_length
    bare = {**old, "per_maze": []}  # nothing to redo them from: kept, and named for what they are
    legacy = EvalResult.from_dict(bare)
    assert legacy.ci_method == FLAT_CI_METHOD and list(legacy.ci95) == old["ci95"]
    assert FLAT_CI_METHOD in legacy.summary()


def test_random_lands_near_expected_rate():
    # Monte-Carlo estimate of a uniformly random walker, 12 turns, on the test family: ~0.21.
    result, _ = evaluate(scripted_policy("random"), samples=16, seed=1)
    assert 0.14 < result.solve_rate < 0.28
    assert sum(result.failures.values()) == round((1 - result.solve_rate) * 64 * 16)


def test_scripted_results_identical_batched_vs_plain_loop():
    mazes = pinned_set()[:10]
    policy = scripted_policy("eps-oracle:0.4")
    batched = run_episodes(policy, mazes, samples=1, seed=3)
    rngs = episode_rngs(3, len(mazes))
    plain = [play_episode(policy, m, rng=r) for m, r in zip(mazes, rngs, strict=True)]
    assert [t.turns for t in batched] == [t.turns for t in plain]
    assert [t.reward for t in batched] == [t.reward for t in plain]


def test_per_maze_turn_budgets_end_episodes_and_travel_with_their_trajectories(tmp_path):
    mazes, budgets = pinned_set()[:6], [1, 2, 3, 4, 5, 6]
    cfg = EnvConfig(prompt_style="full")  # its prompt says how many turns are left
    trajs = run_episodes(scripted_policy("random"), mazes, cfg, samples=3, max_turns=budgets)
    for t in trajs:
        budget = budgets[t.maze_index]
        assert t.max_turns == budget and len(t.turns) <= budget
        assert t.solved or (t.truncated and len(t.turns) == budget)
    assert any(t.truncated and len(t.turns) < 12 for t in trajs)  # the budget, not the env's
    (back,) = load_trajectories(save_trajectories(tmp_path / "t.jsonl", trajs[-1:]))
    assert back.max_turns == 6
    shown = [m[-1]["content"][1]["text"] for m in turn_prompts(back, cfg)]
    assert shown[0] == "Turns left: 6. Your move?" and len(shown) == len(back.turns)
    plain = run_episodes(scripted_policy("random"), mazes[:1], cfg)
    assert plain[0].max_turns == cfg.max_turns
    with pytest.raises(UsageError, match="6 turn budgets for 5 mazes"):
        run_episodes(scripted_policy("random"), mazes[:5], cfg, max_turns=budgets)


def test_replay_rebuilds_every_state(tmp_path):
    trajs = run_episodes(scripted_policy("eps-oracle:0.5"), pinned_set()[:4], samples=2, seed=0)
    loaded = load_trajectories(save_trajectories(tmp_path / "t.jsonl", trajs))
    for t in loaded:
        states = replay_states(t)
        assert [s.pos for s in states[1:]] == [tuple(turn.pos_after) for turn in t.turns]
        assert (states[-1].pos == states[0].maze.exit) == t.solved


def test_compare_checks_pairing():
    a, _ = evaluate(scripted_policy("random"), samples=1, seed=0)
    b, _ = evaluate(scripted_policy("oracle"), samples=1, seed=0)
    r = compare(a, b)
    assert r.b_better > 30 and r.a_better == 0 and r.p_value < 1e-6
    assert r.verdict("random", "oracle").startswith("oracle is better than random by")
    c, _ = evaluate(scripted_policy("oracle"), samples=2)
    with pytest.raises(UsageError, match="same test set"):
        compare(a, c)


class _Fixed:
    name = "fixed"

    def __init__(self, texts):
        self.texts = texts

    def act(self, states, messages, rngs):
        return [Response(self.texts[s.turns % len(self.texts)]) for s in states]


def test_failure_taxonomy_kinds():
    maze = pinned_set()[0]

    def one(texts):
        (t,) = run_episodes(_Fixed(texts), [maze])
        return classify(t)

    assert one(["what?"]) == "format_error"
    blocked = next(a for a in Action if not maze.can_move(maze.start, a))
    assert one([format_action(blocked)]) == "wall_bump"
    fwd = next(a for a in Action if maze.can_move(maze.start, a))
    back = {
        Action.UP: Action.DOWN,
        Action.DOWN: Action.UP,
        Action.LEFT: Action.RIGHT,
        Action.RIGHT: Action.LEFT,
    }
    assert one([format_action(fwd), format_action(back[fwd])]) in ("loop", None)
    oracle = scripted_policy("oracle")
    (solved,) = run_episodes(oracle, [maze])
    assert classify(solved) is None


def test_history_window():
    msgs = [{"role": "system", "content": "s"}]
    for i in range(3):
        msgs += [{"role": "user", "content": f"o{i}"}, {"role": "assistant", "content": f"a{i}"}]
    msgs.append({"role": "user", "content": "o3"})
    assert [m["content"] for m in history_window(msgs, 1)] == ["s", "o3"]
    assert [m["content"] for m in history_window(msgs, 2)] == ["s", "o2", "a2", "o3"]
    assert history_window(msgs, None) == msgs
    with pytest.raises(UsageError):
        history_window(msgs, 0)


def test_trajectory_file_errors(tmp_path):
    with pytest.raises(UsageError, match="no trajectory file"):
        load_trajectories(tmp_path / "none.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(UsageError, match="bad.jsonl:1"):
        load_trajectories(bad)
    assert math.isclose(Trajectory({}, 0, 0).reward, 0.0)


def test_the_seeds_protocol_prints_its_count_with_the_exact_interval(capsys):
    from rlkit.cli.main import main as rlkit_main

    # eps-oracle: greedy does not apply to a scripted policy; the protocol is the count
    result, _ = evaluate(
        scripted_policy("eps-oracle:0.5"), samples=1, mode="greedy", protocol="seed"
    )
    solved = sum(result.flat)
    lo, hi = clopper_pearson(solved, 64)
    assert result.protocol == "seed" and result.exact_ci95 == (lo, hi)
    assert result.headline == f"{solved}/64 = {solved / 64:.2%} [{lo:.1%}, {hi:.1%}]"
    d = result.to_dict()
    assert d["exact_ci_method"] == "clopper-pearson" and d["headline"] == result.headline
    again = EvalResult.from_dict(json.loads(json.dumps(d)))
    assert again.exact_ci95 == result.exact_ci95 and again.headline == result.headline
    # rlkit's own protocol beside it: k samples, clustered interval, no exact one
    sampled, _ = evaluate(scripted_policy("eps-oracle:0.5"), samples=2)
    assert sampled.protocol == "rlkit" and sampled.exact_ci95 is None and sampled.headline is None
    for bad in ({"samples": 2}, {"n_mazes": 8}, {"mode": "sampled"}):
        kw = {"samples": 1, "mode": "greedy", **bad}
        with pytest.raises(UsageError, match="seed's protocol is every maze"):
            evaluate(scripted_policy("oracle"), protocol="seed", **kw)
    assert rlkit_main(["eval", "--policy", "oracle", "--protocol", "seed"]) == 0
    out = capsys.readouterr().out
    assert "64/64 = 100.00% [94.4%, 100.0%]" in out and "seed's protocol" in out


def test_the_seeds_28_of_64_reads_as_the_seed_wrote_it():
    per_maze = [
        {"index": i, "hash": "", "path_length": 2, "junctions": 0, "solved": [i < 28]}
        for i in range(64)
    ]
    r = EvalResult(
        policy="p",
        set="visgym-easy",
        n_mazes=64,
        samples=1,
        solve_rate=28 / 64,
        ci95=maze_interval([m["solved"] for m in per_maze]),
        ci_method=CI_METHOD,
        test_set_hash="",
        per_maze=per_maze,
        mode="greedy",
        protocol="seed",
        exact_ci95=clopper_pearson(28, 64),
    )
    assert r.headline == "28/64 = 43.75% [31.4%, 56.7%]"
