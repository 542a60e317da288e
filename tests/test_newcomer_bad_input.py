"""Bad input a newcomer tries, each answered in one actionable line with nothing lost: a
truncated eval file, a RAY_ADDRESS rlkit cannot use, a maze number outside its set, the
HyperPod toolkit's kubeconfig advice, a damaged captured step, another trainer's `--set` key,
and the commands rlkit's own help and notebooks print."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from rlkit.cli.main import build_parser
from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.address import resolve_address, toolkit_reason
from rlkit.episodes.evaluate import EvalResult
from rlkit.episodes.policies import scripted_policy
from rlkit.episodes.rollout import run_episodes
from rlkit.errors import RlkitError, UsageError
from rlkit.maze.generation import generate
from rlkit.run import captures as cap
from rlkit.run.rundir import RunDir


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = rlkit_main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def no_address_env(monkeypatch):
    for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(name, raising=False)


def test_a_truncated_eval_file_is_one_line_naming_it(tmp_path, capsys):
    code, _, _ = cli(capsys, "eval", "--policy", "oracle", "--out", tmp_path / "oracle.json")
    assert code == 0
    good = json.loads((tmp_path / "oracle.json").read_text())
    run = RunDir(tmp_path / "run")
    run.init(preset="local-tiny", seed=0, backend="local")
    run.evals_dir.mkdir()
    run.eval_path(0).write_text(json.dumps({**good, "step": 0}))
    run.eval_path(204).write_text(json.dumps({**good, "step": 204})[:300])  # a torn copy

    code, _, err = cli(capsys, "plot", "--run-dir", run.path, "--out", tmp_path / "solve.png")
    line = one_line(err)
    assert code == 1 and "evals/global_step_204.json is not valid JSON" in line
    assert "remove it" in line
    run.eval_path(204).unlink()  # what the line says to do: the run reads on without it
    code, out, _ = cli(capsys, "plot", "--run-dir", run.path, "--out", tmp_path / "solve.png")
    assert code == 0 and (tmp_path / "solve.png").stat().st_size > 0

    torn = tmp_path / "torn.json"
    torn.write_text((tmp_path / "oracle.json").read_text()[:200])
    with pytest.raises(UsageError, match=r"torn\.json is not valid JSON .* write it again"):
        EvalResult.load(torn)


def test_an_unusable_ray_address_from_the_environment_says_where_it_came_from(monkeypatch, capsys):
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    code, _, err = cli(capsys, "submit", "--preset", "qwen3vl-8b", "--dry-run")
    line = one_line(err)
    assert code == 2 and line.startswith("rlkit submit: error: RAY_ADDRESS from the environment")
    assert "not the GCS port 6379" in line and "unset RAY_ADDRESS" in line
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    with pytest.raises(UsageError, match=r"RAY_ADDRESS from the environment: ray://head.*unset"):
        resolve_address(None)
    # given explicitly, the same value is the user's own: no mention of the environment
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(UsageError) as given:
        resolve_address("10.0.0.1:6379")
    assert "environment" not in str(given.value)


def test_a_maze_number_outside_its_set_is_refused(capsys):
    code, _, err = cli(capsys, "maze", "--set", "test", "--seed", "99")
    assert code == 2 and "--seed 99: set test holds mazes 0..63" in one_line(err)
    code, _, err = cli(capsys, "maze", "--set", "test", "--seed", "-1")
    assert code == 2 and "holds mazes 0..63" in err
    code, out, _ = cli(capsys, "maze", "--set", "test", "--seed", "63")
    assert code == 0 and "path_length=" in out
    code, out, _ = cli(capsys, "maze", "--seed", "99")  # no set: any generator seed
    assert code == 0 and "path_length=" in out


def test_the_toolkits_wrong_kubeconfig_command_is_dropped(monkeypatch, tmp_path, capsys):
    """The toolkit advises `aws eks update-kubeconfig --cluster-name`; the AWS CLI's flag is
    `--name`, which rlkit's advice gives: one command, the right one."""
    pytest.importorskip("toolkit_for_ray_on_sagemaker_ai")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = cli(capsys, "jobs", "list", "--address", "sagemaker_ray://x")
    line = one_line(err)
    assert code == 1 and "Kubeconfig not found" in line  # the toolkit's diagnosis stays
    assert "--cluster-name" not in line and "aws eks update-kubeconfig --name EKS_CLUSTER" in line
    for said in (
        "Unable to obtain a bearer token from kubeconfig. The user entry has neither a 'token' "
        "nor an 'exec' credential plugin configured. For EKS clusters, run: aws eks "
        "update-kubeconfig --cluster-name <cluster>",
        "Authentication failed when calling the K8s API. Your EKS credentials may have expired. "
        "Try running: aws eks update-kubeconfig --cluster-name <cluster>",
    ):
        kept = toolkit_reason(said)
        assert "--cluster-name" not in kept and kept.endswith(".") and len(kept) > 40
    assert toolkit_reason("Resource not found for x.") == "Resource not found for x."


