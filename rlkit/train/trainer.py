"""The local GRPO trainer: rlkit's compact counterpart of a SkyRL run, CPU- or one-GPU-sized.

    rlkit train --preset local-tiny --run-dir runs/tiny            # resumes by default
    rlkit train --preset smoke --run-dir /tmp/r --address auto     # the same, as a Ray job

Loop: [warm start: behaviour cloning until a validation solve rate is reached] -> per step:
sample mazes -> group rollouts (one batched model call per turn) -> group-relative advantages
-> a few groups' episodes captured under RUN/rollouts (`rlkit.run.captures`) -> minibatch
updates over several epochs with importance ratios -> metrics -> eval on the pinned test set
every N steps -> checkpoint every M steps. Every random draw is seeded from
(seed, step), so a run killed and resumed from its last checkpoint equals an uninterrupted one.

The trainer only coordinates: what a step computes is in `step` (seeds, advantages, turn
samples, metrics, what is due), `update` (loss, minibatches, optimizer) and `warmstart`, each
tested without a Trainer; every phase is timed (`timing/rollout`, `capture`, `encode`,
`update`, `validate`, `eval`, `checkpoint`).
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from rlkit.episodes.evaluate import EVAL_SEED, EvalResult, evaluate
from rlkit.episodes.rollout import Trajectory, run_episodes
from rlkit.errors import UsageError
from rlkit.maze.sets import train_maze, train_mazes
from rlkit.model.build import build_tiny
from rlkit.model.load import LoadedModel, fast_vision, load, no_progress_bars
from rlkit.model.policy import AnswerSpec, ModelPolicy
from rlkit.run import captures
from rlkit.run.rundir import Checkpoint, RunDir
from rlkit.train import faults
from rlkit.train.config import TrainConfig
from rlkit.train.metrics import MetricsLogger
from rlkit.train.run_config import check_resume, resume_config
from rlkit.train.step import (
    TrainState,
    capture,
    due,
    enough_groups,
    kept_groups,
    lr_at,
    rollout_metrics,
    rollout_seed,
    score,
    turn_budgets,
    turn_samples,
)
from rlkit.train.update import Learner, update
from rlkit.train.warmstart import bc_batch, bc_update, validation_mazes


def torch_threads(threads: int | None) -> int:
    """The torch thread count of a run: `threads`, or every core this process may use. Set
    explicitly because a Ray job's entrypoint inherits OMP_NUM_THREADS=1 from Ray (it sets that
    in its workers), which left the demo's training job on one of two cores."""
    return threads or len(os.sched_getaffinity(0))


