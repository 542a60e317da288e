"""Per-turn move probabilities: recorded by every policy that knows them, stored with the
trajectories, drawn as four bars in the replay player and checkpoint diffs."""

from __future__ import annotations

import html
import json
import math
import re

import numpy as np
import pytest
import torch

from rlkit.env.maze_env import EnvConfig, make_env
from rlkit.episodes.evaluate import evaluate
from rlkit.episodes.policies import UNIFORM, EpsOraclePolicy, Response, scripted_policy
from rlkit.episodes.rollout import (
    episode_rngs,
    history_window,
    load_trajectories,
    run_episodes,
    save_trajectories,
)
from rlkit.errors import UsageError
from rlkit.maze.core import Action, optimal_action
from rlkit.maze.generation import generate
from rlkit.maze.parsing import format_action
from rlkit.maze.rules import initial
from rlkit.maze.sets import pinned_set
from rlkit.model.action_tag import move_choices
from rlkit.model.build import build_tiny
from rlkit.model.load import load
from rlkit.model.policy import ModelPolicy
from rlkit.notebook.player import (
    EPISODE_OVER,
    NO_PROBS,
    bars_html,
    checkpoint_diff,
    disagreement,
    first_disagreement,
    replay,
)
from rlkit.notebook.workbench import RunReplays
from rlkit.run.skyrl_dumps import EvalEpisode, to_trajectory

MAZE = generate(4, 4, seed=3)
SHORT = EnvConfig(max_turns=4)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny batches: spinning OpenMP threads stall a shared machine
    yield load(build_tiny(tmp_path_factory.mktemp("tiny"), seed=0))
    torch.set_num_threads(threads)


def _data(page: str) -> list[dict]:
    m = re.search(r"<script type='application/json' class='rlkit-data'>(.*?)</script>", page)
    assert m, "no data script"
    return json.loads(m.group(1))


class Fixed:
    """Plays `moves` (then up) and says it was `probs` sure of each: known turns and bars."""

    name = "fixed"

    def __init__(self, moves, probs):
        self.moves, self.probs = list(moves), probs

    def act(self, states, messages, rngs):
        a = self.moves.pop(0) if self.moves else Action.UP
        return [Response(format_action(a), move_probs=self.probs) for _ in states]


def test_scripted_policies_record_the_distribution_they_draw_from():
    state = initial(MAZE)
    best = optimal_action(MAZE, state.pos)
    n = 4000
    rngs = episode_rngs(7, n)
    eps = EpsOraclePolicy(0.4).act([state] * n, [[]] * n, rngs)
    # eps/4 on each move, plus 1-eps on the oracle's: 0.1 three times and 0.7
    expected = [0.1, 0.1, 0.1, 0.1]
    expected[best] = 0.7
    assert all(r.move_probs == pytest.approx(expected) for r in eps)
    drawn = np.bincount([Action[r.text[8:-9].upper()] for r in eps], minlength=4) / n
    assert drawn == pytest.approx(expected, abs=4 * math.sqrt(0.7 * 0.3 / n))
    (oracle,) = scripted_policy("oracle").act([state], [[]], episode_rngs(0, 1))
    assert oracle.move_probs == tuple(float(a == best) for a in Action)
    randoms = scripted_policy("random").act([state] * n, [[]] * n, rngs)  # one state per rng
    assert len(randoms) == n and all(r.move_probs == UNIFORM for r in randoms)


