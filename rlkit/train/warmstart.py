"""Behaviour cloning on BFS-oracle moves, the warm start before GRPO: of the move word's token
(constrained) or of the whole canonical answer (free; docs/local-trainer.md)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from rlkit.env import visgym_text
from rlkit.env.maze_env import EnvConfig, prompt_messages
from rlkit.episodes.evaluate import EVAL_SEED
from rlkit.episodes.policies import Policy
from rlkit.episodes.rollout import Trajectory, run_episodes
from rlkit.maze import rules
from rlkit.maze.core import Action, Maze, Move, exit_distances, optimal_action, shortest_path
from rlkit.maze.parsing import format_action
from rlkit.maze.sets import MazeSpec, train_maze
from rlkit.model.batching import AnswerSpec, turn_logprobs
from rlkit.model.chat import Encoded
from rlkit.model.load import LoadedModel
from rlkit.train import faults
from rlkit.train.config import WarmStartConfig
from rlkit.train.learner import Learner
from rlkit.train.square_head import SquareHead

BC_STREAM = 20_000_000
"""Training-stream index where BC mazes start (apart from GRPO's cursor and validation)."""
VALIDATION_STREAM = 30_000_000
"""Training-stream index of the validation mazes of the warm start's stop rule."""


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


STOP_SHARE = 0.25
"""Share of a squares-game BC batch that stands on the target (the oracle's answer: `stop`)."""


def squares_bc_states(
    spec: MazeSpec, step: int, batch: int, random_steps: int, seed: int
) -> list[tuple[rules.State, Move, str]]:
    """`batch` (state, oracle answer, feedback) triples of the squares game: a point along the
    oracle's path (the target for `STOP_SHARE`) plus up to `random_steps` random moves."""
    rng = np.random.default_rng([seed, step, 11])
    out = []
    for i in range(batch):
        maze = train_maze(spec, BC_STREAM + step * batch + i)
        state, prev, last = rules.initial(maze), None, None
        on_target = rng.random() < STOP_SHARE
        path = shortest_path(maze)
        walk = len(path) - 1 if on_target else int(rng.integers(len(path)))
        moves = [] if on_target else [Action(int(m)) for m in rng.integers(4, size=random_steps)]
        for _ in range(walk):  # along the oracle's path
            a = rules.best_move(state)
            prev, last, state = state, a, rules.transition(state, [a])
        for a in moves[: int(rng.integers(random_steps + 1))]:
            prev, last, state = state, a, rules.transition(state, [a])
        note = "" if prev is None else visgym_text.feedback(prev, state, [last], None)
        out.append((state, rules.best_move(state), note))
    return out


def open_square_states(
    spec: MazeSpec,
    step: int,
    batch: int,
    seed: int,
    per_maze: int = 8,
    max_distance: int | None = None,
) -> list[tuple[rules.State, Move, str]]:
    """`batch` (state, oracle answer, feedback) triples on floor squares drawn uniformly,
    `per_maze` a fresh maze (within `max_distance` of the target when given)."""
    rng = np.random.default_rng([seed, step, 13])
    out: list[tuple[rules.State, Move, str]] = []
    k = 0
    while len(out) < batch:
        maze = train_maze(spec, BC_STREAM + step * batch + k)
        k += 1
        dist = exit_distances(maze)
        floor = [(int(r), int(c)) for r, c in np.argwhere(~maze.squares)]
        if max_distance is not None:
            floor = [q for q in floor if dist[q] <= max_distance]
        picked = [floor[i] for i in rng.choice(len(floor), min(per_maze, len(floor)), False)]
        if maze.exit not in picked and rng.random() < STOP_SHARE:
            picked[0] = maze.exit
        out += square_states(maze, picked, rng)
    return out[:batch]


def square_states(
    maze: Maze, squares: Sequence[tuple[int, int]], rng: np.random.Generator
) -> list[tuple[rules.State, Move, str]]:
    """(state, oracle answer, feedback) on each of `squares`, arrived at as in a rollout."""
    states = [_arrived(maze, pos, rng) for pos in squares]
    return [(state, rules.best_move(state), note) for state, note in states]


def _arrived(maze: Maze, pos: tuple[int, int], rng: np.random.Generator) -> tuple[rules.State, str]:
    """A state on `pos` moved in from a neighbour (3 in 4), after a bump there, or fresh."""
    here = rules.State(maze=maze, pos=pos, trail=(maze.start, pos))
    u = rng.random()
    if u < 0.75:
        came = []
        for a in Action:
            q = (pos[0] - a.delta[0], pos[1] - a.delta[1])  # where a move `a` into `pos` began
            if not maze.squares[q] and maze.can_move(q, a):
                came.append((q, a))
        if came:
            q, a = came[int(rng.integers(len(came)))]
            before = rules.State(maze=maze, pos=q, trail=(maze.start, q))
            after = rules.transition(before, [a])
            return after, visgym_text.feedback(before, after, [a], None)
    if u < 0.95:
        walls = [a for a in Action if not maze.can_move(pos, a)]
        if walls:
            a = walls[int(rng.integers(len(walls)))]
            after = rules.transition(here, [a])
            return after, visgym_text.feedback(here, after, [a], None)
    return here, ""


def bc_distance(w: WarmStartConfig, step: int) -> int | None:
    """Largest target distance of BC step `step`'s states (0-based), from 2 (None: no limit)."""
    if w.curriculum_steps is None or step >= w.curriculum_steps:
        return None
    return 2 + (CURRICULUM_REACH * step) // w.curriculum_steps


CURRICULUM_REACH = 30
"""Distances the BC curriculum adds over its steps (the 9x9 mazes' farthest squares: ~30)."""


def bc_batch(
    loaded: LoadedModel,
    spec: MazeSpec,
    env: EnvConfig,
    step: int,
    w: WarmStartConfig,
    seed: int,
) -> tuple[list[Encoded], list[Move], list[Maze]]:
    """One BC step's encoded prompts, oracle answers and mazes, by game and `w.states`."""
    if train_maze(spec, BC_STREAM).game != "squares":
        pairs = bc_states(spec, step, w.batch, w.random_steps, seed)
        triples = [(s, a, "") for s, a in pairs]
    elif w.states == "open":
        triples = open_square_states(spec, step, w.batch, seed, w.per_maze, bc_distance(w, step))
    else:
        triples = squares_bc_states(spec, step, w.batch, w.random_steps, seed)
    prompts = [loaded.encoder.encode(prompt_messages(s, env, n)) for s, _, n in triples]
    return prompts, [a for _, a, _ in triples], [s.maze for s, _, _ in triples]


def encode_states(
    loaded: LoadedModel, states: Sequence[rules.State], cfg: EnvConfig
) -> list[Encoded]:
    """The Markov prompt of each state, encoded exactly as a rollout's first turn would be."""
    return [loaded.encoder.encode(prompt_messages(s, cfg)) for s in states]


def answer_ids(loaded: LoadedModel, action: Move) -> list[int]:
    """The canonical free-form answer's tokens: `format_action(action)` and the end of turn."""
    text = format_action(action)
    return [*loaded.tokenizer(text, add_special_tokens=False)["input_ids"], loaded.eos_id]


def bc_loss(
    loaded: LoadedModel,
    answer: AnswerSpec | None,
    prompts: Sequence[Encoded],
    actions: Sequence[Move],
    temperature: float = 1.0,
) -> tuple[torch.Tensor, float]:
    """Cross-entropy of the oracle's answer (the move word's token, or with `answer` None every
    token of `answer_ids`), and the share of answers whose every token is above 1/2."""
    responses = [answer_ids(loaded, a) if answer is None else answer.response(a) for a in actions]
    logp, _, mask = turn_logprobs(
        loaded, prompts, responses, temperature=temperature, answer=answer
    )
    if answer is not None:
        choice = logp[:, answer.choice_pos]
        return -choice.mean(), float((choice > np.log(0.5)).float().mean())
    mask = mask.bool()
    loss = -logp.masked_select(mask).mean()
    hit = (logp > np.log(0.5)) | ~mask
    return loss, float(hit.all(-1).float().mean())


def bc_update(
    learner: Learner,
    prompts: Sequence[Encoded],
    actions: Sequence[Move],
    *,
    lr: float,
    step: int,
    aux: tuple[SquareHead, float, Sequence[Maze], int] | None = None,
    bc: bool = True,
) -> dict[str, float]:
    """One BC optimizer step at `lr` (times a group's `lr_scale`); `aux` (head, weight, mazes,
    pad) adds the per-square loss, which alone trains with `bc` False."""
    for group in learner.opt.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
    learner.loaded.model.train()
    loss, acc = bc_loss(learner.loaded, learner.answer, prompts, actions, learner.temperature)
    out = {"loss/bc": float(loss.detach()), "train/bc_accuracy": acc}
    if aux is not None:
        head, weight, mazes, pad = aux
        aux_loss = head.loss(prompts, mazes, pad)
        loss = (loss if bc else 0.0) + weight * aux_loss
        out["loss/bc_squares"] = float(aux_loss.detach())
    learner.opt.zero_grad()
    loss.backward()
    faults.point("optimizer", step)
    learner.opt.step()
    learner.loaded.model.eval()
    return out


def bc_schedule(w: WarmStartConfig, step: int, val_rate: float | None) -> tuple[float, bool]:
    """(learning rate, whether to validate after it) of BC step `step` (1-based) given the last
    validation solve rate: from `w.fine_from` on, `w.fine_lr` and a check every step."""
    fine = w.fine_from is not None and val_rate is not None and val_rate >= w.fine_from
    check = step % (1 if fine else w.check_every) == 0 or step >= w.max_steps
    warm = min(1.0, step / w.warmup_steps) if w.warmup_steps else 1.0
    return (w.fine_lr if fine else w.lr * warm), check


def validation_episodes(
    policy: Policy,
    spec: MazeSpec,
    env: EnvConfig,
    *,
    samples: int,
    mazes: int = 64,
    history: int | None = 1,
) -> list[Trajectory]:
    """`samples` episodes of `policy` on each of the first `mazes` validation mazes."""
    return run_episodes(
        policy,
        [train_maze(spec, VALIDATION_STREAM + i) for i in range(mazes)],
        env,
        samples=samples,
        seed=EVAL_SEED,
        history=history,
    )


def solve_rate(trajs: Sequence[Trajectory]) -> float:
    return float(np.mean([t.solved for t in trajs]))


def parse_error_rate(trajs: Sequence[Trajectory]) -> float:
    """Share of the episodes' turns whose answer the env could not parse."""
    turns = [t.parse_error is not None for tr in trajs for t in tr.turns]
    return float(np.mean(turns)) if turns else 0.0
