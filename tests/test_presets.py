"""notebooks/presets/: every file feeds one notebook only parameters its `parameters` cell
declares, with the types of its defaults, and one setup's files describe one run.

The old single HyperPod file said "any notebook": papermill gave notebook 02 a cluster `preset`
it cannot train locally, and 01/04/05 an `/fsx` out_dir that a Studio kernel cannot write.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import papermill
import pytest
import yaml
from test_notebooks import STORED_NOTEBOOKS

from rlkit.notebook import workbench as training
from rlkit.notebook.demo import NOTEBOOK_DIR

PRESET_DIR = NOTEBOOK_DIR / "presets"
FILES = sorted(PRESET_DIR.glob("*/*.yaml"))
TYPES = {"int": int, "float": (int, float), "str": str, "bool": bool, "dict": dict, "list": list}


def declared(notebook: str) -> dict[str, dict]:
    """The notebook's parameters cell as papermill reads it: {name: {default, type}}."""
    return papermill.inspect_notebook(str(NOTEBOOK_DIR / f"{notebook}.ipynb"))


def test_presets_are_per_notebook_files():
    assert FILES, "no preset files"
    assert not list(PRESET_DIR.glob("*.yaml")), "a preset file must name its notebook"
    for path in FILES:
        assert path.stem in STORED_NOTEBOOKS, f"{path.name}: not a notebook's name"


def _local_preset(name: str) -> None:
    from rlkit.train.presets import preset

    preset(name)


def _any_preset(name: str) -> None:
    from rlkit.cluster import launch

    launch.plan_training(name, "runs/preset-check")


PRESET_CHECKS = {  # the preset names a notebook can take, checked by the call it makes
    "02_baseline_rollouts": _local_preset,  # its base model is a local preset's
    "03_train_grpo": _any_preset,
    "04_solve_rate_across_checkpoints": _any_preset,
    "05_replay_and_failures": _any_preset,
}


def problems(notebook: str, values: dict) -> list[str]:
    """What is wrong with giving `notebook` these papermill values ([] when nothing)."""
    params = declared(notebook)
    found = [f"{n} is not a parameter" for n in sorted(set(values) - set(params))]
    for name, value in values.items():
        if name not in params:
            continue
        default, kind = params[name]["default"], params[name]["inferred_type_name"]
        if default != "None" and kind in TYPES and not isinstance(value, TYPES[kind]):
            found.append(f"{name} is not {kind}")  # a None default takes any type
    out_dir = values.get("out_dir")
    if isinstance(out_dir, str) and PurePosixPath(out_dir).is_relative_to("/fsx"):
        found.append(f"out_dir {out_dir}: the Studio kernel writes it and does not mount /fsx")
    check = PRESET_CHECKS.get(notebook)
    if check and "preset" in values:
        try:
            check(values["preset"])
        except Exception as e:  # the notebook would fail on it the same way
            found.append(f"preset {values['preset']}: {e}")
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem[:2]}")
def test_a_preset_sets_only_what_its_notebook_declares(path: Path):
    assert problems(path.stem, yaml.safe_load(path.read_text())) == []


def test_the_old_any_notebook_file_fails_every_notebook_but_03():
    """The file this directory replaced, given to each notebook as its docs said."""
    old = {
        "address": "sagemaker_ray://rlkit/ray",
        "preset": "qwen3vl-8b-6gpu",
        "run_name": "maze-8b-a",
        "skyrl": {"nodes": 1, "runs_root": "/fsx/rlkit/runs"},
        "skyrl_export": "/fsx/rlkit/runs/maze-8b-a/exports",
        "out_dir": "/fsx/rlkit/notebooks/maze-8b-a",
        "probe_python": True,
        "preflight_preset": "qwen3vl-8b-6gpu",
        "wait_s": 0,
    }
    found = {name: problems(name, old) for name in STORED_NOTEBOOKS}
    assert any(p.startswith("preset qwen3vl-8b-6gpu") for p in found["02_baseline_rollouts"])
    for name in ("01_mazes", "04_solve_rate_across_checkpoints", "05_replay_and_failures"):
        assert any(p.startswith("out_dir /fsx") for p in found[name]), name
    assert all(found[name] for name in STORED_NOTEBOOKS if name != "03_train_grpo")


def test_a_setups_files_describe_one_run():
    for setup in sorted({p.parent for p in FILES}):
        files = {p.stem: yaml.safe_load(p.read_text()) for p in setup.glob("*.yaml")}
        addresses = {v["address"] for v in files.values() if "address" in v}
        assert len(addresses) <= 1, f"{setup.name}: addresses differ {addresses}"
        out_dirs = {v["out_dir"] for v in files.values() if "out_dir" in v}
        assert len(out_dirs) <= 1, f"{setup.name}: out_dirs differ {out_dirs}"
        train = files.get("03_train_grpo")
        if not train:
            continue
        # 03's values make a plan (nothing submitted), and 04/05 read the run it trains
        plan = training.plan_run(
            train["preset"],
            "runs/preset-check",
            address=train.get("address"),
            run_name=train.get("run_name"),
            skyrl=train.get("skyrl"),
            recipe=train.get("recipe"),
        )
        for name in ("04_solve_rate_across_checkpoints", "05_replay_and_failures"):
            if "run_dir" in files.get(name, {}):
                assert files[name]["run_dir"] == plan.run_dir, name
