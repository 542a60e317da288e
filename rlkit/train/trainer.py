"""The local GRPO trainer: a warm start, then GRPO steps (`rlkit.train.step`), evals and
checkpoints, logged by `MetricsLogger`; a resumed run equals an uninterrupted one."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from rlkit.env.maze_env import env_for_set
from rlkit.episodes.evaluate import EVAL_SEED, EvalResult, evaluate
from rlkit.errors import UsageError
from rlkit.maze.core import Maze
from rlkit.maze.rules import game_moves
from rlkit.maze.sets import train_maze
from rlkit.model.batching import AnswerSpec
from rlkit.model.build import build_tiny
from rlkit.model.load import (
    LoadedModel,
    load,
    load_adapter_weights,
    no_progress_bars,
    save_adapter,
    save_merged,
    trainable,
    tune,
)
from rlkit.model.policy import ModelPolicy
from rlkit.run import captures
from rlkit.run.checkpoints import Checkpoint
from rlkit.run.metrics import RunLogger
from rlkit.run.rundir import RunDir
from rlkit.train import faults
from rlkit.train.config import TrainConfig
from rlkit.train.learner import Learner, model_like, reference_of, start_policy
from rlkit.train.run_config import check_resume, resume_config
from rlkit.train.square_head import SquareHead, block_side, squares_update, tower_optimizer
from rlkit.train.state import TrainState, due
from rlkit.train.step import grpo_step
from rlkit.train.warmstart import (
    bc_batch,
    bc_schedule,
    bc_update,
    solve_rate,
    validation_episodes,
)

_log = logging.getLogger(__name__)


class MetricsLogger(RunLogger):
    """The run's logger plus TensorBoard event files under RUN/tensorboard when it imports;
    events after `resume_step` (a resumed run's checkpoint step) are purged."""

    def __init__(
        self,
        run: RunDir,
        *,
        tensorboard: bool = True,
        ray_gauges: bool | None = None,
        resume_step: int | None = None,
    ):
        writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                _log.info("TensorBoard off (%s): metrics go to metrics.jsonl only", e)
            else:
                purge = resume_step + 1 if resume_step is not None else None
                path = str(run.path / "tensorboard")
                writer = SummaryWriter(log_dir=path, purge_step=purge, flush_secs=10)
        super().__init__(run, scalars=writer, ray_gauges=ray_gauges)


def torch_threads(threads: int | None) -> int:
    """`threads`, or every core this process may use (a Ray job inherits OMP_NUM_THREADS=1)."""
    return threads or len(os.sched_getaffinity(0))


class Trainer:
    """Coordinates warm-start steps, GRPO steps, evals and checkpoints."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str | Path,
        *,
        resume: str = "latest",
        progress: bool = True,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        """`overrides`: `--set` changes a resume applies to the recorded config (None: `cfg`'s
        differences from its preset)."""
        if resume not in ("latest", "none"):
            raise UsageError(f"--resume {resume!r}: use latest or none")
        self.cfg, self.resume_mode, self.progress = cfg, resume, progress
        self.overrides = overrides
        self.run = RunDir(run_dir, keep=cfg.schedule.keep)
        self.state = TrainState(phase="warm_start" if cfg.warm_start.enabled else "grpo")
        self.learner: Learner | None = None
        self.square_head: SquareHead | None = None
        """The per-square auxiliary head while its phase's `aux_weight` > 0."""
        self.tower_opt: torch.optim.Optimizer | None = None
        """Its GRPO-phase optimizer (`grpo.aux_weight` > 0)."""
        self.adapter = None
        """peft's wrapper of the policy while LoRA trains (`model.lora_rank` > 0)."""

    def _restore(self) -> Checkpoint | None:
        ckpt = self.run.resume() if self.resume_mode == "latest" else None
        if self.resume_mode == "latest":  # steps after it are trained (and captured) again,
            captures.drop_after(self.run.path, ckpt.step if ckpt else -1)  # as metrics are
        if self.resume_mode == "none" and self.run.checkpoint_steps():
            raise UsageError(
                f"{self.run.path} already holds checkpoints: use --resume latest or a new --run-dir"
            )
        loaded = load(ckpt.path / "policy" if ckpt else self._init_model_dir())
        saved = torch.load(ckpt.path / "trainer_state.pt", weights_only=False) if ckpt else None
        if saved:
            self.state = TrainState(**saved["state"])
        if self.state.phase == "grpo":
            self._tune(loaded, ckpt)
        m, maze = self.cfg.model, train_maze(self.cfg.task.spec, 0)  # squares: `stop` a choice
        answer = AnswerSpec.from_loaded(loaded, maze.game) if m.constrained else None
        grpo = self.state.phase == "grpo"
        if (self.cfg.grpo if grpo else self.cfg.warm_start).aux_weight > 0:
            self._square_head(loaded, maze, saved or {})
        self.learner = Learner(
            loaded, self._optimizer(loaded), answer=answer, temperature=m.temperature
        )
        if saved:
            self.learner.opt.load_state_dict(saved["optimizer"])
        if self.cfg.recipe.kl_in_loss > 0 and self.state.phase == "grpo":
            self.learner.ref = reference_of(self.learner.loaded, self.run.path)
        return ckpt

    def _square_head(self, loaded: LoadedModel, maze: Maze, saved: dict) -> None:
        """The per-square head (`saved`'s if any) and, in the GRPO phase, its optimizer."""
        if self.square_head is None:
            block = block_side(loaded, self.cfg.task.env, maze)
            self.square_head = SquareHead(loaded, block, game_moves(maze), self.cfg.schedule.seed)
            if "square_head" in saved:
                self.square_head.load_state_dict(saved["square_head"])
        if self.state.phase == "grpo":
            self.tower_opt = tower_optimizer(loaded, self.square_head)
            if "tower_optimizer" in saved:
                self.tower_opt.load_state_dict(saved["tower_optimizer"])

    def _init_model_dir(self) -> Path:
        m = self.cfg.model
        if m.init != "tiny":
            return Path(m.init)
        path = self.run.path / "init_model"
        if not (path / "config.json").exists() or not (path / "preprocessor_config.json").exists():
            tmp = self.run.path / ".init_model.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            build_tiny(tmp, seed=self.cfg.schedule.seed, config=m.tiny)
            shutil.rmtree(path, ignore_errors=True)
            os.replace(tmp, path)
        return path

    def _optimizer(self, loaded: LoadedModel) -> torch.optim.Optimizer:
        lr = self.cfg.warm_start.lr if self.state.phase == "warm_start" else self.cfg.grpo.lr
        params = trainable(loaded.model)
        if self.square_head is not None and self.state.phase == "warm_start":  # beside it
            params = [{"params": params}, {"params": list(self.square_head.parameters())}]
        return torch.optim.AdamW(params, lr=lr, weight_decay=self.cfg.grpo.weight_decay)

    def _tune(self, loaded: LoadedModel, ckpt: Checkpoint | None) -> None:
        """As the GRPO phase starts or resumes: freeze the vision side and/or attach LoRA."""
        m = self.cfg.model
        if m.lora_rank > 0:
            base = start_policy(self.run.path, None if ckpt else loaded)
            if ckpt is not None:
                loaded.model = model_like(base, loaded.model)
        self.adapter = tune(loaded.model, m, seed=self.cfg.schedule.seed)
        if self.adapter is not None and ckpt is not None:
            load_adapter_weights(self.adapter, ckpt.path / "adapter")

    def fit(self, *, stop_at_step: int | None = None) -> dict:
        """Train (resuming if possible) to `schedule.steps` or global step `stop_at_step`."""
        with self.run.lock():
            info = self.run.init(
                preset=self.cfg.name,
                seed=self.cfg.schedule.seed,
                backend="local",
                config=self.cfg.to_dict(),
            )
            if self.resume_mode == "latest":  # the run's own config, with this call's changes
                self.cfg = resume_config(info.get("config"), self.cfg, self.overrides)
                self.run.keep = self.cfg.schedule.keep
            torch.set_num_threads(torch_threads(self.cfg.schedule.threads))
            changes = check_resume(info.get("config"), self.cfg, str(self.run.path))
            ckpt = self._restore()
            if changes:
                self.run.record_config(self.cfg.to_dict(), changes, step=ckpt.step if ckpt else 0)
            if ckpt is not None:
                print(
                    f"resuming {self.run.path} from {ckpt.path.name}", file=sys.stderr, flush=True
                )
            with MetricsLogger(self.run, resume_step=ckpt.step if ckpt else None) as log:
                self.log = log
                if ckpt is None and self.cfg.schedule.eval_before_train:
                    self._evaluate(0)
                bar = tqdm(
                    total=self.cfg.schedule.steps,
                    initial=self.state.grpo_steps,
                    desc="grpo",
                    disable=not self.progress,
                    mininterval=5,
                )
                while self.state.grpo_steps < self.cfg.schedule.steps:
                    if stop_at_step is not None and self.state.step >= stop_at_step:
                        break
                    bar.update(self._one_step() == "grpo")
                bar.close()
        return self.summary()

    def _one_step(self) -> str:
        """One warm-start or GRPO step, then its eval/checkpoint if due; returns the phase."""
        s = self.state
        s.step += 1
        t0 = time.perf_counter()
        phase = s.phase
        if phase == "warm_start":
            metrics = self._bc_step()
        else:
            timer, policy = self.log.timer, self._policy()
            metrics = grpo_step(self.cfg, s, self.learner, policy, self.run.path, timer)
            if self.tower_opt is not None:
                metrics |= self._squares_step(metrics["train/lr"])
            s.grpo_steps += 1
        s.elapsed_s += time.perf_counter() - t0
        self.log.log(s.step, {**metrics, "train/phase": phase, "timing/elapsed_s": s.elapsed_s})
        todo = due(s, self.cfg.schedule)
        if todo.eval:
            self._evaluate(s.step)
        if todo.checkpoint:
            self._checkpoint(s.step)
        return phase

    def _bc_step(self) -> dict:
        """One behaviour-cloning step; switches to GRPO when the warm start is done."""
        w, s, task = self.cfg.warm_start, self.state, self.cfg.task
        lr, check = bc_schedule(w, s.step, s.val_solve_rate)
        tower = s.step <= w.tower_steps  # the per-square loss alone, no BC, no validation
        check = check and not tower
        with self.log.timer("update"):
            prompts, actions, mazes = bc_batch(
                self.learner.loaded, task.spec, task.env, s.step - 1, w, self.cfg.schedule.seed
            )
            aux = None
            if self.square_head is not None:
                aux = (self.square_head, w.aux_weight, mazes, task.env.style.pad)
            metrics = bc_update(
                self.learner, prompts, actions, lr=lr, step=s.step, aux=aux, bc=not tower
            )
        done = s.step >= w.max_steps
        if check:
            with self.log.timer("validate"):
                trajs = validation_episodes(
                    self._policy(), task.spec, task.env, samples=w.val_samples, history=task.history
                )
                s.val_solve_rate = solve_rate(trajs)
            metrics["train/val_solve_rate"] = s.val_solve_rate
            done = done or s.val_solve_rate >= w.stop_at
        metrics["train/lr"] = lr
        if done:
            s.phase, s.warm_start_end = "grpo", s.step
            start_policy(self.run.path, self.learner.loaded)
            self._tune(self.learner.loaded, None)
            self.learner.opt = self._optimizer(self.learner.loaded)
            if self.cfg.grpo.aux_weight > 0:
                self._square_head(self.learner.loaded, mazes[0], {})
            elif self.square_head is not None:
                self.square_head.close()  # the warm start's alone
                self.square_head = None
            if self.cfg.recipe.kl_in_loss > 0:
                self.learner.ref = reference_of(self.learner.loaded, self.run.path)
        return metrics

    def _squares_step(self, lr: float) -> dict:
        """`grpo.aux_steps` steps of the per-square loss, on fresh warm-start batch indices."""
        w, task, loaded, g = self.cfg.warm_start, self.cfg.task, self.learner.loaded, self.cfg.grpo
        first, pad = (self.state.step - 1) * g.aux_steps, task.env.style.pad
        with self.log.timer("squares"):
            batches = [
                bc_batch(loaded, task.spec, task.env, first + i, w, self.cfg.schedule.seed)
                for i in range(g.aux_steps)
            ]
            batches = [(prompts, mazes, pad) for prompts, _, mazes in batches]
            return squares_update(
                loaded, self.square_head, self.tower_opt, batches, weight=g.aux_weight, lr=lr
            )

    def _policy(self, greedy: bool = False) -> ModelPolicy:
        m = self.cfg.model
        return ModelPolicy(
            self.learner.loaded, temperature=m.temperature, greedy=greedy, constrained=m.constrained
        )

    def _evaluate(self, step: int) -> EvalResult:
        task = self.cfg.task
        with self.log.timer("eval"):
            names = (task.eval_set, *task.other_eval_sets)
            results = {name: self._eval_set(step, name) for name in names}
        metrics = {}
        for name, r in results.items():
            key = "eval/" if name == task.eval_set else f"eval/{name}_"
            lo, hi = r.ci95
            metrics |= {f"{key}solve_rate": r.solve_rate, f"{key}ci_low": lo, f"{key}ci_high": hi}
        self.log.log(step, metrics | {"train/phase": self.state.phase})
        if self.progress:
            for r in results.values():
                tqdm.write(f"step {step}: {r.summary()}")
        return results[task.eval_set]

    def _eval_set(self, step: int, name: str) -> EvalResult:
        """One pinned set's eval in RUN/evals/ (another set: its own turn budget and subdir)."""
        sched, task = self.cfg.schedule, self.cfg.task
        env, path = task.env, self.run.eval_path(step)
        if name != task.eval_set:
            env = replace(env, max_turns=env_for_set(name).max_turns)
            path = self.run.evals_dir / name / path.name
        result, trajs = evaluate(
            self._policy(greedy=sched.eval_greedy),
            set_name=name,
            samples=sched.eval_samples,
            seed=EVAL_SEED,
            cfg=env,
            history=task.history,
            mode="greedy" if sched.eval_greedy else "sampled",
            step=step,
        )
        result.policy = f"{self.run.path.name}@{step}"
        result.save(path, trajs)
        return result

    def _checkpoint(self, step: int) -> None:
        def write(d: Path) -> None:
            pol, loaded = d / "policy", self.learner.loaded
            if self.adapter is not None:
                save_merged(self.adapter, pol)
                save_adapter(self.adapter, d / "adapter")
            else:
                with no_progress_bars():
                    loaded.model.save_pretrained(pol)
            loaded.processor.save_pretrained(pol)
            faults.point("checkpoint", step)
            saved = {
                "state": asdict(self.state),
                "optimizer": self.learner.opt.state_dict(),
                "config": self.cfg.to_dict(),
            }
            if self.square_head is not None:
                saved["square_head"] = self.square_head.state_dict()
            if self.tower_opt is not None:
                saved["tower_optimizer"] = self.tower_opt.state_dict()
            torch.save(saved, d / "trainer_state.pt")

        with self.log.timer("checkpoint"):
            self.run.save_checkpoint(step, write)
        self.log.log_checkpoint(step)

    def summary(self) -> dict:
        evals = {s: self.run.read_eval(s) for s in self.run.eval_steps()}
        return {
            "run_dir": str(self.run.path),
            "steps": self.state.step,
            "grpo_steps": self.state.grpo_steps,
            "warm_start_end": self.state.warm_start_end,
            "solve_rate": {s: round(e["solve_rate"], 4) for s, e in evals.items()},
        }


def train(
    cfg: TrainConfig,
    run_dir: str | Path,
    *,
    resume: str = "latest",
    progress: bool | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict:
    """Run (or resume) a local training run (`Trainer`); returns the summary."""
    if progress is None:
        progress = os.isatty(2)
    return Trainer(cfg, run_dir, resume=resume, progress=progress, overrides=overrides).fit()
