"""Baselines beside a run: scripted policies and the untrained model, evaluated once (notebook 02)
and cached under OUT/baselines/ by what makes them differ (notebook 04 draws those that fit).

    beside = baselines.run_baselines("runs/demo", run, evals)      # those that fit this run
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from rlkit.episodes.evaluate import EvalResult
from rlkit.episodes.policies import scripted_policy
from rlkit.episodes.rollout import Trajectory
from rlkit.errors import UsageError
from rlkit.fsio import atomic_write_text
from rlkit.maze.sets import pinned_set_hash
from rlkit.notebook.report import BASE
from rlkit.notebook.workbench import base_model, evaluate_cached, model_policy, run_config
from rlkit.run import Run, open_run
from rlkit.train.config import TrainConfig
from rlkit.train.presets import preset as train_preset

SCRIPTED_BASELINES = ("random", "eps-oracle:0.25", "oracle")
"""The floor, a noisy planner and the ceiling: a trained model should land between them."""
INDEX = "index.json"
"""OUT/baselines/index.json: each cached baseline's file and the key it was evaluated under."""


def baseline_key(name: str, cfg: TrainConfig, *, samples: int, seed: int) -> dict[str, Any]:
    """A baseline's cache key: policy (`base`: with its model), test set, env, samples, seed."""
    key: dict[str, Any] = {
        "policy": name,
        "test_set_hash": pinned_set_hash(cfg.task.eval_set),
        "env": asdict(cfg.task.env),
        "history": cfg.task.history,
        "samples": samples,
        "seed": seed,
    }
    if name == BASE:
        key["model"] = {"model": asdict(cfg.model), "build_seed": cfg.schedule.seed}
    return json.loads(json.dumps(key, default=str))


def _index(root: Path) -> dict[str, dict[str, Any]]:
    """Cached file name -> its key, in the order they were written."""
    try:
        return json.loads((root / INDEX).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise UsageError(f"{root / INDEX} is not JSON ({e}): delete it to re-evaluate") from e


def baseline_evals(
    out_dir: str | Path,
    preset: str,
    *,
    samples: int,
    seed: int = 0,
    policies: tuple[str, ...] = (*SCRIPTED_BASELINES, BASE),
) -> dict[str, EvalResult]:
    """Scripted policies and the untrained model (`base`) on the preset's test set, cached."""
    cfg = train_preset(preset)
    root = Path(out_dir) / "baselines"
    index = _index(root)
    results = {}
    for name in policies:
        if name == BASE:
            make = partial(model_policy, base_model(preset, out_dir), cfg)
        else:
            make = partial(scripted_policy, name)
        key = baseline_key(name, cfg, samples=samples, seed=seed)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        file = f"{name.replace(':', '_').replace('/', '_')}-{digest}.json"
        results[name], _ = evaluate_cached(
            root / file, make, samples=samples, task=cfg.task, seed=seed, label=name
        )
        index.pop(file, None)
        index[file] = key  # the newest last: `run_baselines` prefers it
        atomic_write_text(root / INDEX, json.dumps(index, indent=1) + "\n")
    return results


def _legacy(root: Path, index: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Files cached before the key existed, keyed by policy and test set, marked `legacy`."""
    out = {}
    for path in sorted(root.glob("*.json")):
        if path.name != INDEX and path.name not in index:
            r = EvalResult.load(path)
            out[path.name] = {"policy": r.policy, "test_set_hash": r.test_set_hash, "legacy": True}
    return out


def _cached(out_dir: str | Path, want: Callable[[dict[str, Any]], bool]) -> dict[str, Path]:
    """`{policy: newest cached file}` whose key `want` accepts (keyed over legacy)."""
    root = Path(out_dir) / "baselines"
    index = _index(root)
    found: dict[str, Path] = {}
    for file, key in (_legacy(root, index) | index).items():
        if want(key) and (root / file).is_file():
            found[key["policy"]] = root / file
    names = (*SCRIPTED_BASELINES, BASE)
    return {n: found[n] for n in (*names, *sorted(set(found) - set(names))) if n in found}


def run_baselines(
    out_dir: str | Path, source: str | Path | Run, evals: dict[int, EvalResult]
) -> dict[str, EvalResult]:
    """The cached baselines on a run's test set and env (`base`: a local run's starting model)."""
    if not evals:
        return {}
    run = open_run(source)
    ref = evals[max(evals)]
    if run.backend == "local":  # its env and starting model, as a baseline's key records them
        key = baseline_key(BASE, run_config(run), samples=1, seed=0)
        env, model = key["env"], key["model"]
    else:  # the env config the run's evals played, if its config recorded it
        env, model = (run.config().get("datasets") or {}).get("env_config"), None
        env = env if isinstance(env, dict) else None

    def fits(key: dict[str, Any]) -> bool:
        if key.get("test_set_hash") != ref.test_set_hash:
            return False
        if key.get("legacy"):  # unknown model and env: a scripted policy on the same test set
            return key["policy"] != BASE
        if env and key.get("env") != env:
            return False
        return key["policy"] != BASE or (model is not None and key.get("model") == model)

    found = {n: EvalResult.load(p) for n, p in _cached(out_dir, fits).items()}
    return {n: r for n, r in found.items() if r.n_mazes == ref.n_mazes}


def baseline_trajectories(out_dir: str | Path, name: str) -> list[Trajectory]:
    """The episodes of one baseline's newest cached evaluation."""
    path = _cached(out_dir, lambda key: key["policy"] == name).get(name)
    if path is None:
        raise UsageError(f"no cached baseline {name!r} under {out_dir}: run notebook 02 first")
    return EvalResult.load(path).load_trajectories(path)
