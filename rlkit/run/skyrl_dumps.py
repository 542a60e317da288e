"""SkyRL's eval dumps (`<export_path>/dumped_evals/`) read as the `EvalResult` and `Trajectory` the
local evaluator gives, every answer replayed through `MazeEnv`: docs/reading-runs.md."""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.env.maze_env import MazeEnv, maze_from_extras
from rlkit.episodes.evaluate import EvalResult, summarize
from rlkit.episodes.policies import Response
from rlkit.episodes.rollout import Trajectory, play_turn, replay_states
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import Maze
from rlkit.maze.sets import TEST_SETS

_EVAL_DIR = re.compile(r"global_step_(\d+)_evals")
# between two answers of a decoded multi-turn response: <|im_end|>, the user turn, the header
_BETWEEN_TURNS = re.compile(
    r"<\|im_end\|>\s*<\|im_start\|>user\n.*?<\|im_start\|>assistant\n", re.S
)
_TRAILING = re.compile(r"(<\|im_end\|>|<\|endoftext\|>|\s)+$")
NEXT_TURN = "next_turn"
"""`stop_reason` of a step-wise row the episode went on past; its last row carries the reward."""


@dataclass(frozen=True)
class EvalEpisode:
    """One episode of a SkyRL eval dump, in rlkit's terms."""

    maze: dict
    maze_index: int
    maze_hash: str
    data_source: str
    reward: float
    solved: bool
    """The game's verdict on the answers replayed through the row's env, whatever SkyRL paid."""
    responses: list[str]
    stop_reason: str | None
    max_turns: int | None
    extras: dict = field(default_factory=dict, repr=False)

    @property
    def turns(self) -> int:
        return len(self.responses)


def split_turns(output_response: str) -> list[str]:
    """A decoded multi-turn response cut into the assistant's answers (Qwen chat markers)."""
    parts = _BETWEEN_TURNS.split(output_response)
    return [_TRAILING.sub("", p) for p in parts if _TRAILING.sub("", p) or len(parts) == 1]


