"""SkyRL's own eval loop writes the dumps rlkit reads: contract test 3.

`skyrl.train.evaluate.evaluate` (the trainer's eval: SkyRL's dataloader over the rows the job's
entrypoint wrote, its generator, its metrics, and `dump_per_dataset_eval_results`) runs against
a scripted engine. `rlkit.run.skyrl_dumps.read_eval_dumps` must then report what SkyRL itself
measured, and what rlkit's own evaluator measures for the same play on the same mazes.
"""

from __future__ import annotations

import shutil
import warnings
from collections import Counter
from pathlib import Path

import pytest
import scripted_engine as se

from rlkit.episodes.evaluate import evaluate as rlkit_evaluate
from rlkit.episodes.policies import Response
from rlkit.run.skyrl_dumps import (
    BadRecordsWarning,
    read_eval_dump,
    read_eval_dumps,
    read_eval_episodes,
)

SAMPLES = 2  # the skyrl_eval fixture's eval samples per maze (tests/skyrl/conftest.py)
EVAL_MAZES = 16  # and its mazes: the test set's first 16
# A real SkyRL eval dump (4 mazes x 2 samples) whose last answer holds a raw U+0085 (NEL):
# SkyRL writes dumps with ensure_ascii=False, one record per "\n", so str.splitlines() cut it.
U0085_DUMP = Path(__file__).parent / "data" / "u0085_eval_dump"


class PlayerPolicy:
    """The engine's scripted player as an rlkit Policy; the k-th episode started on a maze
    plays as repetition k, as SkyRL's k-th sample of that row does."""

    def __init__(self, player: se.Player) -> None:
        self.player, self.name = player, player.__name__
        self.started: Counter[str] = Counter()
        self.rep: dict[int, int] = {}

    def act(self, states, messages, rngs):
        out = []
        for state, rng in zip(states, rngs, strict=True):
            h = state.maze.content_hash
            if id(rng) not in self.rep:  # an episode keeps its own stream from start to end
                self.rep[id(rng)] = self.started[h]
                self.started[h] += 1
            out.append(Response(self.player(state.maze, state, self.rep[id(rng)])))
        return out


def test_rlkit_reads_what_skyrl_measured(skyrl_eval):
    cfg, metrics = skyrl_eval
    assert cfg.generator.eval_n_samples_per_prompt == SAMPLES
    results = read_eval_dumps(cfg.trainer.export_path)
    assert list(results) == [10]
    r = results[10]
    assert (r.n_mazes, r.samples, r.set, r.step) == (EVAL_MAZES, SAMPLES, "test", 10)
    assert r.solve_rate == pytest.approx(metrics["eval/all/avg_score"])
    assert r.pass_at_k[f"pass@{SAMPLES}"] == pytest.approx(metrics[f"eval/all/pass_at_{SAMPLES}"])
    assert 0 < r.solve_rate < r.pass_at_k[f"pass@{SAMPLES}"] < 1  # the player makes them differ


def test_dump_reads_as_rlkit_own_eval_of_the_same_play(skyrl_eval):
    cfg, _ = skyrl_eval
    from_dump = read_eval_dumps(cfg.trainer.export_path)[10]
    own, _ = rlkit_evaluate(
        PlayerPolicy(se.mixed), set_name="test", samples=SAMPLES, n_mazes=EVAL_MAZES
    )
    assert from_dump.test_set_hash == own.test_set_hash
    assert from_dump.solve_rate == own.solve_rate and from_dump.ci95 == own.ci95
    assert from_dump.ci_method == own.ci_method == "wilson-maze-deff"
    assert from_dump.pass_at_k == own.pass_at_k
    assert from_dump.failures == own.failures and sum(own.failures.values()) > 0
    assert [sorted(e) for e in from_dump.episodes] == [sorted(e) for e in own.episodes]


def dump_records(step_dir: Path) -> int:
    """Records as SkyRL wrote them: one per b"\\n"."""
    data = (step_dir / "rlkit-maze_test.jsonl").read_bytes()
    return sum(1 for line in data.split(b"\n") if line.strip())


def test_a_raw_line_separator_in_an_answer_stays_inside_its_record():
    raw = (U0085_DUMP / "rlkit-maze_test.jsonl").read_bytes()
    assert "\x85".encode() in raw  # the evidence: one answer holds a raw NEL
    with warnings.catch_warnings():
        warnings.simplefilter("error", BadRecordsWarning)  # nothing may be skipped here
        episodes = read_eval_episodes(U0085_DUMP)
    assert len(episodes) == dump_records(U0085_DUMP) == 8
    assert any("\x85" in text for ep in episodes for text in ep.responses)


def test_a_malformed_line_is_skipped_and_counted(tmp_path: Path):
    step_dir = tmp_path / "dumped_evals" / "global_step_3_evals"
    shutil.copytree(U0085_DUMP, step_dir, copy_function=shutil.copyfile)
    with open(step_dir / "rlkit-maze_test.jsonl", "ab") as f:
        f.write(b'{"input_prompt": "a write cut short\n\x00\xff garbage\n')  # torn, garbage
    dump = read_eval_dump(tmp_path, 3)
    assert dump.step == 3 and len(dump.episodes) == 8
    assert dump.bad_lines == (
        f"{step_dir / 'rlkit-maze_test.jsonl'}:9",
        f"{step_dir / 'rlkit-maze_test.jsonl'}:10",
    )
    # the reading for people names the count and where
    with pytest.warns(BadRecordsWarning, match=r"2 lines .*rlkit-maze_test\.jsonl:9"):
        results = read_eval_dumps(tmp_path)
    assert (results[3].n_mazes, results[3].samples, results[3].step) == (4, 2, 3)
