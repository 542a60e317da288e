"""Behaviour cloning on BFS-oracle moves: the warm start before GRPO (free functions).

A randomly initialised VLM explores a maze no better than chance and GRPO alone stays flat;
an instruct model starts with partial skill. Cloning the oracle's move from varied states (the
start plus a few random moves, so trails vary) gives the tiny model that partial skill in
seconds; the trainer stops it as soon as a validation solve rate reaches the target, so GRPO
starts from a policy that is good but far from solved.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from rlkit.env.maze_env import EnvConfig, prompt_messages
from rlkit.maze import rules
from rlkit.maze.core import Action, optimal_action
from rlkit.maze.sets import MazeSpec, train_maze
from rlkit.model.chat import Encoded
from rlkit.model.load import LoadedModel
from rlkit.model.policy import AnswerSpec, turn_logprobs
from rlkit.train import faults
from rlkit.train.update import Learner

BC_STREAM = 20_000_000
"""Training-stream index where BC mazes start (apart from GRPO's cursor and validation)."""
VALIDATION_STREAM = 30_000_000
"""Training-stream index of the validation mazes for the warm-start stop rule (never the test set)."""


def bc_states(
    spec: MazeSpec, step: int, batch: int, random_steps: int, seed: int
) -> list[tuple[rules.State, Action]]:
    """`batch` (state, oracle move) pairs for BC step `step`; a pure function of its arguments."""
    rng = np.random.default_rng([seed, step, 7])
    out = []
    for i in range(batch):
        maze = train_maze(spec, BC_STREAM + step * batch + i)
        state = rules.initial(maze)
        for _ in range(int(rng.integers(random_steps + 1))):
            nxt = rules.transition(state, [Action(int(rng.integers(4)))])
            if rules.terminal(nxt):
                break
            state = nxt
        out.append((state, optimal_action(maze, state.pos)))
    return out


def encode_states(
    loaded: LoadedModel, states: Sequence[rules.State], cfg: EnvConfig
) -> list[Encoded]:
    """The Markov prompt of each state, encoded exactly as a rollout's first turn would be."""
    return [loaded.encoder.encode(prompt_messages(s, cfg)) for s in states]


def bc_loss(
    loaded: LoadedModel,
    answer: AnswerSpec,
    prompts: Sequence[Encoded],
    actions: Sequence[Action],
    temperature: float = 1.0,
) -> tuple[torch.Tensor, float]:
    """Cross-entropy of the oracle's move under the constrained policy, and its accuracy."""
    responses = [answer.response(int(a)) for a in actions]
    logp, _, _ = turn_logprobs(loaded, prompts, responses, temperature=temperature, answer=answer)
    choice = logp[:, answer.choice_pos]
    return -choice.mean(), float((choice > np.log(0.5)).float().mean())


def bc_update(
    learner: Learner,
    prompts: Sequence[Encoded],
    actions: Sequence[Action],
    *,
    lr: float,
    step: int,
) -> dict[str, float]:
    """One optimizer step of behaviour cloning at learning rate `lr`; returns `loss/bc` and
    `train/bc_accuracy`."""
    for group in learner.opt.param_groups:
        group["lr"] = lr
    learner.loaded.model.train()
    loss, acc = bc_loss(learner.loaded, learner.answer, prompts, actions, learner.temperature)
    learner.opt.zero_grad()
    loss.backward()
    faults.point("optimizer", step)
    learner.opt.step()
    learner.loaded.model.eval()
    return {"loss/bc": float(loss.detach()), "train/bc_accuracy": acc}


def validation_mazes(spec: MazeSpec, n: int = 64) -> list:
    return [train_maze(spec, VALIDATION_STREAM + i) for i in range(n)]
