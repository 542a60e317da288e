"""The maze-family registry and the one "solved" rule (docs/extending.md).

- `rlkit.maze.families.SETS` is what `TEST_SETS`, `SET_ENV`, `env_for_set`, `rlkit data` and
  the CLI's `--set` read; `generation.GENERATORS` is generation's dispatch and `--algorithm`'s
  choices; an unknown name is a one-line error, never a fallback.
- A new family end to end, as the guide describes it: register a generator and a set with no
  hash, `scripts/set_hash.py` prints the hash, pinned it plays and writes datasets.
- A shaped reward (0.5 for a near miss) leaves "solved" alone on both backends: local episodes,
  evaluation and the failure taxonomy; the env metric SkyRL's generator aggregates; SkyRL's
  eval dumps.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path

import pytest

from rlkit.cli.main import build_parser
from rlkit.env import maze_env
from rlkit.env.data import build_rows, read_rows, write_datasets
from rlkit.env.maze_env import SET_ENV, MazeEnv, env_for_set, make_env
from rlkit.episodes.evaluate import evaluate
from rlkit.episodes.failures import classify
from rlkit.episodes.policies import Response, scripted_policy
from rlkit.episodes.rollout import Trajectory, load_trajectories, run_episodes, save_trajectories
from rlkit.errors import UsageError
from rlkit.maze import families, generation, rules, sets
from rlkit.maze.families import SETS, MazeSet, MazeSpec
from rlkit.maze.parsing import format_action
from rlkit.maze.sets import TEST_SETS, pinned_set, pinned_spec
from rlkit.run.skyrl_dumps import read_eval_dumps, read_eval_episodes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import set_hash  # noqa: E402


def _flag(command: str, flag: str) -> argparse.Action:
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    (action,) = [a for a in sub._actions if flag in a.option_strings]
    return action


def test_one_registry_drives_sets_envs_and_the_cli():
    assert TEST_SETS is SETS
    assert list(SET_ENV) == list(SETS)
    for name, entry in SETS.items():
        assert env_for_set(name) == SET_ENV[name] and env_for_set(name).max_turns == entry.max_turns
        assert pinned_spec(name) == entry.spec and sets.pinned_set_hash(name) == entry.pinned_hash
        for command in ("maze", "data", "eval"):
            assert name in _flag(command, "--set").help
    assert tuple(_flag("maze", "--algorithm").choices) == generation.ALGORITHMS
    squares = tuple(n for n, g in generation.GENERATORS.items() if g.game == "squares")
    assert set(generation.ALGORITHMS + squares) == set(generation.GENERATORS)
    assert maze_env.VISGYM_STYLE is families.VISGYM_STYLE


def test_unknown_names_are_one_line_errors_never_a_fallback():
    for bad in (
        lambda: generation.generate(5, 5, 0, algorithm="prim"),
        lambda: MazeSpec(algorithm="prim"),
        lambda: pinned_set("nope"),
        lambda: families.maze_set("nope"),
    ):
        with pytest.raises(UsageError) as e:
            bad()
        assert "\n" not in str(e.value) and (
            "dfs, visgym" in str(e.value) or "test-large" in str(e.value)
        )
    with pytest.raises(UsageError, match="no env config"):
        env_for_set("nope")


def test_set_hash_prints_what_is_pinned(capsys):
    assert set_hash.main(["test", "visgym-easy"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{n} {SETS[n].pinned_hash} pinned" for n in ("test", "visgym-easy")]
    assert set_hash.main(["nope"]) == 2
    assert "unknown maze set 'nope'" in capsys.readouterr().err


def test_a_new_family_end_to_end(monkeypatch, tmp_path, capsys):
    """What docs/extending.md walks through: a generator, a set with no hash, the hash printed
    by the tool and pinned, then the set is played, evaluated and written as SkyRL rows."""

    def spiral_free(h, w, rng):  # a stand-in generator: DFS's corridors
        return generation.GENERATORS["dfs"].fn(h, w, rng)

    monkeypatch.setitem(
        generation.GENERATORS, "corridors", generation.Generator("cells", spiral_free, "test")
    )
    entry = MazeSet(MazeSpec(4, 4, "corridors", "random", 3), 8, "", "a test family", 10)
    monkeypatch.setitem(SETS, "corridors-4", entry)

    with pytest.raises(RuntimeError, match="scripts/set_hash.py corridors-4"):
        pinned_set("corridors-4")
    assert set_hash.main(["corridors-4"]) == 0
    name, digest, *status = capsys.readouterr().out.split()
    assert name == "corridors-4" and " ".join(status) == "not pinned yet"
    monkeypatch.setitem(SETS, "corridors-4", MazeSet(entry.spec, 8, digest, entry.doc, 10))

    assert len(pinned_set("corridors-4")) == 8 and env_for_set("corridors-4").max_turns == 10
    result, _ = evaluate(scripted_policy("oracle"), set_name="corridors-4")
    assert result.solve_rate == 1.0 and result.test_set_hash == digest
    _, evals = write_datasets(tmp_path, 4, eval_set="corridors-4")
    assert read_rows(evals)[0]["data_source"].endswith("/corridors-4")


def _near_miss_reward(state: rules.State) -> float:
    """A shaped reward: 1 for solved, 0.5 for ending one move from the target, else 0."""
    if rules.solved(state):
        return 1.0
    gap = abs(state.pos[0] - state.maze.exit[0]) + abs(state.pos[1] - state.maze.exit[1])
    return 0.5 if gap == 1 else 0.0


class StopShort:
    """The oracle, except it says `stop` one square before the target (a near miss)."""

    name = "stop-short"

    def act(self, states, messages, rngs):
        out = []
        for s in states:
            move = rules.best_move(s)
            if rules.transition(s, [move]).pos == s.maze.exit:
                move = rules.game_moves(s.maze)[-1]  # stop
            out.append(Response(format_action(move)))
        return out


@pytest.fixture
def shaped(monkeypatch):
    monkeypatch.setattr(rules, "reward", _near_miss_reward)


def test_a_shaped_reward_does_not_solve_local_episodes(shaped, tmp_path):
    result, trajs = evaluate(StopShort(), set_name="visgym-easy", n_mazes=2)
    assert [t.reward for t in trajs] == [0.5, 0.5] and not any(t.solved for t in trajs)
    assert result.solve_rate == 0.0 and result.failures["stopped_off_target"] == 2 == sum(
        result.failures.values()
    )
    assert all(classify(t) == "stopped_off_target" for t in trajs)
    # the verdict travels with the file; a file without one reads its (unshaped) reward
    back = load_trajectories(save_trajectories(tmp_path / "t.jsonl", trajs))
    assert [t.won for t in back] == [False, False] and not any(t.solved for t in back)
    assert Trajectory({}, 0, 0, reward=1.0).solved and not Trajectory({}, 0, 0).solved
    (oracle,) = run_episodes(
        scripted_policy("oracle"), pinned_set("visgym-easy")[:1], env_for_set("visgym-easy")
    )
    assert oracle.reward == 1.0 and oracle.won and oracle.solved


def test_a_shaped_reward_does_not_solve_skyrl_generator_metrics(shaped):
    """SkyRL's generator adds the env's reward to the last token and aggregates `get_metrics`
    (skyrl-gym): the reward says 0.5, the solve rate 0."""
    maze = pinned_set("visgym-easy")[0]
    env = make_env(maze, env_for_set("visgym-easy"))
    env.init()
    policy, state, out = StopShort(), env.state, None
    while out is None or not out["done"]:
        (resp,) = policy.act([state], [[]], [None])
        out = env.step(resp.text)
        state = env.state
    assert out["reward"] == 0.5 and out["metadata"]["solved"] is False
    agg = MazeEnv.aggregate_metrics([env.get_metrics()])
    assert agg["solve_rate"] == 0.0


def _dump_record(row: dict, answers: list[str], reward: float) -> dict:
    """One episode as SkyRL's eval dump holds it (as tests/test_skyrl.py writes them): the
    decoded multi-turn response, per-token scores with the env's reward on the last token."""
    obs = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Move.<|im_end|>\n"
    response = (obs + "<|im_start|>assistant\n").join(a + "<|im_end|>\n" for a in answers)
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    extras["max_turns"] = 18
    return {
        "input_prompt": "<|im_start|>system\n...",
        "output_response": response,
        "score": [0.0] * (7 * len(answers) - 1) + [reward],
        "stop_reason": "stop",
        "env_class": "rlkit-maze",
        "env_extras": extras,
        "data_source": row["data_source"],
    }


