"""Several eval sets on the local backend (`task.eval_sets`, SkyRL's `eval_sets`): each set
evaluated at every eval with its own turn budget, saved and logged by set, read back per set by
`open_run` and notebook 04's helper; bad values refused in one line."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlkit.episodes.evaluate import EvalResult
from rlkit.errors import UsageError
from rlkit.notebook import workbench
from rlkit.notebook.progress import read_progress
from rlkit.run import open_run
from rlkit.train.presets import preset
from rlkit.train.trainer import train


def test_each_eval_set_is_evaluated_saved_and_read_by_set(tmp_path):
    cfg = preset("smoke").with_overrides({"task.eval_sets": "test,test-large"})
    assert cfg.task.other_eval_sets == ("test-large",)
    train(replace(cfg, schedule=replace(cfg.schedule, steps=1)), tmp_path, progress=False)
    run = open_run(tmp_path)
    by_set = run.evals_by_set()
    assert list(by_set) == ["test", "test-large"]
    assert sorted(by_set["test"]) == sorted(by_set["test-large"]) == sorted(run.evals())
    assert workbench.other_eval_sets(run) == {"test-large": by_set["test-large"]}
    last = max(by_set["test-large"])
    path = tmp_path / "evals" / "test-large" / f"global_step_{last}.json"
    result = EvalResult.load(path)
    assert (result.set, result.n_mazes) == ("test-large", 64)
    trajs = result.load_trajectories(path)
    # test-large's own budget, not the task env's 12 (as recorded: no trajectory's luck)
    assert {t.max_turns for t in trajs} == {24}
    assert max(len(t.turns) for t in trajs) <= 24
    (record,) = [r for r in run.metrics() if r.get("step") == last and "eval/solve_rate" in r]
    assert record["eval/test-large_solve_rate"] == result.solve_rate
    assert (
        record["eval/test-large_ci_low"] <= result.solve_rate <= record["eval/test-large_ci_high"]
    )
    assert f"; test-large: {result.solve_rate:.1%} [" in read_progress(run).eval_text()


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ("nope", "no env config for maze set 'nope'"),
        ("visgym-easy", "visgym-easy is another game than task.eval_set test"),
    ],
)
def test_bad_eval_sets_are_refused_in_one_line(sets, message):
    with pytest.raises(UsageError, match=message) as e:
        preset("smoke").with_overrides({"task.eval_sets": sets})
    assert "\n" not in str(e.value)