def test_probabilities_round_trip_through_jsonl_and_old_files_load(tmp_path):
    trajs = run_episodes(scripted_policy("eps-oracle:0.3"), [MAZE], samples=3, seed=1)
    path = save_trajectories(tmp_path / "t.jsonl", trajs)
    back = load_trajectories(path)
    for t, b in zip(trajs, back, strict=True):
        for u, v in zip(t.turns, b.turns, strict=True):
            assert isinstance(v.move_probs, tuple) and sum(v.move_probs) == pytest.approx(1.0)
            assert v.move_probs == pytest.approx(u.move_probs, abs=5e-5)  # stored to 4 places
    # a file written before move probabilities existed: no key at all
    old = json.loads(trajs[0].to_json())
    for turn in old["turns"]:
        del turn["move_probs"]
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    (legacy,) = load_trajectories(tmp_path / "old.jsonl")
    assert all(u.move_probs is None for u in legacy.turns)
    assert legacy.turns[0].actions == trajs[0].turns[0].actions
    assert "move_probs" not in legacy.to_json()  # absent ones cost no bytes
    old["turns"][0]["move_probs"] = [0.5, 0.5]
    (tmp_path / "bad.jsonl").write_text(json.dumps(old) + "\n")
    with pytest.raises(UsageError, match=r"bad.jsonl:1 is not a trajectory record"):
        load_trajectories(tmp_path / "bad.jsonl")


def test_the_model_policy_records_the_distribution_its_move_is_sampled_from(loaded):
    maze = pinned_set()[0]
    pol = ModelPolicy(loaded, temperature=0.7)
    traj = run_episodes(pol, [maze], SHORT, seed=3)[0]
    for turn in traj.turns:
        k = Action[turn.actions[0].upper()]
        assert sum(turn.move_probs) == pytest.approx(1.0, abs=1e-6)
        # P(chosen) is the recorded log-probability of the sampled choice token
        assert math.log(turn.move_probs[k]) == pytest.approx(
            turn.logprobs[pol.answer.choice_pos], abs=1e-5
        )
    # one prompt answered 600 times with 600 seeds: the moves drawn follow the recorded odds
    n, state = 600, initial(maze)
    messages = history_window(make_env(maze, SHORT).init()[0], 1)
    out = ModelPolicy(loaded, temperature=2.0).act([state] * n, [messages] * n, episode_rngs(5, n))
    probs = out[0].move_probs
    assert all(r.move_probs == probs for r in out)
    drawn = np.bincount([Action[r.text[8:-9].upper()] for r in out], minlength=4) / n
    assert drawn == pytest.approx(probs, abs=4 * math.sqrt(0.25 / n))
    # greedy picks the likeliest move of the same distribution
    (greedy,) = ModelPolicy(loaded, greedy=True).act([state], [messages], episode_rngs(5, 1))
    assert Action[greedy.text[8:-9].upper()] == int(np.argmax(greedy.move_probs))


def test_free_answers_read_the_moves_odds_where_the_action_tag_opens(loaded):
    pol = ModelPolicy(loaded, constrained=False)
    tok = loaded.tokenizer

    def ids(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False)

    choices = list(move_choices(tok, ""))
    head = ids("I go <action>")  # text before the tag: found by text, not by the tag's ids
    logits = torch.zeros(len(head) + 3, 50_000)
    logits[len(head), choices] = torch.tensor([0.0, math.log(3.0), 0.0, 0.0])
    logits[len(head), 7] = 100.0  # another token's logit does not count: renormalised over four
    answer = [*head, choices[1], *ids("</action>")]
    assert pol._free_move_probs(answer, logits) == pytest.approx((1 / 6, 3 / 6, 1 / 6, 1 / 6))
    assert pol._free_move_probs(ids("left, I think"), logits) is None  # never opened the tag
    # two tags: the move the relaxed parser takes is the last tag's, so its odds are read there
    first = ids("<action>up</action> <action>")
    two = [*first, choices[3], *ids("</action>")]
    twice = torch.zeros(len(two), 50_000)
    twice[len(first), choices] = torch.tensor([0.0, 0.0, 0.0, math.log(4.0)])
    assert pol._free_move_probs(two, twice) == pytest.approx((1 / 7, 1 / 7, 1 / 7, 4 / 7))


