"""The multi-turn maze env on skyrl-gym's `BaseTextEnv`, registered as `rlkit-maze` and built alike
by SkyRL and the local rollouts; a parse failure costs the turn, never an exception:
docs/skyrl-integration.md#the-rows-and-the-env-envdatapy-envmaze_envpy."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from rlkit.env import visgym_text
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import Maze, Move
from rlkit.maze.families import SETS
from rlkit.maze.families import VISGYM_STYLE as VISGYM_STYLE  # re-exported: one picture for both
from rlkit.maze.parsing import PARSERS, parse_actions
from rlkit.maze.render import RenderStyle, state_data_uri, to_ascii

ENV_ID = "rlkit-maze"
OBSERVATIONS = ("image", "text", "both")
PROMPT_STYLES = ("compact", "full", "visgym", "visgym-sft")


@dataclass(frozen=True)
class EnvConfig:
    """Everything that shapes an episode besides the maze itself."""

    max_turns: int = 12
    """Turn budget; reaching it unsolved ends the episode (truncated, reward 0)."""
    observation: str = "image"
    """`image` (a PNG data URI content part), `text` (ASCII grid) or `both`."""
    moves_per_turn: int = 1
    """Moves one answer may carry (`<action>up, left</action>`)."""
    parser: str = "relaxed"
    """`strict` (one well-formed tag), `relaxed` (last tag or bare word), `visgym`, `visgym-sft`."""
    prompt_style: str = "compact"
    """`compact` (one task line), `full` (rules spelled out), `visgym` or `visgym-sft` (squares)."""
    format_weight: float = 0.0
    """Share of the final reward paid for format (`visgym_text.format_share`); 0: off."""
    rules: str | None = None
    """Squares game: this text replaces rlkit's rules (the system prompt; `task.prompt_file`)."""
    style: RenderStyle = field(default_factory=RenderStyle)
    """How observations are drawn (ego view, 8 px cells by default)."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_turns <= 1000:
            raise UsageError(f"max_turns ({self.max_turns}) must be in [1, 1000]")
        if not 1 <= self.moves_per_turn <= 8:
            raise UsageError(f"moves_per_turn ({self.moves_per_turn}) must be in [1, 8]")
        for name, options in (
            ("observation", OBSERVATIONS),
            ("parser", PARSERS),
            ("prompt_style", PROMPT_STYLES),
        ):
            if (value := getattr(self, name)) not in options:
                raise UsageError(f"unknown {name} {value!r}: use {', '.join(options)}")
        sft_parser, sft_prompt = self.parser == "visgym-sft", self.prompt_style == "visgym-sft"
        if self.rules is None and sft_parser != sft_prompt:
            raise UsageError(
                "parser and prompt_style must both be visgym-sft (VisGym's tuple answers): the "
                "prompt must ask for the format the parser reads"
            )
        if not 0.0 <= self.format_weight <= 1.0:
            raise UsageError(f"format_weight ({self.format_weight}) must be in [0, 1]")
        if self.format_weight and self.rules is None and self.prompt_style == "compact":
            raise UsageError(
                "format_weight pays for tags the compact prompt does not ask for: use a visgym "
                "prompt style or a prompt_file that asks for them"
            )
        if self.rules is not None and not (isinstance(self.rules, str) and self.rules.strip()):
            raise UsageError("rules (the prompt file's text) must be non-empty text")

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any] | None) -> EnvConfig:
        """From a plain mapping (SkyRL's DictConfig); render keys flat (`cell_px`) or in `style`."""
        cfg = dict(cfg or {})
        style_keys = {f.name for f in fields(RenderStyle)}
        style = cfg.pop("style", None) or {}
        if not isinstance(style, Mapping):
            raise UsageError(f"env config style must be a mapping of render options, got {style!r}")
        style_kw = {**style, **{k: cfg.pop(k) for k in list(cfg) if k in style_keys}}
        # colours arrive as JSON lists; the style must stay hashable (tile caches key on it)
        style_kw = {k: tuple(v) if isinstance(v, list) else v for k, v in style_kw.items()}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise UsageError(
                f"unknown env config keys {unknown}: valid keys are {sorted(known | style_keys)}"
            )
        try:
            return cls(**cfg, style=RenderStyle(**style_kw))
        except UsageError:
            raise
        except (TypeError, ValueError) as e:  # e.g. max_turns="x" from a YAML file
            raise UsageError(
                f"bad env config {cfg} (style {style_kw}): {e}; give each field its type "
                "(max_turns an int, style a mapping of render options)"
            ) from None

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "style"}
        d.update({f.name: getattr(self.style, f.name) for f in fields(RenderStyle)})
        return d