def _episode(entry: dict, where: str) -> EvalEpisode:
    try:
        extras = entry["env_extras"] or {}
        maze = maze_from_extras(extras)
        score = entry["score"]
        # per-token rewards (the VLM generator's): the episode's is their sum
        reward = float(sum(score)) if isinstance(score, list) else float(score)
        info = extras.get("extra_info") or {}
        responses = [a for text in entry["output_responses"] for a in split_turns(text)]
        max_turns = int(extras["max_turns"]) if extras.get("max_turns") is not None else None
        env = MazeEnv(None, {**extras, "maze": maze, "max_turns": max_turns})
        return EvalEpisode(
            maze=maze.to_dict(),
            maze_index=int(info.get("index", -1)),
            maze_hash=maze.content_hash,
            data_source=str(entry.get("data_source") or extras.get("data_source") or "unknown"),
            reward=reward,
            solved=rules.solved(env.replay(responses)),
            responses=responses,
            stop_reason=entry.get("stop_reason"),
            max_turns=max_turns,
            extras=dict(extras),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(
            f"{where}: not a SkyRL eval dump record ({type(e).__name__}: {e})"
        ) from None


class BadRecordsWarning(UserWarning):
    """Lines of an eval dump that are not JSON were skipped."""


@dataclass(frozen=True)
class EvalDump:
    """One `global_step_N_evals/` dir as read: its episodes and the lines skipped."""

    path: Path
    step: int | None
    episodes: list[EvalEpisode]
    bad_lines: tuple[str, ...] = ()
    """`file:line` of each line that is not a JSON object."""

    def result(self, policy: str = "skyrl", greedy: bool | None = None) -> EvalResult:
        """The step's EvalResult; its policy reads `policy@N`."""
        return episodes_to_result(
            self.episodes, step=self.step, policy=self._name(policy), greedy=greedy
        )

    def results_by_set(
        self, policy: str = "skyrl", greedy: bool | None = None
    ) -> dict[str, EvalResult]:
        """One EvalResult a set (SkyRL dumps a file a set)."""
        by_set: dict[str, list[EvalEpisode]] = {}
        for ep in self.episodes:
            by_set.setdefault(ep.data_source.rsplit("/", 1)[-1], []).append(ep)
        name = self._name(policy)
        return {
            s: episodes_to_result(eps, step=self.step, policy=name, greedy=greedy)
            for s, eps in by_set.items()
        }

    def trajectories(self, policy: str = "skyrl") -> list[Trajectory]:
        """The step's episodes replayed, in `result()`'s order (maze-major)."""
        return dump_trajectories(self.episodes, self._name(policy))

    def _name(self, policy: str) -> str:
        return policy if self.step is None else f"{policy}@{self.step}"

    def warn_bad_lines(self) -> None:
        if self.bad_lines:
            n = len(self.bad_lines)
            shown = ", ".join(self.bad_lines[:3]) + (", ..." if n > 3 else "")
            warnings.warn(
                f"{n} line{'s' if n > 1 else ''} of {self.path} not JSON (a write cut short?), "
                f"skipped: {shown}",
                BadRecordsWarning,
                stacklevel=3,
            )


def _records(f: Path) -> tuple[list[tuple[int, dict]], list[int]]:
    records, bad = [], []
    for n, line in enumerate(f.read_bytes().split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:  # JSONDecodeError, or UnicodeDecodeError for bytes cut mid-character
            entry = None
        if isinstance(entry, dict):
            records.append((n, entry))
        else:
            bad.append(n)
    return records, bad


def episode_records(records: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
    """(first line, record) of each episode, a step-wise episode's rows merged (their answers in
    `output_responses`, the last row's score and stop reason)."""
    out, pending = [], []
    for n, entry in records:
        pending.append((n, entry))
        if entry.get("stop_reason") != NEXT_TURN:
            texts = [e.get("output_response", "") for _, e in pending]
            out.append((pending[0][0], {**entry, "output_responses": texts}))
            pending = []
    if pending:  # the file ends inside an episode: its last row was cut off
        n, entry = pending[0]
        raise UsageError(
            f"line {n}: an episode's rows end before its last turn (a write cut short?)"
        )
    return out


def read_step_dir(step_dir: str | Path) -> EvalDump:
    """One `global_step_N_evals/` dir: every `*.jsonl` but the aggregate, read as episodes."""
    step_dir = Path(step_dir)
    m = _EVAL_DIR.fullmatch(step_dir.name)
    episodes: list[EvalEpisode] = []
    bad_lines: list[str] = []
    for f in sorted(step_dir.glob("*.jsonl")):
        if f.name == "aggregated_results.jsonl":
            continue
        records, bad = _records(f)
        episodes += [_episode(entry, f"{f}:{n}") for n, entry in episode_records(records)]
        bad_lines += [f"{f}:{n}" for n in bad]
    if not episodes:
        skipped = f" ({len(bad_lines)} lines not JSON, first {bad_lines[0]})" if bad_lines else ""
        raise UsageError(
            f"no eval records in {step_dir}{skipped}: was trainer.dump_eval_results on?"
        )
    return EvalDump(step_dir, int(m.group(1)) if m else None, episodes, tuple(bad_lines))


def read_eval_episodes(step_dir: str | Path) -> list[EvalEpisode]:
    """Every episode in one `global_step_N_evals/` dir; skipped lines give a BadRecordsWarning."""
    dump = read_step_dir(step_dir)
    dump.warn_bad_lines()
    return dump.episodes


def read_eval_dump(export_path: str | Path, step: int) -> EvalDump:
    """The dump of one step alone (other steps' dumps are not read)."""
    step_dir = Path(export_path) / "dumped_evals" / f"global_step_{step}_evals"
    if not step_dir.is_dir():
        raise UsageError(
            f"no eval dump for step {step} at {step_dir}: set trainer.dump_eval_results=true"
        )
    return read_step_dir(step_dir)


def to_trajectory(ep: EvalEpisode, sample: int, policy: str) -> Trajectory:
    """The answers replayed through rlkit's env; the reward is SkyRL's, `won` the replay's."""
    env = MazeEnv(None, {**ep.extras, "maze": ep.maze, "max_turns": ep.max_turns})
    traj = Trajectory(ep.maze, ep.maze_index, sample, policy=policy)
    for text in ep.responses:
        if env.done or play_turn(env, Response(text), [], traj):
            break
    # an episode that did not end by the game ran out: of turns, or of SkyRL's input length
    traj.reward, traj.won = ep.reward, env.solved
    traj.terminated, traj.truncated = env.terminated, not env.terminated
    return traj


def _by_maze(episodes: list[EvalEpisode]) -> tuple[dict[int, list[EvalEpisode]], int]:
    by_maze: dict[int, list[EvalEpisode]] = {}
    for ep in episodes:
        by_maze.setdefault(ep.maze_index, []).append(ep)
    counts = {len(v) for v in by_maze.values()}
    if len(counts) != 1:
        raise UsageError(f"eval dump has unequal samples per maze ({sorted(counts)}): incomplete?")
    return dict(sorted(by_maze.items())), counts.pop()


def dump_trajectories(episodes: list[EvalEpisode], policy: str) -> list[Trajectory]:
    """One step's episodes as Trajectories, maze-major (the order of `episodes_to_result`)."""
    by_maze, _ = _by_maze(episodes)
    return [to_trajectory(ep, k, policy) for eps in by_maze.values() for k, ep in enumerate(eps)]


def eval_greedy(config: dict) -> bool | None:
    """Whether a SkyRL run's evals were greedy by its recorded config; None: not recorded."""
    params = ((config.get("skyrl") or {}).get("generator") or {}).get("eval_sampling_params")
    temp = (params or {}).get("temperature")
    if temp is None:
        temp = (config.get("overrides") or {}).get("generator.eval_sampling_params.temperature")
    try:
        return None if temp is None else float(temp) == 0.0
    except (TypeError, ValueError):
        return None


def episodes_to_result(
    episodes: list[EvalEpisode], *, step: int | None, policy: str, greedy: bool | None = None
) -> EvalResult:
    """rlkit's EvalResult of one step's episodes; `greedy` (`eval_greedy`) sets its mode."""
    by_maze, samples = _by_maze(episodes)
    trajs = dump_trajectories(episodes, policy)
    mismatched = sum(
        abs(rules.reward(replay_states(t)[-1]) - t.reward) > 1e-6 for t in trajs if t.turns
    )
    if mismatched:
        warnings.warn(
            f"{mismatched} episodes replay to a different reward than SkyRL's; "
            "the env config on the cluster may differ from this one",
            stacklevel=2,
        )
    set_name = episodes[0].data_source.rsplit("/", 1)[-1]
    mazes = [Maze.from_dict(eps[0].maze) for eps in by_maze.values()]
    # the seed's protocol: every maze of the pinned set, greedy, one sample each
    whole = set_name in TEST_SETS and len(mazes) == TEST_SETS[set_name].n
    seed = bool(greedy) and samples == 1 and whole
    return summarize(
        trajs,
        mazes,
        policy=policy,
        set_name=set_name,
        samples=samples,
        step=step,
        mode="greedy" if greedy else "sampled",
        protocol="seed" if seed else "rlkit",
    )


def read_eval_dumps(
    export_path: str | Path,
    *,
    policy: str = "skyrl",
    greedy: bool | None = None,
    eval_set: str | None = None,
) -> dict[int, EvalResult]:
    """`{step: EvalResult}` of every dumped step (skipped lines: a BadRecordsWarning);
    `eval_set`: that set's episodes where a step dumped several."""
    if not (Path(export_path) / "dumped_evals").is_dir():
        raise UsageError(f"no dumped_evals under {export_path}: set trainer.dump_eval_results=true")
    results = {}
    for step in dump_steps(export_path):
        dump = read_eval_dump(export_path, step)
        dump.warn_bad_lines()
        by_set = dump.results_by_set(policy, greedy) if eval_set else {}
        results[step] = by_set.get(eval_set) or dump.result(policy, greedy)
    return results


def read_eval_dumps_by_set(
    export_path: str | Path, *, policy: str = "skyrl", greedy: bool | None = None
) -> dict[str, dict[int, EvalResult]]:
    """`{set: {step: EvalResult}}` of every dumped step (`read_eval_dumps`, split by set)."""
    out: dict[str, dict[int, EvalResult]] = {}
    for step in dump_steps(export_path):
        dump = read_eval_dump(export_path, step)
        dump.warn_bad_lines()
        for name, result in dump.results_by_set(policy, greedy).items():
            out.setdefault(name, {})[step] = result
    return out


def dump_steps(export_path: str | Path) -> list[int]:
    """The dumped steps, ascending, without reading them (cheap to poll)."""
    dirs = (Path(export_path) / "dumped_evals").glob("global_step_*_evals")
    return sorted(
        int(m.group(1)) for d in dirs if d.is_dir() and (m := _EVAL_DIR.fullmatch(d.name))
    )
