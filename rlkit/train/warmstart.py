"""Behaviour cloning on BFS-oracle moves: the warm start before GRPO (free functions).

Constrained (an `AnswerSpec`) clones only the move word's token; free (`answer=None`) every token
of the canonical answer under the full-vocabulary softmax. Why and from which states:
docs/local-trainer.md#the-warm-start-trainwarmstartpy.
"""

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


STOP_SHARE = 0.25
"""Share of a squares-game BC batch that stands on the target (the oracle's answer: `stop`)."""


def squares_bc_states(
    spec: MazeSpec, step: int, batch: int, random_steps: int, seed: int
) -> list[tuple[rules.State, Move, str]]:
    """`batch` (state, oracle answer, feedback) triples of the squares game (VisGym's): the
    state a point along the oracle's path (on the target for `STOP_SHARE` of them) plus up to
    `random_steps` random moves, the answer the oracle's (`stop` on the target), the feedback
    the env would have shown after the last move (`visgym_text.feedback`), so that the cloned
    prompt is a rollout's."""
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
    """`batch` (state, oracle answer, feedback) triples of the squares game on floor squares
    drawn uniformly, `per_maze` from each fresh maze (within `max_distance` moves of the target
    when given), the target among them about once a maze; the feedback one a rollout would show
    there (a move in from a neighbour, a bump, or none). A pure function of its arguments."""
    rng = np.random.default_rng([seed, step, 13])
    out: list[tuple[rules.State, Move, str]] = []
    k = 0
    while len(out) < batch:
        maze = train_maze(spec, BC_STREAM + step * batch + k)  # k < batch: a state a maze
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
    """(state, oracle answer, feedback) on each of `squares`, reached as `_arrived` says."""
    out = []
    for pos in squares:
        state, note = _arrived(maze, pos, rng)
        out.append((state, rules.best_move(state), note))
    return out


def _arrived(maze: Maze, pos: tuple[int, int], rng: np.random.Generator) -> tuple[rules.State, str]:
    """A state on `pos` as a rollout reaches it: moved in from a neighbour (3 in 4), a bump
    against a wall there, or no feedback; the trail the start and the last squares."""
    here = rules.State(maze=maze, pos=pos, trail=(maze.start, pos))
    u = rng.random()
    if u < 0.75:
        came = []
        for a in Action:
            q = step_back(pos, a)
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


def step_back(pos: tuple[int, int], a: Action) -> tuple[int, int]:
    """The square a move `a` into `pos` came from."""
    dr, dc = a.delta
    return pos[0] - dr, pos[1] - dc


def bc_distance(w: WarmStartConfig, step: int) -> int | None:
    """The largest distance to the target of BC step `step`'s states (0-based) under
    `curriculum_steps`: from 2, growing linearly to cover every square; None: no limit."""
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
    """One BC step's encoded prompts, oracle answers and mazes, by game and `w.states`: the cell
    game's `bc_states` (Markov prompts of the first turn's kind), `squares_bc_states` (along
    the path, with the turn's feedback and `stop` on the target) or `open_square_states`."""
    if train_maze(spec, BC_STREAM).game == "squares":
        if w.states == "open":
            triples = open_square_states(
                spec, step, w.batch, seed, w.per_maze, bc_distance(w, step)
            )
        else:
            triples = squares_bc_states(spec, step, w.batch, w.random_steps, seed)
        prompts = [loaded.encoder.encode(prompt_messages(s, env, n)) for s, _, n in triples]
        return prompts, [a for _, a, _ in triples], [s.maze for s, _, _ in triples]
    pairs = bc_states(spec, step, w.batch, w.random_steps, seed)
    states = [p[0] for p in pairs]
    return encode_states(loaded, states, env), [p[1] for p in pairs], [x.maze for x in states]


def encode_states(
    loaded: LoadedModel, states: Sequence[rules.State], cfg: EnvConfig
) -> list[Encoded]:
    """The Markov prompt of each state, encoded exactly as a rollout's first turn would be."""
    return [loaded.encoder.encode(prompt_messages(s, cfg)) for s in states]


def answer_ids(loaded: LoadedModel, action: Move) -> list[int]:
    """The canonical free-form answer's tokens: `format_action(action)` and the end of turn
    (4 tokens with the tiny tokenizer, 8 with Qwen's: `rlkit.model.action_tag.answer_length`)."""
    text = format_action(action)
    return [*loaded.tokenizer(text, add_special_tokens=False)["input_ids"], loaded.eos_id]


def bc_loss(
    loaded: LoadedModel,
    answer: AnswerSpec | None,
    prompts: Sequence[Encoded],
    actions: Sequence[Move],
    temperature: float = 1.0,
) -> tuple[torch.Tensor, float]:
    """Cross-entropy of the oracle's answer, and its accuracy (share of answers the policy's
    argmax would reproduce: every cloned token above probability 1/2).

    `answer` set: the constrained policy, only the move word's token. None: the free policy,
    the mean over every token of the canonical answer (`answer_ids`)."""
    if answer is not None:
        responses = [answer.response(a) for a in actions]
    else:
        responses = [answer_ids(loaded, a) for a in actions]
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
    """One optimizer step of behaviour cloning at learning rate `lr` (times a parameter group's
    `lr_scale` where it has one) on the learner's policy (constrained: the move word; free: the
    whole answer); returns `loss/bc` and `train/bc_accuracy`. `aux`: (head, weight, the
    prompts' mazes, the picture's pad) adds the dense per-square loss (`loss/bc_squares`);
    with `bc` False (needs `aux`) that loss alone trains, BC's metrics still reported."""
    for group in learner.opt.param_groups:  # a group may run at a multiple (`lr_scale`)
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
    """(learning rate, whether to validate after it) of BC step `step` (1-based), given the
    last validation solve rate (None before the first): `w.lr` after a linear warmup over
    `w.warmup_steps`; from `w.fine_from` on, `w.fine_lr` and a check after every step, so the
    stop is approached gently; the last step always checks."""
    fine = w.fine_from is not None and val_rate is not None and val_rate >= w.fine_from
    check = step % (1 if fine else w.check_every) == 0 or step >= w.max_steps
    warm = min(1.0, step / w.warmup_steps) if w.warmup_steps else 1.0
    return (w.fine_lr if fine else w.lr * warm), check


def validation_mazes(spec: MazeSpec, n: int = 64) -> list[Maze]:
    return [train_maze(spec, VALIDATION_STREAM + i) for i in range(n)]


def validation_episodes(
    policy: Policy,
    spec: MazeSpec,
    env: EnvConfig,
    *,
    samples: int,
    mazes: int = 64,
    history: int | None = 1,
) -> list[Trajectory]:
    """`samples` episodes of `policy` on each of the first `mazes` validation mazes (the eval
    seed): what the warm start's stop rule reads, never a test set."""
    return run_episodes(
        policy,
        validation_mazes(spec, mazes),
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
