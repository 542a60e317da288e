"""Training rollouts captured per step: the storage (keep-N, atomic files, damaged lines, picks
from (seed, step), what is left out), a real local smoke run that captures every GRPO step,
the run reader on both backends' layouts, and `rlkit rollouts`."""

import json
from dataclasses import replace

import pytest
import torch

from rlkit.cli import main as cli
from rlkit.episodes.policies import scripted_policy
from rlkit.episodes.rollout import run_episodes
from rlkit.errors import RlkitError, UsageError
from rlkit.maze.core import Action
from rlkit.maze.generation import generate
from rlkit.recipe import Recipe
from rlkit.run import captures as cap
from rlkit.run import open_run
from rlkit.run.backends import SkyRLRunReader, SummaryRun
from rlkit.run.rundir import RunDir
from rlkit.train.grpo import estimate
from rlkit.train.presets import preset
from rlkit.train.run_config import check_resume, config_from_dict, resume_config
from rlkit.train.step import capture, score
from rlkit.train.trainer import Trainer, train

MAZES = [generate(3, 3, seed=s) for s in range(3)]


def _episodes(step: int, samples: int = 2) -> list[cap.CapturedEpisode]:
    """Every episode of 3 mazes x `samples`, as a step's batch (eps-oracle: move probabilities
    on every turn), with token ids a trainer's rollout would carry."""
    trajs = run_episodes(scripted_policy("eps-oracle:0.5"), MAZES, samples=samples, seed=step)
    for t in trajs:
        for turn in t.turns:
            turn.prompt_ids, turn.response_ids, turn.logprobs = [1, 2, 3], [4, 5], [-0.1, -0.2]
    return [cap.CapturedEpisode(step, t.maze_index, 0.5 - t.sample, t) for t in trajs]


def test_an_episode_reads_back_without_token_ids_and_with_rounded_probabilities(tmp_path):
    eps = _episodes(3)
    eps[0].trajectory.turns[0].text = "up\u2028down\u0085"  # splits under str.splitlines()
    cap.write_step(tmp_path, 3, eps, keep=None)
    line = cap.step_path(tmp_path, 3).read_text().split("\n")[0]
    assert "prompt_ids" not in line and "logprobs" not in line and "null,null" not in line
    back = cap.read_step(tmp_path, 3)
    assert len(back) == len(eps)
    for a, b in zip(eps, back, strict=True):
        assert (b.step, b.group, b.advantage) == (a.step, a.group, a.advantage)
        assert b.trajectory.reward == a.trajectory.reward and b.trajectory.maze == a.trajectory.maze
        for u, v in zip(a.trajectory.turns, b.trajectory.turns, strict=True):
            assert (v.text, v.actions, v.pos_before, v.pos_after) == (
                u.text,
                u.actions,
                u.pos_before,
                u.pos_after,
            )
            assert v.prompt_ids is v.response_ids is v.logprobs is None
            assert v.move_probs == pytest.approx(u.move_probs, abs=5e-5)


def test_keep_n_leaves_the_newest_steps_and_refuses_less_than_one(tmp_path):
    for step in range(1, 6):
        cap.write_step(tmp_path, step, _episodes(step, 2)[:2], keep=2)
    assert cap.capture_steps(tmp_path) == [4, 5]
    cap.write_step(tmp_path, 6, [], keep=None)  # a step that captured nothing is still a step
    assert cap.capture_steps(tmp_path) == [4, 5, 6] and cap.read_step(tmp_path, 6) == []
    with pytest.raises(UsageError, match="keep"):
        cap.write_step(tmp_path, 7, [], keep=0)
    assert cap.drop_after(tmp_path, 4) == [5, 6] and cap.capture_steps(tmp_path) == [4]