def test_replays_draw_the_bars_per_turn():
    probs = (0.1, 0.2, 0.3, 0.4)
    traj = run_episodes(Fixed([Action.RIGHT, Action.DOWN], probs), [MAZE], SHORT)[0]
    shown = replay(traj)
    page = shown.to_html()
    first = page.split("class='rlkit-bars'", 1)[1].split("</div></div>", 1)[0]  # frame 1's
    assert ">40%<" in first and "font-weight:bold'>right</span>" in first
    assert EPISODE_OVER in bars_html(shown.panes[0].bars[-1])  # the end frame's
    (pane,) = _data(page)
    assert [b["p"] for b in pane["bars"][:-1]] == [list(probs)] * len(traj.turns)
    assert [b["c"] for b in pane["bars"][:-1]] == [3, 1, 0, 0]  # right, down, then up
    assert pane["bars"][-1] == {"p": None, "c": None, "n": EPISODE_OVER}
    assert page.count("class='rlkit-bar-fill'") == 4 and "function rlkitBars" in page
    assert "src=" not in first  # no assets
    # SkyRL's eval dumps hold answers, no move probabilities: the bars say none were recorded
    oracle = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    dumped = EvalEpisode(
        maze=MAZE.to_dict(),
        maze_index=0,
        maze_hash=MAZE.content_hash,
        data_source="maze",
        reward=1.0,
        solved=True,
        responses=[u.text for u in oracle.turns],
        stop_reason=None,
        max_turns=12,
    )
    bare = to_trajectory(dumped, 0, "skyrl")
    assert bare.solved and all(u.move_probs is None for u in bare.turns)
    page = replay(bare).to_html()
    assert NO_PROBS in page.split("<script", 1)[0]  # frame 1 as the page opens
    assert {b["n"] for b in _data(page)[0]["bars"][:-1]} == {NO_PROBS}


def test_checkpoint_diffs_say_where_the_two_disagreed_and_how_sure_each_was():
    a = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    wrong = Action.LEFT if a.turns[1].actions[0] != "left" else Action.RIGHT
    first = Action[a.turns[0].actions[0].upper()]
    b = run_episodes(Fixed([first, wrong], (0.05, 0.05, 0.62, 0.28)), [MAZE], SHORT)[0]
    assert first_disagreement(a, b) == 1  # turn 1 alike, turn 2 apart
    line = disagreement(a, b, ("step 40", "step 10"))
    move_a = a.turns[1].actions[0]
    assert line.startswith(f"Same move at turn 1; at turn 2, on cell {a.turns[1].pos_before}")
    assert f"step 40 chose {move_a} at 100%" in line
    if wrong == Action.LEFT:
        assert "step 10 chose left at 62% (next: right at 28%)" in line
    else:
        assert "step 10 chose right at 28% (likeliest: left at 62%)" in line
    diff = checkpoint_diff(a, b, labels=("step 40", "step 10"))
    page = diff.to_html()
    assert diff.note == line and "class='rlkit-disagreement'" in page
    assert html.escape(line) in page.split("class='rlkit-pane'", 1)[0]  # above the panes
    for pane, move in zip(diff.panes, (move_a, wrong.word), strict=True):
        assert f"font-weight:bold'>{move}</span>" in bars_html(pane.bars[1])  # turn 2's bars
    panes = _data(page)
    assert panes[0]["bars"][1]["c"] == Action[move_a.upper()] and panes[1]["bars"][1]["c"] == wrong
    assert disagreement(a, a, ("x", "y")).endswith("on every cell they shared.")


def test_a_runs_replays_name_where_its_two_checkpoints_disagreed():
    first = evaluate(scripted_policy("eps-oracle:0.6"), set_name="test", seed=2, step=10)
    last = evaluate(scripted_policy("oracle"), set_name="test", step=40)
    shown = RunReplays("run", 5, last[0], last[1], first[0], first[1])
    assert shown.labels == ("step 10", "step 40")
    assert shown.disagreement == disagreement(*shown.pair, shown.labels)
    # eps 0.6: 0.6/4 = 15% on each move, 0.4 + 15% = 55% on the oracle's, which step 40 plays
    sentence = (
        r"step 10 chose (\w+) at 15% \(likeliest: (\w+) at 55%\); step 40 chose \2 at 100%\.$"
    )
    assert re.search(sentence, shown.disagreement), shown.disagreement
    assert RunReplays("run", 5, last[0], last[1]).disagreement is None  # one eval