def _captured_run(tmp_path) -> RunDir:
    run = RunDir(tmp_path / "run")
    run.init(preset="local-tiny", seed=0, backend="local")
    mazes = [generate(3, 3, seed=s) for s in range(2)]
    for step in (3, 4, 5):
        trajs = run_episodes(scripted_policy("eps-oracle:0.5"), mazes, samples=2, seed=step)
        episodes = [cap.CapturedEpisode(step, t.maze_index, 0.0, t) for t in trajs]
        cap.write_step(run.path, step, episodes, keep=None)
    return run


def test_a_damaged_captured_step_is_skipped_with_a_warning(tmp_path, capsys):
    run = _captured_run(tmp_path)
    damaged = cap.step_path(run.path, 4)
    damaged.write_text(damaged.read_text()[:-40] + "\n")  # its last line cut short
    code, out, err = cli(capsys, "rollouts", run.path)
    assert code == 0
    steps = [line.split()[0] for line in out.splitlines()[2:]]
    assert steps == ["3", "5"], out
    warning = one_line(err)
    assert warning.startswith("warning: step 4 skipped: ") and "global_step_4.jsonl:" in warning
    code, out, err = cli(capsys, "rollouts", run.path, "--json")
    listed = json.loads(out)
    assert [s["step"] for s in listed["steps"]] == [3, 5]
    assert [s["step"] for s in listed["skipped"]] == [4] and "damaged" in listed["skipped"][0][
        "error"
    ]
    code, _, err = cli(capsys, "rollouts", run.path, "--step", "4")  # asked for: still an error
    assert code == 1 and "global_step_4.jsonl" in one_line(err)
    with pytest.raises(RlkitError, match="damaged"):
        cap.read_step(run.path, 4)


def test_another_trainers_set_key_names_this_ones(no_address_env, capsys):
    code, _, err = cli(
        capsys, "submit", "--preset", "qwen3vl-8b", "--dry-run", "--set", "grpo.lr=1e-4"
    )
    assert code == 2 and "'grpo.lr' (did you mean batch.lr?)" in one_line(err)
    code, _, err = cli(
        capsys, "submit", "--preset", "qwen3vl-8b", "--dry-run", "--set", "grpo.kl_loss_coef=0.01"
    )
    assert code == 2 and "(did you mean recipe.kl_loss_coef?)" in err
    code, _, err = cli(
        capsys, "submit", "--preset", "local-tiny", "--dry-run", "--set", "batch.lr=1e-4"
    )
    assert code == 2 and "(did you mean warm_start.lr or grpo.lr?)" in one_line(err)
    code, _, err = cli(capsys, "submit", "--preset", "qwen3vl-8b", "--dry-run", "--set", "x.y=1")
    assert code == 2 and "did you mean" not in err  # nothing ends with y: no guess


def test_train_help_names_every_local_preset():
    from rlkit.train.presets import PRESETS

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    preset_help = next(a.help for a in train._actions if "--preset" in a.option_strings)
    assert preset_help.split(" | ") == list(PRESETS)


def test_the_seed_protocol_command_notebook_02_prints_runs(capsys):
    from rlkit.notebook.visgym import SEED_TASK

    named = SEED_TASK.split("`rlkit ", 1)[1].split("`", 1)[0]
    argv = shlex.split(named.replace("POLICY", "oracle"))
    assert argv[:3] == ["eval", "--policy", "oracle"]
    code, out, _ = cli(capsys, *argv)
    assert code == 0 and "64/64" in out


def _budget_line(capsys, *sets: str) -> str:
    argv = ["submit", "--preset", "qwen3vl-8b", "--dry-run"]
    code, out, _ = cli(capsys, *argv, *(w for s in sets for w in ("--set", s)))
    assert code == 0
    return next(line for line in out.splitlines() if line.startswith("budget:"))


def test_the_dry_runs_budget_warning_names_settings_that_fix_it(no_address_env, capsys):
    """Each setting the warning names lets every turn play at full length, and is the tightest
    that does: one token less (or more) warns again."""
    warned = _budget_line(capsys)
    m = re.search(r"max_input_length >= (\d+), or max_generate_length <= (\d+)$", warned)
    assert "warn:" in warned and m, warned
    need, longest = map(int, m.groups())
    assert _budget_line(capsys, f"max_input_length={need}").endswith("every turn fits")
    assert "warn:" in _budget_line(capsys, f"max_input_length={need - 1}")
    assert _budget_line(capsys, f"max_generate_length={longest}").endswith("every turn fits")
    assert "warn:" in _budget_line(capsys, f"max_generate_length={longest + 1}")
