"""The cluster presets' eval protocols (`eval_protocol`: seed, sampled, both): the dry run's
command and eval line, SkyRL's own config classes on each, one-line refusals, and a run's
dumps read back per protocol by the bridge, the monitor's line, `open_run` and notebook 04's
report, each rate labelled with its protocol."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from unittest.mock import patch

import pytest
import scripted_engine as se
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.dataset import PromptDataset
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.train.utils import validate_cfg
from skyrl.train.utils.trainer_utils import build_dataloader

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.bridge import MetricsBridge
from rlkit.cluster.skyrl.entry import ensure_datasets, parse_args
from rlkit.cluster.skyrl.experiment import RlkitTrainer, sampled_eval_cfg
from rlkit.cluster.skyrl.overrides import RunPaths, build_overrides
from rlkit.cluster.skyrl.preset_checks import eval_plan
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.env.data import read_rows
from rlkit.errors import UsageError
from rlkit.maze.core import Action, Maze, shortest_path
from rlkit.maze.parsing import format_action
from rlkit.notebook import report, workbench
from rlkit.notebook.progress import read_progress
from rlkit.run import open_run
from rlkit.run.rundir import RunDir
from rlkit.run.skyrl_dumps import read_eval_dump

SOLVED = 28
"""Mazes the dumps' policy solves of the 64: the seed's own starting count."""
SEED_HEADLINE = "28/64 = 43.75% [31.4%, 56.7%]"


def dry_run(capsys, *sets: str) -> tuple[list[str], str]:
    argv = ["submit", "--preset", "qwen3vl-8b", "--address", "http://127.0.0.1:8265"]
    for s in sets:
        argv += ["--set", s]
    assert rlkit_main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    (command,) = [ln for ln in out if ln.startswith("command:")]
    (evals,) = [ln for ln in out if ln.startswith("eval:")]
    _, overrides = parse_args(shlex.split(command.removeprefix("command:"))[3:])
    return overrides, evals


@pytest.mark.parametrize(
    ("protocol", "samples", "temperature"),
    [("seed", 1, 0.0), ("sampled", 4, 1.0), ("both", 1, 0.0)],
)
def test_each_protocol_is_a_valid_skyrl_config(capsys, protocol, samples, temperature):
    overrides, line = dry_run(capsys, f"eval_protocol={protocol}")
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)
    assert cfg.trainer.eval_before_train and cfg.trainer.dump_eval_results
    assert cfg.generator.eval_n_samples_per_prompt == samples
    assert cfg.generator.eval_sampling_params.temperature == temperature
    seed = "the seed's protocol (64 mazes, greedy, one sample a maze, exact CI)"
    sampled = "sampled (64 mazes x 4 at temperature 1.0"
    assert (seed in line) == (protocol != "sampled") and (sampled in line) == (protocol != "seed")
    assert "before training" in line


def test_the_sampled_eval_of_both_is_skyrl_config_beside_the_seed_one(capsys):
    overrides, _ = dry_run(capsys, "eval_protocol=both", "eval_samples=8")
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    sampled = sampled_eval_cfg(cfg, 8, 1.0)
    validate_cfg(sampled)
    assert sampled.generator.eval_n_samples_per_prompt == 8
    assert sampled.generator.eval_sampling_params.temperature == 1.0
    assert sampled.trainer.export_path == f"{cfg.trainer.export_path}/sampled"
    assert cfg.generator.eval_n_samples_per_prompt == 1  # SkyRL's own eval stays the seed's
    assert cfg.generator.eval_sampling_params.temperature == 0.0


def test_a_seed_eval_on_part_of_the_set_says_so():
    assert "not the whole set" in eval_plan(get_preset("qwen3vl-8b", eval_mazes=16))
    assert "not the whole set" not in eval_plan(get_preset("qwen3vl-8b"))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"eval_protocol": "greedy"}, "eval_protocol 'greedy' must be one of seed, sampled, both"),
        ({"eval_mazes": 65}, r"eval_mazes \(65\) must be 1..64"),
        (
            {"eval_protocol": "sampled", "eval_temperature": 0},
            "a greedy eval is eval_protocol=seed",
        ),
        ({"eval_protocol": "both", "eval_samples": 0}, r"eval_samples >= 1 \(0\)"),
    ],
)
def test_bad_eval_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(UsageError, match=message) as e:
        get_preset("qwen3vl-8b", **settings)
    assert "\n" not in str(e.value)


def test_the_small_presets_keep_their_sampled_eval():
    for name in ("qwen3vl-2b-smoke", "skyrl-tiny-cpu"):
        assert get_preset(name).eval.eval_protocol == "sampled"
    assert get_preset("qwen3vl-8b").eval_episodes == 64
    assert get_preset("qwen3vl-8b", eval_protocol="both").eval_episodes == 64 + 64 * 4


def oracle_answer(maze: Maze) -> str:
    """The shortest path's answers as SkyRL decodes a multi-turn response."""
    path = shortest_path(maze)
    moves = [
        next(a for a in Action if (a.delta[0] + c[0], a.delta[1] + c[1]) == n)
        for c, n in zip(path, path[1:], strict=False)
    ]
    between = "<|im_end|>\n<|im_start|>user\nobservation<|im_end|>\n<|im_start|>assistant\n"
    return between.join(format_action(m) for m in moves) + "<|im_end|>"