class Trainer:
    """Coordinates the phases; a step's logic lives in step.py and update.py, the math in
    advantages.py and grpo.py, the episodes in rollout.py."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str | Path,
        *,
        resume: str = "latest",
        progress: bool = True,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        """`overrides`: the `--set` changes the caller made to its preset; on a resume they
        apply on top of the run's recorded config (run.json). None: every field where `cfg`
        differs from its preset counts as one (`rlkit.train.run_config.resume_config`)."""
        if resume not in ("latest", "none"):
            raise UsageError(f"--resume {resume!r}: use latest or none")
        self.cfg, self.resume_mode, self.progress = cfg, resume, progress
        self.overrides = overrides
        self.run = RunDir(run_dir, keep=cfg.schedule.keep)
        self.state = TrainState(phase="warm_start" if cfg.warm_start.enabled else "grpo")
        self.learner: Learner | None = None

    # setup -------------------------------------------------------------------------------
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
        m = self.cfg.model
        game = train_maze(self.cfg.task.spec, 0).game  # squares: `stop` is a fifth choice
        answer = AnswerSpec.from_loaded(loaded, game) if m.constrained else None
        self.learner = Learner(
            loaded, self._optimizer(loaded), answer=answer, temperature=m.temperature
        )
        if saved:
            self.learner.opt.load_state_dict(saved["optimizer"])
        if self.cfg.recipe.kl_in_loss > 0 and self.state.phase == "grpo":
            self.learner.ref = self._reference()
        return ckpt

    def _init_model_dir(self) -> Path:
        m = self.cfg.model
        if m.init != "tiny":
            return Path(m.init)
        path = self.run.path / "init_model"
        if not (path / "config.json").exists() or not (path / "preprocessor_config.json").exists():
            # Built aside and renamed in: a start killed mid-build must not leave a half model
            # that every later resume would trip over.
            tmp = self.run.path / ".init_model.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            build_tiny(tmp, seed=self.cfg.schedule.seed, config=m.tiny)
            shutil.rmtree(path, ignore_errors=True)
            os.replace(tmp, path)
        return path

    def _optimizer(self, loaded: LoadedModel) -> torch.optim.Optimizer:
        lr = self.cfg.warm_start.lr if self.state.phase == "warm_start" else self.cfg.grpo.lr
        return torch.optim.AdamW(
            loaded.model.parameters(), lr=lr, weight_decay=self.cfg.grpo.weight_decay
        )

    def _reference(self) -> LoadedModel:
        """The frozen post-warm-start policy the KL term pulls towards (saved once, reloaded);
        it shares the policy's tokenizer and encoder caches."""
        ref_dir = self.run.path / "reference_policy"
        loaded = self.learner.loaded
        model = loaded.model
        with no_progress_bars():
            if not (ref_dir / "config.json").exists():
                tmp = self.run.path / ".reference_policy.tmp"
                model.save_pretrained(tmp)
                os.replace(tmp, ref_dir)
            ref_model = type(model).from_pretrained(ref_dir, dtype=model.dtype)
        ref = copy.copy(loaded)
        ref.model = fast_vision(ref_model.to(model.device).eval())
        return ref

    # the run -----------------------------------------------------------------------------
    def fit(self, *, stop_at_step: int | None = None) -> dict:
        """Train to the configured number of steps (resuming if possible); returns a summary.

        `stop_at_step` pauses after that global step (a later `fit` resumes from the last
        checkpoint): train in slices from a notebook, or test that resuming changes nothing.
        """
        torch.set_num_threads(torch_threads(self.cfg.schedule.threads))
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
            cfg = self.cfg
            changes = check_resume(info.get("config"), cfg, str(self.run.path))
            ckpt = self._restore()
            if changes:
                self.run.record_config(cfg.to_dict(), changes, step=ckpt.step if ckpt else 0)
            if ckpt is not None:  # says which checkpoint a restarted job really continues from
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
            metrics = self._grpo_step()
            s.grpo_steps += 1
        s.elapsed_s += time.perf_counter() - t0
        self.log.log(s.step, {**metrics, "train/phase": phase, "timing/elapsed_s": s.elapsed_s})
        todo = due(s, self.cfg.schedule)
        if todo.eval:
            self._evaluate(s.step)
        if todo.checkpoint:
            self._checkpoint(s.step)
        return phase

    # phases ------------------------------------------------------------------------------
    def _bc_step(self) -> dict:
        """One behaviour-cloning step; switches to GRPO when the warm start is done."""
        w, s = self.cfg.warm_start, self.state
        with self.log.timer("update"):
            task, seed = self.cfg.task, self.cfg.schedule.seed
            prompts, actions = bc_batch(
                self.learner.loaded, task.spec, task.env, s.step - 1, w.batch, w.random_steps, seed
            )
            last = s.val_solve_rate
            fine = w.fine_from is not None and last is not None and last >= w.fine_from
            lr = w.fine_lr if fine else w.lr
            metrics = bc_update(self.learner, prompts, actions, lr=lr, step=s.step)
        done = s.step >= w.max_steps
        if s.step % (1 if fine else w.check_every) == 0 or done:
            with self.log.timer("validate"):
                s.val_solve_rate = self._validation_solve_rate()
            metrics["train/val_solve_rate"] = s.val_solve_rate
            done = done or s.val_solve_rate >= w.stop_at
        metrics["train/lr"] = lr
        if done:
            s.phase, s.warm_start_end = "grpo", s.step
            self.learner.opt = self._optimizer(self.learner.loaded)
            if self.cfg.recipe.kl_in_loss > 0:
                self.learner.ref = self._reference()
        return metrics

    def _validation_solve_rate(self) -> float:
        mazes = validation_mazes(self.cfg.task.spec)
        trajs = run_episodes(
            self._policy(),
            mazes,
            self.cfg.task.env,
            samples=self.cfg.warm_start.val_samples,
            seed=EVAL_SEED,
            history=self.cfg.task.history,
        )
        return float(np.mean([t.solved for t in trajs]))

    def _policy(self, greedy: bool = False) -> ModelPolicy:
        m = self.cfg.model
        return ModelPolicy(
            self.learner.loaded, temperature=m.temperature, greedy=greedy, constrained=m.constrained
        )

    def _grpo_step(self) -> dict:
        g, s, task, recipe = self.cfg.grpo, self.state, self.cfg.task, self.cfg.recipe
        stops = self.learner.loaded.stop_ids
        trajs: list[Trajectory] = []
        rounds = 0
        with self.log.timer("rollout"):
            while True:  # one round, or with dynamic sampling until enough groups teach
                trajs += self._rollout_round(rounds, offset=len(trajs) // g.group_size)
                rounds += 1
                scores = score(trajs, recipe, stop_ids=stops)
                if enough_groups(scores, recipe, g.mazes_per_step, rounds):
                    break
            scores = score(trajs, recipe, stop_ids=stops, batch_groups=g.mazes_per_step)
            faults.point("rollout", s.step)
        with self.log.timer("capture"):  # a few groups kept for viewing (RUN/rollouts)
            name = captures.training_label(s.step)
            captured = capture(self.run.path, s.step, trajs, scores, self.cfg.schedule, name)
        with self.log.timer("encode"):
            encode = self.learner.loaded.encoder.encode
            samples = turn_samples(trajs, scores, encode, task.env, history=task.history)
        lr = lr_at(g, s.grpo_steps, self.cfg.schedule.steps)
        with self.log.timer("update"):
            seed = self.cfg.schedule.seed
            metrics = update(self.learner, samples, g, recipe, lr=lr, seed=seed, step=s.step)
        return {
            **rollout_metrics(trajs, scores, rounds * g.mazes_per_step),
            "rollout/rounds": rounds,
            "train/samples": len(samples),
            "train/groups": kept_groups(scores),
            "train/lr": lr,
            "train/cursor": s.cursor,
            **captured,
            **metrics,
        }

    def _rollout_round(self, round_: int, offset: int) -> list[Trajectory]:
        """The next `mazes_per_step` training mazes' groups of episodes; their maze indices
        start at `offset`, so that the groups of a step's rounds stay apart."""
        g, s, task = self.cfg.grpo, self.state, self.cfg.task
        mazes = train_mazes(task.spec, s.cursor, g.mazes_per_step)
        s.cursor += g.mazes_per_step
        trajs = run_episodes(
            self._policy(),
            mazes,
            task.env,
            samples=g.group_size,
            seed=rollout_seed(self.cfg.schedule.seed, s.step, round_),
            history=task.history,
            max_turns=turn_budgets(mazes, task.env, g.turn_slack, g.tight_fraction),
        )
        return [replace(t, maze_index=t.maze_index + offset) for t in trajs]

    # eval and checkpoints -----------------------------------------------------------------
    def _evaluate(self, step: int) -> EvalResult:
        sched = self.cfg.schedule
        with self.log.timer("eval"):
            result, trajs = evaluate(
                self._policy(greedy=sched.eval_greedy),
                set_name=self.cfg.task.eval_set,
                samples=sched.eval_samples,
                seed=EVAL_SEED,
                cfg=self.cfg.task.env,
                history=self.cfg.task.history,
                mode="greedy" if sched.eval_greedy else "sampled",
                step=step,
            )
            result.policy = f"{self.run.path.name}@{step}"
            result.save(self.run.eval_path(step), trajs)
        lo, hi = result.ci95
        self.log.log(
            step,
            {
                "eval/solve_rate": result.solve_rate,
                "eval/ci_low": lo,
                "eval/ci_high": hi,
                "train/phase": self.state.phase,
            },
        )
        if self.progress:
            tqdm.write(f"step {step}: {result.summary()}")
        return result

    def _checkpoint(self, step: int) -> None:
        def write(d: Path) -> None:
            pol, loaded = d / "policy", self.learner.loaded
            with no_progress_bars():  # one line per checkpoint in logs, not a progress bar
                loaded.model.save_pretrained(pol)
            loaded.processor.save_pretrained(pol)  # tokenizer, image processor, template
            faults.point("checkpoint", step)
            torch.save(
                {
                    "state": asdict(self.state),
                    "optimizer": self.learner.opt.state_dict(),
                    "config": self.cfg.to_dict(),
                },
                d / "trainer_state.pt",
            )

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
    """Run (or resume) a local training run; returns the summary. A resume trains with the
    run's recorded config plus `overrides` (see `Trainer`)."""
    if progress is None:
        progress = os.isatty(2)
    return Trainer(cfg, run_dir, resume=resume, progress=progress, overrides=overrides).fit()
