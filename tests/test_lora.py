"""LoRA and a frozen vision side on the local backend (`rlkit.model.config.Tuning`,
`rlkit.model.load`): frozen weights keep every bit over GRPO steps, a LoRA run trains its
adapters only, resumes exactly, and its checkpoints load wherever a checkpoint is read (the run
reader, `rlkit eval`, notebook 04's scoring); an adapter dir as SkyRL exports it loads merged;
bad values are one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from rlkit.cli import main as cli
from rlkit.errors import RlkitError, UsageError
from rlkit.model.build import build_tiny
from rlkit.model.config import VISION_PARTS, Tuning
from rlkit.model.load import is_adapter_dir, load, trainable, tune
from rlkit.notebook.workbench import checkpoint_evals
from rlkit.run import open_run
from rlkit.train.presets import preset
from rlkit.train.trainer import Trainer, train
from rlkit.train.update_check import UpdateCheck, check_update


def weights(run, step: int) -> dict[str, torch.Tensor]:
    return load_file(run / f"global_step_{step}" / "policy" / "model.safetensors")


def smoke(tmp_path, name: str, **sets):
    """A smoke run (4 warm-start steps, then 2 GRPO steps: checkpoints 4 and 6)."""
    cfg = preset("smoke").with_overrides({"schedule.steps": 2, **sets})
    train(cfg, tmp_path / name, progress=False)
    return cfg, tmp_path / name


def vision(name: str, part: str) -> bool:
    import re

    return re.fullmatch(VISION_PARTS[part], name) is not None


def test_a_frozen_vision_side_keeps_every_bit_over_grpo_steps(tmp_path):
    _, run = smoke(tmp_path, "r", freeze_vision="tower+merger")
    start, end = weights(run, 4), weights(run, 6)  # the warm start's end, the last GRPO step
    frozen = [k for k in start if vision(k, "tower+merger")]
    assert len(frozen) > 10 and all(torch.equal(start[k], end[k]) for k in frozen)
    assert any(not torch.equal(start[k], end[k]) for k in start if k not in frozen)
    saved = torch.load(run / "global_step_6" / "trainer_state.pt", weights_only=False)
    n_opt = sum(len(g["params"]) for g in saved["optimizer"]["param_groups"])
    assert n_opt == len(start) - len(frozen)  # frozen parameters are not in the optimizer


def test_a_lora_run_trains_adapters_only_and_resumes_exactly(tmp_path):
    sets = {"model.lora_rank": 4, "model.freeze_vision": "tower", "kl_loss_coef": 0.05}
    cfg, run = smoke(tmp_path, "r", **sets)
    base, end = weights(run, 4), weights(run, 6)
    adapted = {k for k in end if not torch.equal(base[k], end[k])}
    assert adapted and all(k.endswith("_proj.weight") or "merger" in k for k in adapted)
    assert not any(vision(k, "tower") for k in adapted)  # no adapters on the frozen tower
    assert not any("norm" in k or "embed" in k for k in adapted)  # base weights never train
    ref = load_file(run / "reference_policy" / "model.safetensors")
    assert all(torch.equal(ref[k], base[k]) for k in base)  # LoRA's base and the KL's reference
    adapter = load_file(run / "global_step_6" / "adapter" / "adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)
    assert not is_adapter_dir(run / "global_step_6" / "policy")  # merged: a plain HF dir
    # killed after the warm start's end: the resumed run reloads the base and the adapter
    Trainer(cfg, tmp_path / "k", progress=False).fit(stop_at_step=4)
    train(cfg, tmp_path / "k", progress=False)
    again = weights(tmp_path / "k", 6)
    assert all(torch.equal(end[k], again[k]) for k in end)


def test_a_lora_checkpoint_loads_in_the_run_reader_eval_and_notebook_scoring(tmp_path, capsys):
    cfg, run = smoke(tmp_path, "r", **{"model.lora_rank": 4})
    ckpt = open_run(run).latest_checkpoint()
    assert ckpt.step == 6 and ckpt.hf_export is not None
    argv = ["eval", "--policy", str(ckpt.hf_export), "--json", "--mazes", "2"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["n_mazes"] == 2
    (run / "evals" / "global_step_6.json").unlink()  # notebook 04 scores a checkpoint anew
    assert 6 in checkpoint_evals(run)
    shutil.rmtree(run / "reference_policy")  # the adapter's base: a resume cannot go on
    with pytest.raises(RlkitError, match="reference_policy is missing"):
        train(cfg, run, progress=False)


def test_an_adapter_dir_as_skyrl_exports_it_loads_merged(tmp_path, capsys):
    base_dir = build_tiny(tmp_path / "base", seed=0)
    model = load(base_dir).model
    adapter = tune(model, Tuning(lora_rank=4, freeze_vision="tower+merger"), seed=0)
    with torch.no_grad():
        for name, p in adapter.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    export = tmp_path / "run" / "exports" / "global_step_10" / "policy"
    adapter.save_pretrained(export)  # what SkyRL's save_hf_model writes for a LoRA policy,
    for f in base_dir.iterdir():  # beside the model's config and processor files
        if f.suffix in (".json", ".jinja") and f.name != "adapter_config.json":
            shutil.copy(f, export / f.name)
    assert is_adapter_dir(export)
    merged = load(export).model
    want = {k: v for k, v in adapter.merge_and_unload().state_dict().items()}
    got = merged.state_dict()
    assert want.keys() == got.keys()
    assert all(torch.allclose(want[k], got[k]) for k in want)
    (ckpt,) = open_run(tmp_path / "run").checkpoints()  # a SkyRL run dir, export only
    assert ckpt.hf_export == export
    assert cli.main(["eval", "--policy", str(export), "--json", "--mazes", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["n_mazes"] == 2
    assert cli.main(["eval", "--policy", str(export), "--engine", "vllm"]) == 2  # no weights
    err = capsys.readouterr().err.strip()
    assert "holds a LoRA adapter and no weights" in err and "\n" not in err


def test_a_lora_update_learns_on_its_batch():
    """Scripted episodes (the same on every CPU) through the real score and update, with only
    the adapters trainable: solved answers gain on their groups' failed ones. Seeds 0-7 gained
    0.075-0.243 nats a token (seed 0: 0.174, 3.5x the check's 0.05; the local-tiny update
    check's float-noise spread is ~0.02 a seed, docs/tests.md), so another CPU's kernels leave
    the verdict alone."""
    tuning = Tuning(lora_rank=8, freeze_vision="tower+merger")
    recipe = preset("local-tiny").recipe
    check = check_update(recipe, seed=0, mazes=8, group_size=4, steps=5, lr=5e-3, tuning=tuning)
    assert check.solved_gain > UpdateCheck.MIN_GAIN, check.summary()


def test_lora_leaves_the_base_and_the_frozen_side_out_of_the_optimizer(tmp_path):
    model = load(build_tiny(tmp_path / "m", seed=0)).model
    n_all = len(list(model.parameters()))
    tune(model, Tuning(lora_rank=2, lora_targets="q_proj,v_proj"), seed=0)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n and ("q_proj" in n or "v_proj" in n) for n in names)
    assert len(trainable(model)) == len(names) < n_all


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("model.lora_rank", "-1", "lora_rank (-1) must be >= 0"),
        ("lora_alpha", "0", "lora_alpha (0) must be > 0"),
        ("lora_targets", "q_proj,qq_proj", "qq_proj is not a Qwen3-VL linear layer"),
        ("freeze_vision", "merger", "freeze_vision 'merger': use one of none, tower"),
    ],
)
def test_bad_values_are_refused_in_one_line(key, value, says):
    with pytest.raises(UsageError) as e:
        preset("smoke").with_overrides({key: value})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_local_dry_run_says_what_trains(capsys):
    argv = ["submit", "--preset", "smoke", "--set", "lora_rank=8", "--set", "freeze_vision=tower"]
    assert cli.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "lora:          rank 8, alpha 16, targets all-linear, vision tower frozen" in out
