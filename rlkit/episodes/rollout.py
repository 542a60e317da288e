"""Episodes: play policies on mazes through the env, batched (`run_episodes`; `play_episode` is the
plain loop it must match), and record `Trajectory`s: docs/mazes.md#episodes-and-policies."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from rlkit.env.maze_env import EnvConfig, MazeEnv, make_env
from rlkit.episodes.policies import MoveProbs, Policy, Response
from rlkit.errors import UsageError
from rlkit.fsio import atomic_write_text
from rlkit.maze import rules
from rlkit.maze.core import Maze, move_from_word


@dataclass
class Turn:
    text: str
    actions: list[str]
    parse_error: str | None
    pos_before: tuple[int, int]
    pos_after: tuple[int, int]
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    move_probs: MoveProbs | None = None
    """The policy's `MoveProbs` at this turn; None: not recorded (and absent from the file)."""
    note: str | None = None
    """The env's feedback on this turn (squares game); None, and absent from the file, without."""


PROB_DECIMALS = 4
"""Places kept per move probability in trajectory files: ~7 bytes each, 0.01% resolution."""


def stored_turn(t: Turn, drop: frozenset[str] = frozenset()) -> dict:
    """A turn as its JSON holds it, less the keys in `drop`: probabilities rounded, and no
    `note`/`move_probs` key when None."""
    skip = drop | {k for k in ("note", "move_probs") if getattr(t, k) is None}
    d = {k: v for k, v in vars(t).items() if k not in skip}
    if t.move_probs is not None:
        d["move_probs"] = [round(float(x), PROB_DECIMALS) for x in t.move_probs]
    return d


def _read_turn(t: dict) -> Turn:
    """A turn from JSON; `move_probs` other than None or four numbers is a TypeError."""
    pos = {"pos_before": tuple(t["pos_before"]), "pos_after": tuple(t["pos_after"])}
    if (p := t.get("move_probs")) is None:
        return Turn(**{**t, **pos})
    if not isinstance(p, list) or len(p) != 4 or not all(isinstance(x, int | float) for x in p):
        raise TypeError(f"move_probs must be four numbers or null, got {p!r}")
    return Turn(**{**t, **pos, "move_probs": (float(p[0]), float(p[1]), float(p[2]), float(p[3]))})