def env_for_set(name: str) -> EnvConfig:
    """The env config set `name` is evaluated (and its family trained) under, from `SETS`."""
    if name not in SETS:
        raise UsageError(f"no env config for maze set {name!r}: use one of {', '.join(SETS)}")
    return EnvConfig(max_turns=SETS[name].max_turns, **SETS[name].env)


SET_ENV: dict[str, EnvConfig] = {name: env_for_set(name) for name in SETS}
"""The env each pinned set is played under (docs/mazes.md#each-sets-picture-and-prompt)."""

QWEN3VL_IMAGE = {"patch": 16, "merge": 2, "min_pixels": 65536, "max_pixels": 16777216}
"""Qwen3-VL's image processor (2B-32B): sides to multiples of 32 px, area in [min, max]."""


COMPACT_TASK = "Go to the green exit."
"""The whole compact prompt (why so short: docs/mazes.md#each-sets-picture-and-prompt)."""
COMPACT_SQUARES_TASK = "Stop on the red square."
"""The compact line of the squares game, for the tiny model (`local-tiny-visgym`)."""


def system_prompt(cfg: EnvConfig, maze: Maze | None = None) -> str:
    """The rules ("" for the compact style: its task line rides in the user message)."""
    if cfg.rules is not None:
        return cfg.rules
    if cfg.prompt_style == "compact":
        return ""
    if cfg.prompt_style.startswith("visgym"):
        return visgym_text.rules_text(cfg, maze)
    seen = "get the maze as text" if cfg.observation == "text" else "see the maze"
    many = f" You may give up to {cfg.moves_per_turn} moves in one tag, separated by commas."
    return (
        f"You are solving a maze one move at a time. Each turn you {seen}: "
        "the red square (@ in text) is you, the green square (E) is the exit, black lines are "
        "walls you cannot cross, grey cells are where you have already been. Answer each turn "
        "with one move inside action tags: <action>up</action>, <action>down</action>, "
        "<action>left</action> or <action>right</action>. You may think briefly before the tag."
        + (many if cfg.moves_per_turn > 1 else "")
        + f" Reach the exit within {cfg.max_turns} turns."
    )


def observation_text(state: rules.State, cfg: EnvConfig, note: str = "") -> str:
    """The user message's text: the note, the task or turns left, and the ASCII grid if asked."""
    left = cfg.max_turns - state.turns
    ask = "Your action?" if cfg.prompt_style.startswith("visgym") else "Your move?"
    text = (note + " " if note else "") + (
        (COMPACT_SQUARES_TASK if state.maze.game == "squares" else COMPACT_TASK)
        if cfg.prompt_style == "compact"
        else f"Turns left: {left}. {ask}"
    )
    return f"{text}\n{to_ascii(state)}" if cfg.observation in ("text", "both") else text


def observation_message(state: rules.State, cfg: EnvConfig, note: str = "") -> dict:
    """The user message showing `state`: text, image part, or both."""
    text = observation_text(state, cfg, note)
    if cfg.observation == "text":
        return {"role": "user", "content": text}
    image = {"type": "image_url", "image_url": {"url": state_data_uri(state, cfg.style)}}
    return {"role": "user", "content": [image, {"type": "text", "text": text}]}