def write_dump(export_dir: Path, rows: list[dict], samples: int, solved: int = SOLVED) -> None:
    """SkyRL's eval dump at step 0, a file a set: the first `solved` mazes of each set solved,
    each maze `samples` times."""
    step_dir = export_dir / "dumped_evals" / "global_step_0_evals"
    step_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[str]] = {}
    for row in rows:
        info = row["extra_info"]
        extras = {k: row[k] for k in ("data_source", "reward_spec", "extra_info")}
        maze = Maze.from_dict(json.loads(info["maze"]))
        won = info["index"] < solved
        for _ in range(samples):
            entry = {
                "output_response": oracle_answer(maze) if won else "no idea<|im_end|>",
                "score": 1.0 if won else 0.0,
                "stop_reason": "stop",
                "env_class": "rlkit-maze",
                "env_extras": {**extras, "max_turns": info.get("max_turns", 12)},
                "data_source": row["data_source"],
            }
            files.setdefault(row["data_source"].replace("/", "_"), []).append(json.dumps(entry))
    for name, lines in files.items():
        (step_dir / f"{name}.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def both_run(tmp_path_factory) -> Path:
    """A SkyRL run dir that evaluated step 0 under both protocols, as its bridge logged it."""
    run = tmp_path_factory.mktemp("runs") / "both"
    _, evals = ensure_datasets(str(run / "data"), 1, "test")
    rows = read_rows(evals)
    temp = {"generator.eval_sampling_params.temperature": "0.0"}
    RunDir(run).init(preset="qwen3vl-8b", seed=0, backend="skyrl", config={"overrides": temp})
    write_dump(run / "exports", rows, samples=1)
    write_dump(run / "exports" / "sampled", rows, samples=2)
    bridge = MetricsBridge(run, run / "exports", ray_gauges=False, mlflow=False, greedy=True)
    rate = SOLVED / 64
    bridge.log({"eval/all/avg_score": rate, "eval/sampled/all/avg_score": rate}, step=0)
    return run


def test_the_monitor_line_names_each_protocol(both_run):
    (record,) = open_run(both_run).metrics()
    assert record["eval/seed_protocol"] == 1.0 and record["eval/solved"] == SOLVED
    assert record["eval/sampled_seed_protocol"] == 0.0 and record["eval/sampled_samples"] == 2
    line = read_progress(both_run).eval_text()
    assert line.startswith(f"eval step 0: {SEED_HEADLINE} (seed's protocol); 43.8% [")
    assert line.endswith("(sampled, 2 a maze)")


def test_open_run_and_notebook_04_read_both_protocols(both_run):
    run = open_run(both_run)
    seed, sampled = run.evals()[0], run.sampled_evals()[0]
    assert (seed.protocol, seed.headline) == ("seed", SEED_HEADLINE)
    assert (sampled.protocol, sampled.samples, sampled.solve_rate) == ("rlkit", 2, SOLVED / 64)
    assert workbench.checkpoint_evals(run) == {0: sampled}  # the curve: the sampled eval
    assert workbench.final_greedy_eval(run) == seed
    rlkit_line, seed_line = report.protocol_lines({0: sampled}, seed)
    assert rlkit_line.startswith("rlkit's protocol: ") and "2 samples" in rlkit_line
    assert seed_line.startswith("the seed's protocol: ") and SEED_HEADLINE in seed_line
    assert sampled.protocol_label == "rlkit's protocol (sampled, 2 a maze)"
    assert seed.protocol_label == "seed's protocol (greedy, one sample a maze)"


def test_both_runs_skyrl_evaluate_again_and_dumps_it_apart(tmp_path, encoder):
    """`RlkitTrainer.eval` with `sampled_eval` (eval_protocol=both) on SkyRL's own `evaluate`,
    VLM generator and dump writer, the engine scripted; the trainer is built without Ray (its
    eval reads only these attributes)."""
    sky = get_preset(
        "qwen3vl-8b-6gpu",
        runs_root=str(tmp_path),
        eval_set="test",
        eval_protocol="sampled",  # 8 mazes: the seed's protocol needs 64, set by hand below
        eval_mazes=8,
        eval_samples=2,
        dataloader_workers=0,
    )
    paths = RunPaths.for_run(sky, "both")
    ensure_datasets(paths.data_dir, 4, "test", 8)
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(sky, "both"))
    cfg.generator.eval_n_samples_per_prompt = 1  # SkyRL's own eval as eval_protocol=both has it
    cfg.generator.eval_sampling_params.temperature = 0.0
    tok = encoder.tokenizer
    ds = PromptDataset(cfg.data.val_data, tok, cfg.trainer.max_prompt_length, num_workers=1)
    engine = se.ScriptedEngine(encoder, [ds.dataframe[i] for i in range(len(ds))], se.mixed)
    trainer = RlkitTrainer.__new__(RlkitTrainer)
    trainer.cfg, trainer.tokenizer, trainer.global_step = cfg, tok, 0
    trainer.eval_dataloader = build_dataloader(cfg, ds, is_train=False)
    trainer.generator = SkyRLVLMGymGenerator(cfg.generator, cfg.environment.skyrl_gym, engine, tok)
    trainer.trajectory_logger = trainer.tracker = None
    trainer.sampled_eval = (2, 1.0)
    generate = trainer.generator.generate

    async def fresh_games(generator_input):  # the scripted engine keeps each session's game
        engine.sessions.clear()  # state (a real one keeps none): the second eval starts anew
        return await generate(generator_input)

    trainer.generator.generate = fresh_games
    with patch("skyrl.train.generators.skyrl_vlm_generator.decode_mm_kwargs", se.decode_features):
        metrics = asyncio.run(trainer.eval())
    export = Path(cfg.trainer.export_path)
    seed, sampled = read_eval_dump(export, 0), read_eval_dump(export / "sampled", 0)
    assert (len(seed.episodes), len(sampled.episodes)) == (8, 16)
    assert metrics["eval/all/avg_score"] == seed.result().solve_rate
    assert metrics["eval/sampled/all/avg_score"] == sampled.result().solve_rate
    assert "eval/all/pass_at_1" in metrics and "eval/sampled/all/pass_at_2" in metrics
    assert cfg.trainer.export_path == str(export)  # SkyRL's own config left as it was
