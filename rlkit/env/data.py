"""Datasets in SkyRL's row format (parquet): the training stream and the 64-maze eval split, each
row's maze in `extra_info.maze`: docs/skyrl-integration.md#the-rows-and-the-env-envdatapy-envmaze_envpy."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rlkit.env.maze_env import COMPACT_TASK, ENV_ID, EnvConfig, env_for_set, system_prompt
from rlkit.errors import UsageError
from rlkit.maze.core import Maze, difficulty
from rlkit.maze.sets import (
    MazeSpec,
    draw_train_mazes,
    nearer_start,
    pinned_set,
    pinned_set_hash,
    pinned_spec,
)

REQUIRED = ("prompt", "env_class", "data_source", "reward_spec", "extra_info")


def maze_row(maze: Maze, *, split: str, index: int, source: str, cfg: EnvConfig) -> dict:
    d = difficulty(maze)
    rules_text = system_prompt(cfg, maze)  # a text-only stand-in prompt the env's init replaces
    user = {"role": "user", "content": "Your move?" if rules_text else COMPACT_TASK}
    return {
        "prompt": [{"role": "system", "content": rules_text}, user] if rules_text else [user],
        "env_class": ENV_ID,
        "data_source": source,
        "reward_spec": {"method": "rule", "ground_truth": maze.content_hash},
        "extra_info": {
            "maze": maze.to_json(),
            "split": split,
            "index": index,
            "path_length": d.path_length,
            "junctions": d.junctions,
            "env": json.dumps(cfg.to_dict()),
        },
    }


def build_rows(
    *,
    n_train: int,
    spec: MazeSpec,
    eval_set: str,
    cfg: EnvConfig,
    train_start: int = 0,
    n_eval: int | None = None,
    shares: Sequence[float] | None = None,
) -> tuple[list[dict], list[dict]]:
    """Training rows from the disjoint stream, row i's maze played from `shares[i]` of its
    shortest path (None: the whole maze); eval rows: the pinned set (its first `n_eval`)."""
    if n_train < 1:
        raise UsageError(f"--train ({n_train}) must be >= 1 rows")
    if shares is not None and len(shares) != n_train:
        raise UsageError(f"{len(shares)} curriculum shares for {n_train} training rows")
    mazes = pinned_set(eval_set)
    if n_eval is not None and not 1 <= n_eval <= len(mazes):
        raise UsageError(f"n_eval ({n_eval}) must be 1..{len(mazes)} ({eval_set} has that many)")
    # mazes no episode could solve within the env's turns are passed over, as in local GRPO
    stream, _ = draw_train_mazes(spec, train_start, n_train, max_turns=cfg.max_turns)
    if shares is not None:
        stream = [nearer_start(m, s) for m, s in zip(stream, shares, strict=True)]
    train = [
        maze_row(m, split="train", index=train_start + i, source=f"{ENV_ID}/train", cfg=cfg)
        for i, m in enumerate(stream)
    ]
    evals = [
        maze_row(m, split="eval", index=i, source=f"{ENV_ID}/{eval_set}", cfg=cfg)
        for i, m in enumerate(mazes[:n_eval])
    ]
    return train, evals


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.parquet")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)  # readers never see a half-written file
    return path


def write_datasets(
    out_dir: str | Path,
    n_train: int = 256,
    *,
    eval_set: str = "test",
    spec: MazeSpec | None = None,
    cfg: EnvConfig | None = None,
    n_eval: int | None = None,
    shares: Sequence[float] | None = None,
) -> tuple[Path, Path]:
    """Write `train.parquet`, `eval.parquet` and `manifest.json` into `out_dir`."""
    out = Path(out_dir)
    spec = spec or pinned_spec(eval_set)
    cfg = cfg or env_for_set(eval_set)
    train, evals = build_rows(
        n_train=n_train, spec=spec, eval_set=eval_set, cfg=cfg, n_eval=n_eval, shares=shares
    )
    paths = write_rows(out / "train.parquet", train), write_rows(out / "eval.parquet", evals)
    manifest = {
        "train_rows": len(train),
        "eval_rows": len(evals),
        "eval_set": eval_set,
        "test_set_hash": pinned_set_hash(eval_set),
        "train_spec": spec.to_dict(),
        "env_config": cfg.to_dict(),
        "curriculum": shares is not None,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return paths


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a dataset file, checked for SkyRL's columns and a readable maze in each."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"no dataset at {path}: create it with `rlkit data --out {path.parent}`")
    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowInvalid, OSError) as e:
        raise UsageError(
            f"{path} is not a readable parquet file ({e}); regenerate it with `rlkit data`"
        ) from None
    for i, row in enumerate(rows):
        missing = [c for c in REQUIRED if c not in row]
        if missing:
            raise UsageError(f"{path} row {i} lacks columns {missing}: rows need {list(REQUIRED)}")
        info = row["extra_info"] or {}
        if "maze" not in info:
            raise UsageError(f"{path} row {i} has no extra_info.maze: regenerate with `rlkit data`")
        Maze.from_dict(info["maze"])
    return rows