def test_a_shaped_reward_does_not_solve_skyrl_eval_dumps(shaped, tmp_path):
    cfg = env_for_set("visgym-easy")
    _, rows = build_rows(
        n_train=1, spec=pinned_spec("visgym-easy"), eval_set="visgym-easy", cfg=cfg, n_eval=2
    )
    mazes = pinned_set("visgym-easy")[:2]
    near = run_episodes(StopShort(), mazes, cfg)
    full = run_episodes(scripted_policy("oracle"), mazes, cfg)
    step_dir = tmp_path / "dumped_evals" / "global_step_3_evals"
    step_dir.mkdir(parents=True)
    records = []
    for i in range(2):
        for traj in (near[i], full[i]):
            records.append(_dump_record(rows[i], [t.text for t in traj.turns], traj.reward))
    (step_dir / "rlkit-maze_visgym-easy.jsonl").write_text(
        "\n".join(json.dumps(r) for r in records) + "\n"
    )
    episodes = read_eval_episodes(step_dir)
    assert [e.reward for e in episodes] == [0.5, 1.0, 0.5, 1.0]
    assert [e.solved for e in episodes] == [False, True, False, True]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the replay pays what SkyRL paid: no mismatch warning
        result = read_eval_dumps(tmp_path)[3]
    assert result.solve_rate == 0.5 and result.failures["stopped_off_target"] == 2 == sum(
        result.failures.values()
    )


def test_the_extending_guide_names_only_paths_that_exist():
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "extending.md").read_text()
    paths = set(re.findall(r"`((?:rlkit|tests|scripts|docs)/[\w./-]+\.(?:py|md))`", text))
    assert len(paths) > 20
    assert [p for p in sorted(paths) if not (root / p).is_file()] == []
    readme = (root / "README.md").read_text()
    assert "docs/extending.md" in readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
