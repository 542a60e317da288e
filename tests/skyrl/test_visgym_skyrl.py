"""SkyRL on the seed's task (issue 37, items 4 and 6): the cluster presets play VisGym's
`maze_2d/easy` by default, and SkyRL's own code agrees with rlkit on it.

- the presets' defaults: `visgym-easy`, 18 turns (SkyRL's recipe), 19 images a prompt; another
  eval set brings its own turn budget (`test-large` is one `--set` away);
- SkyRL's own VLM generator on the rows `rlkit data --set visgym-easy` writes, read by SkyRL's
  dataset, with scripted engines (an oracle that stops on the target, a wall-bumper, one that
  stops short, one that never stops, garbage): SkyRL's reward is rlkit's verdict on the replay;
- rlkit's generator (what `RlkitExp` runs) takes `stop`, and the capture's move probe gives a
  `stop` turn no bars without asking the engine;
- `rlkit submit --preset skyrl-tiny-cpu --set eval_set=visgym-easy --dry-run` passes SkyRL's
  config parsing and `validate_cfg`.
"""

from __future__ import annotations

import asyncio
import shlex

import pytest
import scripted_engine as se
import test_generator as tg  # its play/replay helpers: the same SkyRL path, another set
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.dataset import PromptDataset
from skyrl.train.utils import validate_cfg

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.capture import EngineProbe
from rlkit.cluster.skyrl.entry import parse_args
from rlkit.cluster.skyrl.generator import RlkitVLMGenerator
from rlkit.cluster.skyrl.overrides import build_overrides
from rlkit.cluster.skyrl.presets import PRESETS, get_preset
from rlkit.maze import rules

PLAYERS = {
    "oracle": se.stopping_oracle,
    "wall-bumper": se.wall_bumper,
    "stop-early": se.stop_early,
    "never-stop": se.never_stop,
    "garbage": se.garbage,
}


@pytest.fixture(scope="module")
def visgym(tmp_path_factory, tokenizer) -> PromptDataset:
    """visgym-easy's eval rows as `rlkit data` writes them, read by SkyRL's dataset."""
    out = tmp_path_factory.mktemp("data-visgym")
    assert rlkit_main(["data", "--out", str(out), "--train", "4", "--set", "visgym-easy"]) == 0
    ds = PromptDataset([str(out / "eval.parquet")], tokenizer, 4096, num_workers=1)
    assert len(ds) == 64  # none dropped by SkyRL's prompt-length filter
    return ds


def preset_config() -> SkyRLTrainConfig:
    return SkyRLTrainConfig.from_cli_overrides(build_overrides(get_preset("qwen3vl-8b"), "v"))


@pytest.mark.parametrize("name", [n for n in PRESETS if n != "skyrl-tiny-cpu"])
def test_cluster_presets_play_the_seeds_task(name):
    p = get_preset(name)
    assert (p.task.eval_set, p.task.max_turns, p.images_per_episode) == ("visgym-easy", 18, 19)
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(p, "r"))
    assert cfg.generator.max_turns == 18
    kwargs = cfg.generator.inference_engine.engine_init_kwargs
    assert dict(kwargs["limit_mm_per_prompt"]) == {"image": 19}
    # rlkit's own mazes are one setting away, with their own 24-turn budget
    large = get_preset(name, eval_set="test-large")
    assert (large.task.max_turns, large.images_per_episode) == (24, 25)
    assert get_preset(name, eval_set="test-large", max_turns=20).task.max_turns == 20
    assert get_preset("skyrl-tiny-cpu").task.eval_set == "test"  # the tiny model's own view


@pytest.mark.parametrize("name", list(PLAYERS))
def test_skyrl_rewards_are_rlkit_verdicts_on_visgym(visgym, encoder, name):
    cfg = preset_config()  # the preset's own 18 turns and max_input_length
    batch, out, engine = tg.play(cfg, visgym, encoder, PLAYERS[name], mazes=range(4), samples=1)
    solved = []
    for i in range(len(batch["prompts"])):
        s = engine.sessions[tg.session_of(batch, i)]
        env = tg.replay(batch["env_extras"][i], s.texts)
        assert env.done and out["stop_reasons"][i] != "length"
        assert sum(out["rewards"][i]) == rules.reward(env.state)  # 1 only stopped on target
        solved.append(rules.solved(env.state))
        if name == "stop-early":
            assert env.terminated and env.state.stopped and not solved[-1]
        if name in ("never-stop", "wall-bumper", "garbage"):
            assert env.truncated and env.state.turns == 18
        if name == "garbage":
            assert env.state.parse_errors == 18
    assert all(solved) if name == "oracle" else not any(solved)
    assert out["rollout_metrics"]["environment/solve_rate"] == sum(solved) / len(solved)


def test_rlkits_generator_takes_stop_and_the_probe_skips_it(visgym, encoder):
    cfg = preset_config()
    batch, out, engine = tg.play(
        cfg, visgym, encoder, se.stopping_oracle, mazes=range(2), samples=1,
        generator_cls=RlkitVLMGenerator,
    )  # fmt: skip
    assert [sum(r) for r in out["rewards"]] == [1.0, 1.0]
    assert all(s.texts[-1].endswith("<action>stop</action>") for s in engine.sessions.values())
    tok = encoder.tokenizer
    probe = EngineProbe("http://127.0.0.1:9", "m", tok)  # a closed port: nothing is asked
    ids = tok.encode("I am on it. <action>stop</action>", add_special_tokens=False)
    assert asyncio.run(probe.move_probs([1, 2], ids, None, "0_0", None)) is None


def test_the_cpu_preset_dry_runs_visgym_and_skyrl_validates_it(capsys, tmp_path):
    argv = ["submit", "--preset", "skyrl-tiny-cpu", "--set", "eval_set=visgym-easy"]
    assert rlkit_main([*argv, "--runs-root", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    # VisGym's mazes drawn at 8 px for the tiny model (cell_px): 72 px, upscaled to 64 px
    assert "image:         visgym-easy 72x72 -> 64x64 by the processor, 16 tokens" in out
    assert "canonical 6" in out and "budget:        every turn fits" in out  # `stop`: 6 tokens
    (line,) = [ln for ln in out.splitlines() if ln.startswith("command:")]
    argv = shlex.split(line.removeprefix("command:"))
    job, overrides = parse_args(argv[3:])
    assert job.sky.task.eval_set == "visgym-easy"
    assert job.sky.task.cell_px == 8  # the entry writes the rows at 8 px
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)  # SkyRL's own checks
    assert cfg.generator.max_turns == 18 and cfg.generator.max_input_length == 3000
    assert cfg.generator.sampling_params.max_generate_length == 10  # stop's 6 + 4
