"""The tiny Qwen3-VL warm-started to write its own answers, a start for freely sampling trainers
(`rlkit model tiny --out DIR --warm-start --stop-at 0.4`; docs/local-trainer.md)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from rlkit.env.maze_env import env_for_set
from rlkit.errors import UsageError
from rlkit.maze.sets import pinned_spec
from rlkit.model.action_tag import check_answer_budget
from rlkit.model.batching import AnswerSpec
from rlkit.model.build import build_tiny
from rlkit.model.load import load, no_progress_bars
from rlkit.model.policy import ModelPolicy
from rlkit.train.config import WarmStartConfig
from rlkit.train.learner import Learner
from rlkit.train.warmstart import (
    bc_schedule,
    bc_states,
    bc_update,
    encode_states,
    parse_error_rate,
    solve_rate,
    validation_episodes,
)

EVAL_SET = "test"
"""The set whose env and maze family the model is warm-started on (SkyRL's CPU preset's)."""

RECORD = "rlkit_warm.json"
"""Beside the weights: seed, recipe, steps, the validation solve rate reached, why it stopped."""


@dataclass(frozen=True)
class FreeWarmStart:
    """The free-form warm start's recipe: the local BC schedule plus the writing steps."""

    bc: WarmStartConfig = field(
        default_factory=lambda: WarmStartConfig(
            max_steps=300, fine_from=0.30, fine_lr=5e-4, val_samples=1
        )
    )
    """The local warm start's schedule; `max_steps` counts the reading steps too."""
    val_mazes: int = 128
    """Validation mazes per check, one episode each."""
    read_steps: int = 30
    """BC steps on the move word alone (the constrained loss) before whole answers."""
    write_before_check: int = 10
    """Writing steps (whole answers) before the first check."""
    embed_lr_scale: float = 10.0
    """Learning-rate multiple of the (tied) token embeddings."""
    max_new_tokens: int = 8
    """Answer budget (tokens) of the validation's free sampling (SkyRL's CPU preset's)."""

    def __post_init__(self) -> None:
        if self.write_before_check < 0:
            raise UsageError(f"write_before_check ({self.write_before_check}) must be >= 0")
        if self.read_steps < 0 or self.read_steps >= self.bc.max_steps:
            raise UsageError(
                f"read_steps ({self.read_steps}) must be in [0, bc.max_steps "
                f"({self.bc.max_steps})): the writing steps come after them"
            )
        if not self.embed_lr_scale > 0:
            raise UsageError(f"embed_lr_scale ({self.embed_lr_scale}) must be > 0")
        if self.val_mazes < 1:
            raise UsageError(f"val_mazes ({self.val_mazes}) must be >= 1")
        if self.max_new_tokens < 1:
            raise UsageError(f"max_new_tokens ({self.max_new_tokens}) must be >= 1")


def warm_tiny_model(
    out_dir: str | Path,
    *,
    seed: int = 0,
    stop_at: float | None = None,
    recipe: FreeWarmStart | None = None,
) -> Path:
    """Build the tiny model (seeded), warm-start it free-form until its sampled validation solve
    rate reaches `stop_at` (None: `recipe.bc.stop_at`) or the steps run out, and save it to
    `out_dir` (absent, empty or a model dir, replaced), on every core; deterministic for a seed and core count
    (rlkit_warm.json records `threads`)."""
    recipe = recipe or FreeWarmStart()
    stop_at = recipe.bc.stop_at if stop_at is None else stop_at
    if not 0.0 < stop_at <= 1.0:
        raise UsageError(f"stop_at ({stop_at}) must be in (0, 1]: a validation solve rate")
    recipe = replace(recipe, bc=replace(recipe.bc, stop_at=stop_at))
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not (out / "config.json").is_file():
        raise UsageError(f"{out} holds files but no model: give an empty or new --out")
    tmp = out.parent / f".{out.name}.warm.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    build_tiny(tmp, seed=seed)
    built = time.perf_counter() - t0
    before = torch.get_num_threads()
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    try:
        record = {"seed": seed, "eval_set": EVAL_SET, "recipe": asdict(recipe)}
        record |= _warm_start(tmp, recipe, seed, progress=os.isatty(2))
        record["threads"] = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    record["timing"] = {"build_s": round(built, 1), **record["timing"]}
    record["seconds"] = round(time.perf_counter() - t0, 1)
    (tmp / RECORD).write_text(json.dumps(record, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def _warm_start(model_dir: Path, r: FreeWarmStart, seed: int, progress: bool) -> dict:
    """Read then write the model in `model_dir`, saving it; returns the record's part."""
    w, spec, env = r.bc, pinned_spec(EVAL_SET), env_for_set(EVAL_SET)
    loaded = load(model_dir)
    check_answer_budget(loaded.tokenizer, r.max_new_tokens, "max_new_tokens")
    embed = loaded.model.get_input_embeddings().weight  # at `embed_lr_scale` x the rate
    groups = [
        {"params": [embed], "lr": w.lr * r.embed_lr_scale, "lr_scale": r.embed_lr_scale},
        {"params": [p for p in loaded.model.parameters() if p is not embed], "lr_scale": 1.0},
    ]
    opt = torch.optim.AdamW(groups, lr=w.lr, weight_decay=0.0)
    learner = Learner(loaded, opt, answer=AnswerSpec.from_loaded(loaded), temperature=1.0)
    policy = ModelPolicy(loaded, constrained=False, max_new_tokens=r.max_new_tokens)
    rate: float | None = None
    step, stopped, checks = 0, "max_steps", []
    spent = {"bc_s": 0.0, "validate_s": 0.0}
    bar = tqdm(total=w.max_steps, desc="free warm start", disable=not progress, mininterval=2)
    while step < w.max_steps and stopped != "rate":
        step += 1
        if step > r.read_steps:
            learner.answer = None  # whole answers from now on
        lr, check = bc_schedule(w, step, rate)
        t = time.perf_counter()
        pairs = bc_states(spec, step - 1, w.batch, w.random_steps, seed)
        prompts = encode_states(loaded, [s for s, _ in pairs], env)
        metrics = bc_update(learner, prompts, [a for _, a in pairs], lr=lr, step=step)
        spent["bc_s"] += time.perf_counter() - t
        bar.update(1)
        writing = step - r.read_steps
        if step < w.max_steps and (not check or writing < max(r.write_before_check, 1)):
            continue
        t = time.perf_counter()
        trajs = validation_episodes(policy, spec, env, samples=w.val_samples, mazes=r.val_mazes)
        rate, errors = solve_rate(trajs), parse_error_rate(trajs)
        spent["validate_s"] += time.perf_counter() - t
        checks.append({"step": step, "lr": lr, "val_solve_rate": rate, "val_parse_errors": errors})
        checks[-1] |= metrics
        stopped = "rate" if rate >= w.stop_at else stopped
        tqdm.write(  # above the bar, or a plain line
            f"step {step}: validation solve rate {rate:.3f} (stop at {w.stop_at:g}), "
            f"parse errors {errors:.3f}, loss {metrics['loss/bc']:.3f}, lr {lr:g}",
            file=sys.stderr,
        )
    bar.close()
    with no_progress_bars():
        loaded.model.save_pretrained(model_dir)
    timing = {k: round(v, 1) for k, v in spent.items()}
    return dict(steps=step, val_solve_rate=rate, stopped=stopped, checks=checks, timing=timing)