@dataclass
class Trajectory:
    """One episode: which maze, every answer, and how it ended."""

    maze: dict
    maze_index: int
    sample: int
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    policy: str = ""
    max_turns: int | None = None
    """The turn budget it was played under (None in older files: the env config's)."""
    won: bool | None = None
    """The game's verdict on the last state (`rules.solved`); None in older files."""

    @property
    def solved(self) -> bool:
        """The game's success on either backend: `won`, never a shaped reward."""
        return rules.record_solved(self.won, self.reward)

    @property
    def maze_obj(self) -> Maze:
        return Maze.from_dict(self.maze)

    def to_json(self) -> str:
        # vars() rather than asdict(): asdict deep-copies every token list (slow for evals)
        turns = [stored_turn(t) for t in self.turns]
        d = {k: v for k, v in vars(self).items() if not (k == "won" and v is None)}
        return json.dumps({**d, "turns": turns}, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> Trajectory:
        return cls(**{**d, "turns": [_read_turn(t) for t in d.get("turns", [])]})


def history_window(messages: list[dict], history: int | None) -> list[dict]:
    """What the model sees: the whole conversation (`None`, SkyRL's cluster mode) or the system
    prompt plus the last `history` observations with the answers between them (Markov for 1)."""
    if history is None:
        return messages
    if history < 1:
        raise UsageError(
            f"history ({history}) must be >= 1 turns, or None for the whole conversation"
        )
    head = [m for m in messages[:1] if m["role"] == "system"]
    body = messages[len(head) :]
    user_idx = [i for i, m in enumerate(body) if m["role"] == "user"]
    keep_from = user_idx[-history] if len(user_idx) >= history else 0
    return head + body[keep_from:]


def episode_rngs(seed: int, n: int) -> list[np.random.Generator]:
    """Independent per-episode streams from one seed (SeedSequence spawning)."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


def play_turn(env: MazeEnv, resp: Response, conv: list[dict], traj: Trajectory) -> bool:
    """Step `env` with one answer, recorded in `traj` and `conv`; True (and the ending in
    `traj`) when it ends the episode."""
    before = env.state.pos
    out = env.step(resp.text)
    meta = out["metadata"]
    traj.turns.append(
        Turn(
            resp.text,
            meta["actions"],
            meta["parse_error"],
            before,
            env.state.pos,
            resp.prompt_ids,
            resp.response_ids,
            resp.logprobs,
            resp.move_probs,
            meta.get("feedback"),
        )
    )
    conv += [{"role": "assistant", "content": resp.text}, *out["observations"]]
    if out["done"]:
        traj.reward, traj.won = float(out["reward"]), env.solved
        traj.terminated, traj.truncated = env.terminated, env.truncated
    return out["done"]


def run_episodes(
    policy: Policy,
    mazes: Sequence[Maze],
    cfg: EnvConfig | None = None,
    *,
    samples: int = 1,
    seed: int = 0,
    history: int | None = 1,
    progress: bool = False,
    max_turns: Sequence[int] | None = None,
) -> list[Trajectory]:
    """Play `samples` episodes of every maze, all at once; results ordered maze-major.
    `max_turns`: each maze's own turn budget (training curricula); None: `cfg`'s."""
    cfg = cfg or EnvConfig()
    if samples < 1:
        raise UsageError(f"samples ({samples}) must be >= 1")
    if max_turns is not None and len(max_turns) != len(mazes):
        raise UsageError(f"{len(max_turns)} turn budgets for {len(mazes)} mazes: give one each")
    if max_turns is None:
        cfgs = [cfg] * len(mazes)
    else:
        cfgs = [replace(cfg, max_turns=int(n)) for n in max_turns]
    jobs = [(i, k) for i in range(len(mazes)) for k in range(samples)]
    envs = [make_env(mazes[i], cfgs[i]) for i, _ in jobs]
    rngs = episode_rngs(seed, len(jobs))
    convs = [env.init()[0] for env in envs]
    trajs = [
        Trajectory(mazes[i].to_dict(), i, k, policy=policy.name, max_turns=cfgs[i].max_turns)
        for i, k in jobs
    ]
    live = list(range(len(jobs)))
    bar = tqdm(total=len(jobs), desc=f"episodes ({policy.name})", disable=not progress, leave=False)
    while live:
        responses = policy.act(
            [envs[j].state for j in live],
            [history_window(convs[j], history) for j in live],
            [rngs[j] for j in live],
        )
        answered = zip(live, responses, strict=True)
        ended = [play_turn(envs[j], r, convs[j], trajs[j]) for j, r in answered]
        bar.update(sum(ended))
        live = [j for j, e in zip(live, ended, strict=True) if not e]
    bar.close()
    return trajs


def play_episode(
    policy: Policy,
    maze: Maze,
    cfg: EnvConfig | None = None,
    *,
    rng: np.random.Generator,
    history: int | None = 1,
) -> Trajectory:
    """The plain loop: one env, one answer at a time (the reference for `run_episodes`)."""
    env = make_env(maze, cfg or EnvConfig())
    conv, _ = env.init()
    traj = Trajectory(maze.to_dict(), 0, 0, policy=policy.name, max_turns=env.max_turns)
    done = False
    while not done:
        (resp,) = policy.act([env.state], [history_window(conv, history)], [rng])
        done = play_turn(env, resp, conv, traj)
    return traj


def turn_prompts(
    traj: Trajectory, cfg: EnvConfig | None = None, *, history: int | None = 1
) -> list[list[dict]]:
    """The messages the policy saw at each turn, rebuilt by replaying the episode through the
    env (same path as `run_episodes`): a trainer re-encodes these instead of storing images."""
    cfg = cfg or EnvConfig()
    if traj.max_turns is not None:
        cfg = replace(cfg, max_turns=traj.max_turns)
    env = MazeEnv(cfg, {"maze": traj.maze})
    conv, _ = env.init()
    prompts = []
    for turn in traj.turns:
        prompts.append(history_window(conv, history))
        out = env.step(turn.text)
        conv = [*conv, {"role": "assistant", "content": turn.text}, *out["observations"]]
    return prompts


def replay_states(traj: Trajectory) -> list[rules.State]:
    """Every state of the episode, from the start, rebuilt from the spec and the parsed moves."""
    state = rules.initial(traj.maze_obj)
    states = [state]
    for t in traj.turns:
        state = rules.transition(state, [move_from_word(a) for a in t.actions])
        states.append(state)
    return states


def save_trajectories(path: str | Path, trajs: Iterable[Trajectory]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(t.to_json() + "\n" for t in trajs))
    return path


def load_trajectories(path: str | Path) -> list[Trajectory]:
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"no trajectory file at {path}: run an evaluation with --out first")
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(Trajectory.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError, KeyError) as e:
            raise UsageError(
                f"{path}:{n} is not a trajectory record ({type(e).__name__}); re-run the evaluation"
            ) from None
    return out
