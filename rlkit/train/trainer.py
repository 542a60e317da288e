"""The local GRPO trainer: rlkit's compact counterpart of a SkyRL run, CPU- or one-GPU-sized.

    rlkit train --preset local-tiny --run-dir runs/tiny            # resumes by default
    rlkit train --preset smoke --run-dir /tmp/r --address auto     # the same, as a Ray job

Loop: [warm start: behaviour cloning until a validation solve rate is reached] -> per step:
sample mazes -> group rollouts (one batched model call per turn) -> group-relative advantages
-> minibatch updates over several epochs with importance ratios -> metrics -> eval on the
pinned test set every N steps -> checkpoint every M steps. Every random draw is seeded from
(seed, step), so a run killed and resumed from its last checkpoint equals an uninterrupted one.
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from rlkit.episodes.evaluate import EvalResult, evaluate
from rlkit.episodes.rollout import Trajectory, run_episodes, turn_prompts
from rlkit.errors import UsageError
from rlkit.maze.sets import train_mazes
from rlkit.model.build import build_tiny
from rlkit.model.chat import Encoded
from rlkit.model.load import LoadedModel, load, no_progress_bars
from rlkit.model.policy import AnswerSpec, ModelPolicy, build_batch, response_logprobs
from rlkit.train import faults, grpo
from rlkit.train.config import TrainConfig
from rlkit.train.metrics import MetricsLogger
from rlkit.train.runs import Checkpoint, RunDir
from rlkit.train.warmstart import bc_loss, bc_states, encode_states, validation_mazes

EVAL_SEED = 1234
"""Fixed eval sampling seed: every checkpoint meets the same random streams (paired tests)."""


def seed_for(*parts: int) -> int:
    return int(np.random.SeedSequence([abs(int(p)) for p in parts]).generate_state(1)[0])


@dataclass
class TrainState:
    """Everything besides weights and optimizer that a resume needs (saved in trainer_state.pt)."""

    step: int = 0
    phase: str = "warm_start"
    grpo_steps: int = 0
    warm_start_end: int | None = None
    cursor: int = 0
    """Index of the next training maze in the stream: no maze replayed or skipped on resume."""
    elapsed_s: float = 0.0
    """Training wall time up to this state, summed over resumed segments (benchmarks)."""


@dataclass
class TurnSample:
    prompt: Encoded
    response_ids: list[int]
    old_logprobs: list[float]
    advantage: float


class Trainer:
    """Coordinates the phases; the math lives in grpo.py, the episodes in rollout.py."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str | Path,
        *,
        resume: str = "latest",
        progress: bool = True,
    ) -> None:
        if resume not in ("latest", "none"):
            raise UsageError(f"--resume {resume!r}: use latest or none")
        self.cfg, self.resume_mode, self.progress = cfg, resume, progress
        self.run = RunDir(run_dir, keep=cfg.schedule.keep)
        self.state = TrainState(phase="warm_start" if cfg.warm_start.enabled else "grpo")
        self.loaded: LoadedModel | None = None
        self.ref: LoadedModel | None = None

    # setup -------------------------------------------------------------------------------
    def _restore(self) -> Checkpoint | None:
        ckpt = self.run.resume() if self.resume_mode == "latest" else None
        if self.resume_mode == "none" and self.run.checkpoint_steps():
            raise UsageError(
                f"{self.run.path} already holds checkpoints: use --resume latest or a new --run-dir"
            )
        policy_dir = ckpt.path / "policy" if ckpt else self._init_model_dir()
        self.loaded = load(policy_dir)
        self.answer = AnswerSpec.from_loaded(self.loaded) if self.cfg.model.constrained else None
        saved = torch.load(ckpt.path / "trainer_state.pt", weights_only=False) if ckpt else None
        if saved:
            self.state = TrainState(**saved["state"])
        self.opt = self._optimizer()
        if saved:
            self.opt.load_state_dict(saved["optimizer"])
        if self.cfg.grpo.kl_coef > 0 and self.state.phase == "grpo":
            self.ref = self._reference()
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

    def _optimizer(self) -> torch.optim.Optimizer:
        lr = self.cfg.warm_start.lr if self.state.phase == "warm_start" else self.cfg.grpo.lr
        return torch.optim.AdamW(
            self.loaded.model.parameters(), lr=lr, weight_decay=self.cfg.grpo.weight_decay
        )

    def _reference(self) -> LoadedModel:
        """The frozen post-warm-start policy the KL term pulls towards (saved once, reloaded);
        it shares the policy's tokenizer and encoder caches."""
        ref_dir = self.run.path / "reference_policy"
        if not (ref_dir / "config.json").exists():
            tmp = self.run.path / ".reference_policy.tmp"
            self.loaded.model.save_pretrained(tmp)
            os.replace(tmp, ref_dir)
        model = self.loaded.model
        ref = copy.copy(self.loaded)
        ref.model = type(model).from_pretrained(ref_dir, dtype=model.dtype).to(model.device).eval()
        return ref

    # the run -----------------------------------------------------------------------------
    def fit(self, *, stop_at_step: int | None = None) -> dict:
        """Train to the configured number of steps (resuming if possible); returns a summary.

        `stop_at_step` pauses after that global step (a later `fit` resumes from the last
        checkpoint): train in slices from a notebook, or test that resuming changes nothing.
        """
        if self.cfg.schedule.threads:
            torch.set_num_threads(self.cfg.schedule.threads)
        with self.run.lock():
            self.run.init(
                preset=self.cfg.name,
                seed=self.cfg.schedule.seed,
                backend="local",
                config=self.cfg.to_dict(),
            )
            ckpt = self._restore()
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
            metrics, finished = self._bc_step()
            if finished:
                s.phase, s.warm_start_end = "grpo", s.step
                self.opt = self._optimizer()
                if self.cfg.grpo.kl_coef > 0:
                    self.ref = self._reference()
        else:
            metrics = self._grpo_step()
            s.grpo_steps += 1
        s.elapsed_s += time.perf_counter() - t0
        self.log.log(s.step, {**metrics, "train/phase": phase, "timing/elapsed_s": s.elapsed_s})
        boundary = s.warm_start_end == s.step
        last = s.grpo_steps >= self.cfg.schedule.steps and s.phase == "grpo"
        sched = self.cfg.schedule
        grpo_tick = s.phase == "grpo" and not boundary and s.grpo_steps
        if boundary or last or (grpo_tick and s.grpo_steps % sched.eval_every == 0):
            self._evaluate(s.step)
        if boundary or last or s.step % sched.ckpt_every == 0:
            self._checkpoint(s.step)
        return phase

    # phases ------------------------------------------------------------------------------
    def _bc_step(self) -> tuple[dict, bool]:
        w, s = self.cfg.warm_start, self.state
        bc_index = s.step - 1
        with self.log.timer("update"):
            pairs = bc_states(
                self.cfg.task.spec, bc_index, w.batch, w.random_steps, self.cfg.schedule.seed
            )
            prompts = encode_states(self.loaded, [p[0] for p in pairs], self.cfg.task.env)
            self.loaded.model.train()
            loss, acc = bc_loss(
                self.loaded, self.answer, prompts, [p[1] for p in pairs], self.cfg.model.temperature
            )
            self.opt.zero_grad()
            loss.backward()
            faults.point("optimizer", s.step)
            self.opt.step()
            self.loaded.model.eval()
        metrics = {"loss/bc": float(loss.detach()), "train/bc_accuracy": acc}
        done = s.step >= w.max_steps
        if s.step % w.check_every == 0 or done:
            with self.log.timer("validate"):
                val = self._validation_solve_rate()
            metrics["train/val_solve_rate"] = val
            done = done or val >= w.stop_at
        return metrics, done

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
            self.loaded, temperature=m.temperature, greedy=greedy, constrained=m.constrained
        )

    def _grpo_step(self) -> dict:
        g, s = self.cfg.grpo, self.state
        mazes = train_mazes(self.cfg.task.spec, s.cursor, g.mazes_per_step)
        s.cursor += g.mazes_per_step
        with self.log.timer("rollout"):
            trajs = run_episodes(
                self._policy(),
                mazes,
                self.cfg.task.env,
                samples=g.group_size,
                seed=seed_for(self.cfg.schedule.seed, s.step),
                history=self.cfg.task.history,
            )
            faults.point("rollout", s.step)
        rewards = torch.tensor([t.reward for t in trajs])
        groups = torch.tensor([t.maze_index for t in trajs])
        adv = grpo.group_advantages(rewards, groups, norm_by_std=g.norm_by_std)
        keep = (
            grpo.nonzero_variance_mask(rewards, groups)
            if g.filter_zero_variance
            else torch.ones_like(rewards, dtype=torch.bool)
        )
        with self.log.timer("encode"):
            samples = self._samples(trajs, adv, keep)
        with self.log.timer("update"):
            update = self._update(samples) if samples else {}
        return {
            "rollout/reward_mean": float(rewards.mean()),
            "rollout/solve_rate": float(np.mean([t.solved for t in trajs])),
            "rollout/turns_mean": float(np.mean([len(t.turns) for t in trajs])),
            "rollout/episodes": len(trajs),
            "rollout/zero_variance_groups": int(g.mazes_per_step - len(set(groups[keep].tolist()))),
            "train/samples": len(samples),
            "train/lr": self._lr(),
            "train/cursor": s.cursor,
            **update,
        }

    def _samples(
        self, trajs: list[Trajectory], adv: torch.Tensor, keep: torch.Tensor
    ) -> list[TurnSample]:
        out = []
        for traj, a, k in zip(trajs, adv.tolist(), keep.tolist(), strict=True):
            if not k or a == 0.0:
                continue  # zero-advantage turns carry no gradient but would dilute the mean
            for turn, msgs in zip(
                traj.turns,
                turn_prompts(traj, self.cfg.task.env, history=self.cfg.task.history),
                strict=True,
            ):
                enc = self.loaded.encoder.encode(msgs)
                if list(enc.prompt_ids) != list(turn.prompt_ids):
                    raise RuntimeError(
                        "re-encoded prompt differs from the sampled one: rollout and trainer disagree"
                    )
                out.append(TurnSample(enc, turn.response_ids, turn.logprobs, a))
        return out

    def _lr(self) -> float:
        g = self.cfg.grpo
        late = g.lr_late is not None and self.state.grpo_steps >= g.lr_late_from
        return g.lr_late if late else g.lr

    def _update(self, samples: list[TurnSample]) -> dict:
        g, s = self.cfg.grpo, self.state
        for group in self.opt.param_groups:
            group["lr"] = self._lr()
        model, totals, n_mb = self.loaded.model, {}, 0
        model.train()
        for epoch in range(g.epochs):
            perm = torch.randperm(
                len(samples),
                generator=torch.Generator().manual_seed(
                    seed_for(self.cfg.schedule.seed, s.step, epoch)
                ),
            )
            for lo in range(0, len(samples), g.minibatch):
                mb = [samples[i] for i in perm[lo : lo + g.minibatch].tolist()]
                metrics = self._minibatch(mb)
                n_mb += 1
                for k, v in metrics.items():
                    totals[k] = totals.get(k, 0.0) + v
        model.eval()
        return {k: v / n_mb for k, v in totals.items()}

    def _minibatch(self, mb: list[TurnSample]) -> dict:
        out, entropy, mask = self._loss(mb)
        self.opt.zero_grad()
        out.loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(
            self.loaded.model.parameters(), self.cfg.grpo.max_grad_norm
        )
        faults.point("optimizer", self.state.step)
        self.opt.step()
        return {
            **out.metrics,
            "loss/grad_norm": float(gn),
            "loss/entropy": float(grpo.masked_mean(entropy.detach(), mask)),
        }

    def _minibatch_loss(self, mb: list[TurnSample]) -> float:
        """The GRPO loss of `mb` under the current weights (no update)."""
        return float(self._loss(mb)[0].loss)

    def _loss(self, mb: list[TurnSample]) -> tuple[grpo.PolicyLoss, torch.Tensor, torch.Tensor]:
        g = self.cfg.grpo
        batch = build_batch(self.loaded, [x.prompt for x in mb], [x.response_ids for x in mb])
        logp, entropy = response_logprobs(
            self.loaded, batch, temperature=self.cfg.model.temperature, answer=self.answer
        )
        old = torch.zeros_like(logp)
        for i, x in enumerate(mb):
            old[i, : len(x.old_logprobs)] = torch.tensor(x.old_logprobs)
        mask = batch.response_mask.float()
        if self.answer is not None:  # constrained: only the move word was chosen by the policy
            mask = torch.zeros_like(mask)
            mask[:, self.answer.choice_pos] = 1.0
        ref = None
        if self.ref is not None:
            with torch.no_grad():
                ref, _ = response_logprobs(
                    self.ref, batch, temperature=self.cfg.model.temperature, answer=self.answer
                )
        out = grpo.policy_loss(
            logp,
            old,
            torch.tensor([x.advantage for x in mb]),
            mask,
            eps_clip_low=g.eps_clip_low,
            eps_clip_high=g.eps_clip_high,
            reduction=g.reduction,
            ref_logprobs=ref,
            kl_coef=g.kl_coef,
            kl_estimator=g.kl_estimator,
        )
        return out, entropy, mask

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
            pol = d / "policy"
            with no_progress_bars():  # one line per checkpoint in logs, not a progress bar
                self.loaded.model.save_pretrained(pol)
            self.loaded.processor.save_pretrained(pol)  # tokenizer, image processor, template
            faults.point("checkpoint", step)
            torch.save(
                {
                    "state": asdict(self.state),
                    "optimizer": self.opt.state_dict(),
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
    cfg: TrainConfig, run_dir: str | Path, *, resume: str = "latest", progress: bool | None = None
) -> dict:
    """Run (or resume) a local training run; returns the summary."""
    if progress is None:
        progress = os.isatty(2)
    return Trainer(cfg, run_dir, resume=resume, progress=progress).fit()