def prompt_messages(state: rules.State, cfg: EnvConfig, note: str = "") -> list[dict]:
    """A fresh conversation showing `state`: the rules (if any) and the observation."""
    rules_text = system_prompt(cfg, state.maze)
    head = [{"role": "system", "content": rules_text}] if rules_text else []
    return [*head, observation_message(state, cfg, note)]


def turn_note(
    before: rules.State, after: rules.State, moves: Sequence[Move], error: str | None, parser: str
) -> str:
    """The note beside the next observation: squares feedback, or a cell maze's parse refusal."""
    if after.maze.game == "squares":
        return visgym_text.feedback(before, after, moves, error, parser)
    return f"Invalid answer ({error}). Reply like <action>up</action>." if error else ""


def check_game(cfg: EnvConfig, maze: Maze) -> None:
    """Refuse the squares game's parser, rules or format reward on a cell maze."""
    squares_only = cfg.parser.startswith("visgym") or cfg.rules is not None or cfg.format_weight
    if squares_only and maze.game == "cells":
        raise UsageError(
            f"parser {cfg.parser!r} (reads `stop`), a prompt file and format_weight are for "
            "the squares game: rlkit's cell mazes take the relaxed or strict parser"
        )


def episode_texts(maze: Maze, cfg: EnvConfig, answer: str) -> tuple[str, list[str]]:
    """The system prompt and observation texts (the first, then after `answer` unless it ends
    the episode) of an episode of `maze`, no picture drawn."""
    check_game(cfg, maze)
    state = rules.initial(maze)
    moves, error = parse_actions(answer, cfg.parser, cfg.moves_per_turn)
    after = rules.transition(state, moves)
    texts = [observation_text(state, cfg)]
    if not (rules.terminal(after) or rules.truncated(after, cfg.max_turns)):
        texts.append(
            observation_text(after, cfg, turn_note(state, after, moves, error, cfg.parser))
        )
    return system_prompt(cfg, maze), texts


def maze_from_extras(extras: Mapping[str, Any] | None) -> Maze:
    """The maze a dataset row carries: `extra_info.maze` (SkyRL rows) or a top-level `maze`."""
    extras = dict(extras or {})
    info = extras.get("extra_info") or {}
    spec = info.get("maze") if isinstance(info, Mapping) else None
    spec = spec if spec is not None else extras.get("maze")
    if spec is None:
        raise UsageError(
            "env extras carry no maze: dataset rows need extra_info.maze (see rlkit.env.data)"
        )
    if isinstance(spec, Maze):
        return spec
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError as e:
            raise UsageError(
                f"not a maze spec (invalid JSON: {e}): regenerate the row with `rlkit data`"
            ) from None
    return Maze.from_dict(spec)  # refuses an open outer wall, like every Maze


def _row_env(extras: Mapping[str, Any]) -> dict:
    info = extras.get("extra_info") or {}
    env = info.get("env") if isinstance(info, Mapping) else None
    if isinstance(env, str):
        try:
            env = json.loads(env)
        except ValueError:
            raise UsageError(
                "extra_info.env is not JSON: regenerate the dataset with `rlkit data`"
            ) from None
    return dict(env or {})