def test_files_are_whole_or_absent_and_a_damaged_line_is_named(tmp_path):
    cap.write_step(tmp_path, 2, _episodes(2), keep=None)
    names = [p.name for p in cap.capture_dir(tmp_path).iterdir()]
    assert names == ["global_step_2.jsonl"]  # no temporary file left beside it
    (cap.capture_dir(tmp_path) / ".global_step_9.jsonl.tmp-123").write_text("{")  # a writer died
    assert cap.capture_steps(tmp_path) == [2]
    assert cap.drop_after(tmp_path, 2) == [] and len(list(cap.capture_dir(tmp_path).iterdir())) == 1
    path = cap.step_path(tmp_path, 2)
    lines = path.read_text().split("\n")
    path.write_text("\n".join([lines[0], lines[1][: len(lines[1]) // 2], *lines[2:]]))
    with pytest.raises(RlkitError, match=r"global_step_2.jsonl:2 is not a captured episode"):
        cap.read_step(tmp_path, 2)
    with pytest.raises(UsageError, match=r"no captured rollouts for step 5 .* are \[2\]"):
        cap.read_step(tmp_path, 5)
    with pytest.raises(UsageError, match="none"):
        cap.read_step(tmp_path / "elsewhere", 1)


def test_groups_are_picked_from_seed_and_step_alone():
    groups = [g for g in range(16) for _ in range(4)]
    picks = {s: cap.pick_groups(groups, 2, seed=0, step=s) for s in range(10)}
    assert picks == {s: cap.pick_groups(groups[::-1], 2, seed=0, step=s) for s in range(10)}
    assert all(len(p) == 2 and p == sorted(set(p)) for p in picks.values())
    assert len({tuple(p) for p in picks.values()}) > 5  # steps see different groups
    assert (
        cap.pick_groups(groups, 2, seed=1, step=3) != picks[3]
        or cap.pick_groups(groups, 2, seed=2, step=3) != picks[3]
    )
    assert cap.pick_groups([5, 5, 7], 4, seed=0, step=1) == [5, 7]  # fewer groups: all of them
    assert cap.pick_groups(groups, 0, seed=0, step=1) == []
    with pytest.raises(UsageError, match=">= 0"):
        cap.pick_groups(groups, -1, seed=0, step=1)


def test_pick_episodes_keeps_every_sample_of_the_picked_groups():
    trajs = run_episodes(scripted_policy("random"), MAZES, samples=3, seed=0)
    groups = [t.maze_index for t in trajs]
    adv = [float(i) for i in range(len(trajs))]
    picked = cap.pick_episodes(7, trajs, groups, adv, n=2, seed=0)
    wanted = cap.pick_groups(groups, 2, seed=0, step=7)
    assert [e.group for e in picked] == [g for g in groups if g in wanted]
    assert all(e.step == 7 and e.advantage == adv[trajs.index(e.trajectory)] for e in picked)
    with pytest.raises(UsageError, match="one of each per episode"):
        cap.pick_episodes(7, trajs, groups[:-1], adv, n=2, seed=0)


def test_summary_numbers_are_the_episodes_own():
    eps = _episodes(4)
    s = cap.summarize(eps)
    solved = sum(e.trajectory.solved for e in eps)
    assert (s.step, s.episodes, s.groups) == (4, 6, 3)
    assert s.solve_rate == solved / 6 and s.mean_advantage == pytest.approx(0.0)  # 0.5, -0.5
    assert s.line().startswith("step 4: 6 episodes of 3 groups")
    assert cap.summarize([], 9).episodes == 0
    with pytest.raises(UsageError):
        cap.summarize([])


def test_a_step_captures_the_advantage_its_loss_used_and_nothing_when_off(tmp_path):
    trajs = run_episodes(scripted_policy("random"), MAZES, samples=2, seed=0)
    for t in trajs:  # groups 0 and 1 teach (rewards differ), group 2 does not
        t.reward = float(t.sample == 0 and t.maze_index < 2)
    # dynamic sampling trains the first informative group only: group 1's advantages are not 0,
    # but its tokens never enter the loss
    scores = score(trajs, Recipe(dynamic_sampling_type="filter"), batch_groups=1)
    assert scores.advantages[2:4].abs().min() > 0 and not scores.keep[2:4].any()
    sched = preset("smoke").schedule
    cost = capture(tmp_path, 3, trajs, scores, replace(sched, capture_groups=3), "r@3")
    eps = cap.read_step(tmp_path, 3)
    assert cost == {
        "rollout/capture_episodes": 6,
        "rollout/capture_bytes": len(cap.step_path(tmp_path, 3).read_bytes()),
    }
    # group 0: (1 - 0.5) / (Bessel std of [1, 0] = 0.7071 + 1e-6); groups 1, 2: not trained
    assert [e.advantage for e in eps] == pytest.approx([0.70711, -0.70711, 0, 0, 0, 0], abs=1e-5)
    assert {e.trajectory.policy for e in eps} == {"r@3"}
    off = tmp_path / "off"
    assert capture(off, 3, trajs, scores, replace(sched, capture_groups=0), "r@3") == {}
    assert not off.exists()


# a real local run ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke preset as it is (4 warm-start + 4 GRPO steps of 4 mazes x 4 episodes;
    captures at their defaults: 2 groups a step, the newest 50 steps kept)."""
    run = tmp_path_factory.mktemp("captures") / "smoke"
    cfg = preset("smoke")
    train(cfg, run, progress=False)
    return run, cfg


def test_every_grpo_step_captures_its_groups_with_move_probabilities(smoke):
    run_dir, cfg = smoke
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    grpo_rows = [r for r in rows if "rollout/reward_mean" in r]
    grpo = [r["step"] for r in grpo_rows]
    assert grpo == [5, 6, 7, 8] and all(r["timing/capture"] > 0 for r in grpo_rows)
    run = open_run(run_dir)
    assert run.capture_steps() == grpo  # every GRPO step, no warm-start step
    for r in grpo_rows:  # what each step's capture cost, in its metrics
        assert r["rollout/capture_episodes"] == len(run.captures(r["step"]))
        assert r["rollout/capture_bytes"] == cap.step_path(run_dir, r["step"]).stat().st_size
    all_groups = range(cfg.grpo.mazes_per_step)
    for step in run.capture_steps():
        eps = run.captures(step)
        picked = cap.pick_groups(all_groups, cfg.schedule.capture_groups, seed=0, step=step)
        assert sorted({e.group for e in eps}) == picked
        assert len(eps) == len(picked) * cfg.grpo.group_size
        for group in picked:
            mine = [e for e in eps if e.group == group]
            assert sorted(e.trajectory.sample for e in mine) == list(range(cfg.grpo.group_size))
            rewards = torch.tensor([e.trajectory.reward for e in mine])
            expected = estimate(rewards, torch.zeros(len(mine), dtype=torch.long), cfg.recipe)
            assert [e.advantage for e in mine] == pytest.approx(expected.tolist(), abs=1e-6)
            mean = rewards.mean().item()
            assert all((e.advantage > 0) == (e.trajectory.reward > mean) for e in mine)
        for e in eps:
            assert e.step == step and e.trajectory.turns
            for turn in e.trajectory.turns:
                assert len(turn.move_probs) == 4 and sum(turn.move_probs) == pytest.approx(
                    1, abs=1e-3
                )
                assert turn.move_probs[Action[turn.actions[0].upper()]] > 0


def test_notebook_04s_signal_lines_and_03s_worked_group_read_the_run(smoke):
    """What notebook 04 prints under its stability figure is this run's own clip fraction and
    entropy over its GRPO steps (smoke has no KL term: said so); notebook 03 works a mixed
    group whenever a captured step has one."""
    from statistics import median

    from rlkit.notebook import curves, groups

    run_dir, cfg = smoke
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    grpo_rows = [r for r in rows if "rollout/reward_mean" in r]
    run = open_run(run_dir)
    kl, clip, entropy = curves.signal_spans(run)
    assert cfg.recipe.kl_loss_coef == 0 and not kl.values
    for span, key in ((clip, "loss/clip_fraction"), (entropy, "loss/entropy")):
        assert span.steps == tuple(r["step"] for r in grpo_rows)
        assert span.values == tuple(r[key] for r in grpo_rows)
    lines = curves.signal_lines(run)
    assert "not logged" in lines[0]
    v = entropy.values
    assert f"over {len(v)} GRPO steps ({grpo_rows[0]['step']}-{grpo_rows[-1]['step']})" in lines[2]
    assert f"{v[0]:.3g} at the first, median {median(v):.3g} over the first {len(v)}" in lines[2]
    mixed = [s for s in run.capture_steps() if groups.mixed_groups(run.captures(s))]
    view = groups.worked_group(run)
    if mixed:
        assert view.step == mixed[-1] and len(set(view.rewards)) > 1
    else:  # a CPU whose smoke run solved or failed every captured group alike
        assert view.step == run.capture_steps()[-1]


def test_a_resumed_run_captures_what_an_uninterrupted_one_did(smoke, tmp_path):
    straight, cfg = smoke
    split = tmp_path / "split"
    Trainer(cfg, split, progress=False).fit(stop_at_step=7)  # checkpoint at 6, step 7 after it
    assert cap.capture_steps(split) == [5, 6, 7]
    cap.write_step(split, 7, _episodes(7), keep=None)  # what the resume must not keep
    train(cfg, split, progress=False)  # resumes from global_step_6: step 7 captured again
    assert cap.capture_steps(split) == cap.capture_steps(straight) == [5, 6, 7, 8]
    for step in (5, 6, 7, 8):  # the same bytes, whichever segment played the step
        assert cap.step_path(split, step).read_text() == cap.step_path(straight, step).read_text()


def test_capture_settings_may_change_on_resume_and_old_run_json_resumes():
    cfg = preset("smoke")
    saved = cfg.to_dict()
    old = json.loads(json.dumps(saved))
    del old["schedule"]["capture_groups"], old["schedule"]["capture_keep"]
    assert config_from_dict(old) == cfg  # a run.json from before: the defaults
    assert check_resume(old, cfg, "r") == {}
    assert resume_config(old, cfg) is cfg
    less = cfg.with_overrides({"schedule.capture_groups": "0", "schedule.capture_keep": "none"})
    assert check_resume(saved, less, "r") == {
        "schedule.capture_groups": (2, 0),
        "schedule.capture_keep": (50, None),
    }
    assert resume_config(saved, cfg, {"schedule.capture_groups": "1"}).schedule.capture_groups == 1
    with pytest.raises(UsageError, match="capture_groups .* must be >= 0"):
        cfg.with_overrides({"schedule.capture_groups": "-1"})
    with pytest.raises(UsageError, match="capture_keep .* must be >= 1"):
        cfg.with_overrides({"schedule.capture_keep": "0"})


# the reader on both layouts --------------------------------------------------------------


def test_a_skyrl_run_reads_its_captures_from_its_run_dir(tmp_path, capsys):
    run_dir = RunDir(tmp_path / "sky")
    run_dir.init(preset="qwen3vl-2b-smoke", seed=0, backend="skyrl")
    eps = _episodes(1)
    eps[0].trajectory.turns[0].move_probs = None  # a turn the engine gave no probabilities for
    cap.write_step(run_dir.path, 1, eps, keep=None)
    run = open_run(run_dir.path)
    assert isinstance(run, SkyRLRunReader) and run.capture_steps() == [1]
    assert len(run.captures(1)) == 6
    code, out, _ = _cli(capsys, run_dir.path, "--step", "1", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["backend"] == "skyrl"
    assert shown["episodes"][0]["p_chosen"][0] is None and shown["episodes"][0]["p_chosen"][1]
    code, out, _ = _cli(capsys, run_dir.path, "--step", "1")
    assert out.splitlines()[3].split()[0] == "-"  # its P column says "not recorded"
    summary = SummaryRun(run.summary())  # read elsewhere: the newest captured step comes along
    assert summary.capture_steps() == [1] and summary.captures(1) == run.captures(1)
    assert SummaryRun(run.summary(captured=0)).capture_steps() == [1]
    with pytest.raises(UsageError, match="open it in a kernel that mounts"):
        SummaryRun(run.summary(captured=0)).captures(1)
    (run_dir.path / "exports" / "dumped_evals").mkdir(parents=True)
    exports = open_run(tmp_path / "sky" / "exports")  # the export dir: found with its run dir
    assert exports.capture_steps() == [1]
    alone = tmp_path / "alone"
    (alone / "dumped_evals").mkdir(parents=True)
    bare = open_run(alone)  # an export dir outside a run dir: nothing captured there
    assert bare.capture_steps() == []
    with pytest.raises(UsageError, match="no captured training rollouts"):
        bare.captures(1)


# rlkit rollouts --------------------------------------------------------------------------


def _cli(capsys, *argv):
    code = cli.main(["rollouts", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_rollouts_cli_lists_steps_and_shows_one(smoke, capsys):
    run_dir, cfg = smoke
    code, out, _ = _cli(capsys, run_dir)
    assert code == 0 and out.splitlines()[0] == "smoke: 4 captured steps"
    assert [line.split()[:3] for line in out.splitlines()[2:]] == [
        [str(s), "8", "2"] for s in (5, 6, 7, 8)
    ]
    code, out, _ = _cli(capsys, run_dir, "--json")
    listed = json.loads(out)
    assert listed["backend"] == "local" and [s["step"] for s in listed["steps"]] == [5, 6, 7, 8]
    eps = open_run(run_dir).captures(8)
    assert listed["steps"][-1] == cap.summarize(eps).to_dict()
    code, out, _ = _cli(capsys, run_dir, "--step", "latest")
    assert code == 0 and out.startswith("smoke, step 8: 8 episodes of 2 groups")
    assert len(out.splitlines()) == 2 + 2 * 8 + 1
    code, out, _ = _cli(capsys, run_dir, "--step", "7", "--json")
    shown = json.loads(out)
    assert shown["step"] == 7 and len(shown["episodes"]) == 8
    for row, e in zip(
        shown["episodes"],
        sorted(open_run(run_dir).captures(7), key=lambda e: (e.group, e.trajectory.sample)),
        strict=True,
    ):
        assert (row["group"], row["sample"], row["advantage"]) == (
            e.group,
            e.trajectory.sample,
            e.advantage,
        )
        assert row["turns"] == len(row["moves"]) == len(row["p_chosen"]) == len(e.trajectory.turns)
        for p, turn, probs in zip(
            row["p_chosen"], e.trajectory.turns, row["move_probs"], strict=True
        ):
            assert p == probs[Action[turn.actions[0].upper()]] and 0 < p <= 1


def test_rollouts_cli_exports_a_kernel_free_player_per_group(smoke, capsys, tmp_path):
    run_dir, _ = smoke
    out_file = tmp_path / "step.html"
    code, out, _ = _cli(capsys, run_dir, "--export", out_file)
    assert code == 0 and out.strip() == f"wrote {out_file}: 8 episodes of step 8"
    page = out_file.read_text()
    assert page.startswith("<!doctype html>") and page.count("class='rlkit-player'") == 2
    assert page.count("class='rlkit-pane'") == 8 and "rlkitBars" in page
    data = [
        json.loads(chunk.split("</script>")[0]) for chunk in page.split("class='rlkit-data'>")[1:]
    ]
    first = sorted(open_run(run_dir).captures(8), key=lambda e: (e.group, e.trajectory.sample))[0]
    bars = data[0][0]["bars"]
    assert len(bars) == len(first.trajectory.turns) + 1
    assert bars[0]["p"] == pytest.approx(first.trajectory.turns[0].move_probs, abs=1e-4)
    code, out, _ = _cli(capsys, run_dir, "--step", "6", "--export", out_file, "--json")
    assert json.loads(out)["export"] == str(out_file) and "step 6" in out_file.read_text()


def test_rollouts_cli_errors_are_one_line(smoke, capsys, tmp_path):
    run_dir, _ = smoke
    bare = RunDir(tmp_path / "fresh")
    bare.init(preset="smoke", seed=0, backend="local")
    (tmp_path / "empty").mkdir()
    cases = [
        ((tmp_path / "nowhere",), 2, "no run at"),
        ((tmp_path / "empty",), 2, "is not a run dir"),
        ((bare.path,), 2, "no captured training rollouts yet"),
        ((run_dir, "--step", "99"), 2, "no captured rollouts for step 99"),
        ((run_dir, "--step", "last"), 2, "give a step number or latest"),
        ((run_dir, "--export", tmp_path / "x.png"), 2, "give an .html file"),
    ]
    for argv, want, needle in cases:
        code, _, err = _cli(capsys, *argv)
        assert code == want and needle in err and len(err.strip().splitlines()) == 1, (argv, err)
    alone = tmp_path / "skyrl_exports"
    (alone / "dumped_evals").mkdir(parents=True)
    code, _, err = _cli(capsys, alone)
    assert code == 2 and "export dir without its run dir" in err
    cap.step_path(bare.path, 3).parent.mkdir()
    cap.step_path(bare.path, 3).write_text("{torn")
    code, _, err = _cli(capsys, bare.path, "--step", "3")
    assert code == 1 and "is not a captured episode" in err
