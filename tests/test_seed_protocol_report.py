"""The seed's protocol beside rlkit's after training (issue 37, item 3): SkyRL's eval dumps of a
greedy one-sample eval read as the seed's protocol (the run's recorded eval temperature says
so), with its "N/64" headline and exact interval, and summary.json / notebook 04 carry both
protocols.

The dump is the seed's own starting point rebuilt: VisGym's maze_2d/easy (`visgym-easy`), 28
of 64 mazes solved by stopping on the target, the rest stopped short (reward 0).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_skyrl import dump_record

from rlkit.env.data import build_rows
from rlkit.env.maze_env import env_for_set
from rlkit.maze import rules
from rlkit.maze.core import STOP, shortest_path
from rlkit.maze.parsing import format_action
from rlkit.maze.sets import pinned_set, pinned_spec
from rlkit.notebook import report
from rlkit.run import open_run
from rlkit.run.skyrl_dumps import eval_greedy, read_eval_dumps

SEED_HEADLINE = "28/64 = 43.75% [31.4%, 56.7%]"


def answers(maze, short: int) -> list[str]:
    """The shortest path, stopping `short` squares before the target (0: on it)."""
    state, out = rules.initial(maze), []
    for _ in range(len(shortest_path(maze)) - 1 - short):
        move = rules.best_move(state)
        out.append(format_action(move))
        state = rules.transition(state, [move])
    return [*out, format_action(STOP)]


@pytest.fixture(scope="module")
def seed_dump(tmp_path_factory) -> Path:
    """A SkyRL run dir whose step-0 eval is the seed's: 28/64 greedy, one sample a maze."""
    run = tmp_path_factory.mktemp("skyrl-run")
    cfg = env_for_set("visgym-easy")
    _, rows = build_rows(
        n_train=1, spec=pinned_spec("visgym-easy"), eval_set="visgym-easy", cfg=cfg
    )
    step_dir = run / "exports" / "dumped_evals" / "global_step_0_evals"
    step_dir.mkdir(parents=True)
    records = [
        dump_record(row, answers(maze, 0 if i < 28 else 2), i < 28, cfg.max_turns)
        for i, (row, maze) in enumerate(zip(rows, pinned_set("visgym-easy"), strict=True))
    ]
    (step_dir / "rlkit-maze_visgym-easy.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records)
    )
    config = {"overrides": {"generator.eval_sampling_params.temperature": "0.0"}}
    info = {"backend": "skyrl", "preset": "qwen3vl-8b", "config": config}
    (run / "run.json").write_text(json.dumps(info))
    return run


def test_a_greedy_one_sample_skyrl_eval_is_the_seeds_protocol(seed_dump):
    r = open_run(seed_dump).evals()[0]  # the run's recorded eval temperature: 0
    assert (r.mode, r.protocol, r.n_mazes, r.samples) == ("greedy", "seed", 64, 1)
    assert r.headline == SEED_HEADLINE and r.failures.get("stopped_off_target") == 36
    assert "the seed's protocol (greedy, one sample a maze): 28/64 = 43.75%" in r.summary()
    # without the run's config the sampling is unknown: read as sampled, rlkit's protocol
    plain = read_eval_dumps(seed_dump / "exports")[0]
    assert (plain.mode, plain.protocol, plain.headline) == ("sampled", "rlkit", SEED_HEADLINE)
    sampled = {"skyrl": {"generator": {"eval_sampling_params": {"temperature": 1.0}}}}
    assert eval_greedy(sampled) is False
    assert eval_greedy({}) is None and eval_greedy({"overrides": {}}) is None


def test_summary_and_notebook_lines_carry_both_protocols(seed_dump, tmp_path):
    seed = open_run(seed_dump).evals()[0]
    sampled = read_eval_dumps(seed_dump / "exports")[0]  # stands in for a k-sample eval
    summary = report.build_summary({}, {0: seed}, boundary=None, paired=None, run="r", plots=[])
    assert summary["protocols"]["seed"]["headline"] == SEED_HEADLINE
    assert summary["protocols"]["rlkit"] is None  # this run measured only the seed's
    lines = report.protocol_lines({0: seed})
    assert lines[1].startswith("the seed's protocol: ") and SEED_HEADLINE in lines[1]
    # a local run: sampled evals, and its last checkpoint's greedy eval (the seed's protocol)
    summary = report.build_summary(
        {}, {5: sampled}, boundary=None, paired=None, run="r", plots=[], greedy=seed
    )
    both = summary["protocols"]
    assert both["rlkit"]["protocol"] == "rlkit" and both["seed"]["summary"] == seed.summary()
    path = report.write_summary(tmp_path, summary)
    assert json.loads(path.read_text())["protocols"]["seed"]["headline"] == SEED_HEADLINE
    lines = report.protocol_lines({5: sampled})
    assert "not measured" in lines[1] and "rlkit eval --protocol seed" in lines[1]


def test_rlkit_eval_prints_a_skyrl_runs_own_eval(seed_dump, capsys, tmp_path):
    import shutil

    from rlkit.cli.main import main as rlkit_main

    assert rlkit_main(["eval", "--dumps", str(seed_dump), "--protocol", "seed", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["protocol"], out["headline"], out["step"]) == ("seed", SEED_HEADLINE, 0)
    assert rlkit_main(["eval", "--dumps", str(seed_dump)]) == 0
    assert SEED_HEADLINE in capsys.readouterr().out
    # an export dir outside its run records no sampling: not the seed's protocol, in one line
    alone = shutil.copytree(seed_dump / "exports", tmp_path / "dumps")
    argv = ["eval", "--dumps", str(alone), "--protocol", "seed"]
    assert rlkit_main(argv) == 2
    err = capsys.readouterr().err
    assert "not the seed's protocol" in err and len(err.strip().splitlines()) == 1
    assert rlkit_main(["eval", "--dumps", str(seed_dump), "--step", "7"]) == 2
    assert "no eval at step 7" in capsys.readouterr().err