class MazeEnv(BaseTextEnv):
    """One maze episode. Constructed as `MazeEnv(env_config, extras)`, as skyrl-gym does."""

    def __init__(
        self,
        env_config: Mapping[str, Any] | EnvConfig | None = None,
        extras: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        extras = dict(extras or {})
        if isinstance(env_config, EnvConfig):
            cfg = env_config
        else:  # a dataset row may carry the env it was written for; SkyRL's env_config wins
            cfg = EnvConfig.from_mapping({**_row_env(extras), **dict(env_config or {})})
        if extras.get("max_turns") is not None:  # SkyRL's generator passes its turn budget here
            try:
                max_turns = int(extras["max_turns"])
            except (TypeError, ValueError):
                raise UsageError(
                    f"extras max_turns {extras['max_turns']!r} is not an integer turn budget"
                ) from None
            cfg = replace(cfg, max_turns=max_turns)
        self.cfg = cfg
        self.max_turns = cfg.max_turns
        self.maze = maze_from_extras(extras)
        check_game(cfg, self.maze)
        self.state = rules.initial(self.maze)
        self._formatted = 0.0

    @property
    def turns(self) -> int:  # BaseTextEnv keeps a counter; ours lives in the state
        return self.state.turns

    @turns.setter
    def turns(self, value: int) -> None:  # the base constructor assigns 0; state is the truth
        if value:
            raise AttributeError("turns is derived from the episode state")

    def init(self, prompt: list[dict] | None = None) -> tuple[list[dict], dict]:
        """Reset to the start. The row's prompt is replaced by the rules + first observation."""
        self.state = rules.initial(self.maze)
        self._formatted = 0.0
        return prompt_messages(self.state, self.cfg), self.metadata()

    def step(self, action: str) -> BaseTextEnvStepOutput:
        moves, error = parse_actions(action, self.cfg.parser, self.cfg.moves_per_turn)
        before, self.state = self.state, rules.transition(self.state, moves)
        done, w = self.done, self.cfg.format_weight
        self._formatted += visgym_text.format_share([action]) if w else 0.0
        meta = {**self.metadata(), "actions": [a.word for a in moves], "parse_error": error}
        note = turn_note(before, self.state, moves, error, self.cfg.parser)
        if self.maze.game == "squares":
            meta["feedback"] = note
        obs = [] if done else [observation_message(self.state, self.cfg, note)]
        return BaseTextEnvStepOutput(
            observations=obs,
            reward=(1 - w) * rules.reward(self.state) + w * self._formatted / self.state.turns
            if done
            else 0.0,
            done=done,
            metadata=meta,
            postprocessed_action=None,
        )

    @property
    def terminated(self) -> bool:
        return rules.terminal(self.state)

    @property
    def truncated(self) -> bool:
        return rules.truncated(self.state, self.cfg.max_turns)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def solved(self) -> bool:
        """The game's verdict (`rules.solved`): what every solve rate counts."""
        return rules.solved(self.state)

    def replay(self, answers: list[str]) -> rules.State:
        """The state after playing `answers` from the start, no picture drawn, `self` unchanged."""
        state = rules.initial(self.maze)
        for text in answers:
            if rules.terminal(state) or rules.truncated(state, self.cfg.max_turns):
                break
            moves, _ = parse_actions(text, self.cfg.parser, self.cfg.moves_per_turn)
            state = rules.transition(state, moves)
        return state

    def metadata(self) -> dict:
        s = self.state
        return {
            "position": list(s.pos),
            "turns": s.turns,
            "moves": s.moves,
            "wall_bumps": s.bumps,
            "revisits": s.revisits,
            "parse_errors": s.parse_errors,
            "solved": self.solved,
            "terminated": self.terminated,
            "truncated": self.truncated,
        }

    def get_metrics(self) -> dict[str, float]:
        meta = self.metadata()
        return {
            k: float(meta[k]) for k in ("solved", "turns", "wall_bumps", "revisits", "parse_errors")
        }

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, float]:
        metrics = [m for m in metrics if m]  # a windowed run's earlier turns carry none
        if not metrics:
            return {}
        keys = sorted({k for m in metrics for k in m})
        out = {f"{k}_mean": sum(float(m.get(k, 0.0)) for m in metrics) / len(metrics) for k in keys}
        out["solve_rate"] = out.pop("solved_mean", 0.0)
        return out

    def close(self) -> None:
        self.state = rules.initial(self.maze)


def register_env() -> None:
    """Register `rlkit-maze` with skyrl-gym (idempotent; call inside every Ray task that makes it)."""
    if ENV_ID not in skyrl_gym.registry:
        skyrl_gym.register(id=ENV_ID, entry_point="rlkit.env.maze_env:MazeEnv")


def make_env(maze: Maze, cfg: EnvConfig | None = None) -> MazeEnv:
    """Build through skyrl-gym's registry, the same path SkyRL takes."""
    register_env()
    return skyrl_gym.make(ENV_ID, env_config=cfg or EnvConfig(), extras={"maze": maze})
