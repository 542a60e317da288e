"""What the squares game (VisGym's maze_2d) says to the model: its rules, the answer format and the
feedback after every turn: docs/mazes.md#each-sets-picture-and-prompt."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import Maze, Move, Stop

ANSWER_FORMATS = ("visgym", "visgym-sft")
"""The squares game's answer formats: SkyRL's `<action>up</action>`, VisGym's `('move', 0)`."""

ACTIONS_LINE = "left, right, up, down or stop"

FORMAT_LINE = (
    "End every answer with the action you choose inside action tags, <action>ACTION</action>, "
    f"where ACTION is one of {ACTIONS_LINE}; you may think it through in text before the tag."
)
"""SkyRL's instruct recipe's format instruction, in rlkit's words."""

FORMAT_TAGS = ("observation", "justification", "action")
"""The tags a well-formed answer fills under VisGym's SFT recipe's format score."""


TUPLE_LINE = (
    "Answer with exactly one action written as a Python tuple: ('move', D) moves one square, "
    "D an integer direction, 0=right, 1=up, 2=left, 3=down; ('stop', 'stop') stops. You may "
    "think it through in text before the tuple."
)
"""The `visgym-sft` format instruction: VisGym's tuples and direction numbers, in rlkit's words."""

_TAGS = tuple(re.compile(rf"<{t}>(.*?)</{t}>", re.DOTALL) for t in FORMAT_TAGS)


def format_share(answers: Sequence[str]) -> float:
    """Share of `answers` that fill every tag of `FORMAT_TAGS` with non-blank text (0 if none)."""
    good = sum(
        isinstance(a, str) and all((m := t.search(a)) and m.group(1).strip() for t in _TAGS)
        for a in answers
    )
    return good / len(answers) if answers else 0.0


TAGGED_LINE = (
    "Write every answer as <observation>what you see</observation><justification>why you "
    "choose the action</justification><action>{action}</action>."
)
"""With a format reward (`format_weight` > 0): the tags `format_share` pays for, asked for."""


def rules_text(cfg: Any, maze: Maze | None) -> str:
    """An `EnvConfig`'s system prompt (picture, actions, how to win, turns): VisGym's tuples
    under `visgym-sft`, and the tags `format_share` pays for when `format_weight` > 0."""
    size = f"{maze.height}x{maze.width} " if maze is not None else ""
    sft = cfg.prompt_style == "visgym-sft"
    text = (
        f"You are in a {size}grid maze seen from above, one square at a time. Gray squares are "
        "walls, white squares are open floor, the blue circle is you and the red square is the "
        "target. Each turn choose one action: move one square left, right, up or down, or stop. "
        "A move into a wall leaves you where you were. Stop ends the game at once, and you win "
        "only if you stop while standing on the red square; reaching it without stopping is not "
        f"enough. You have {cfg.max_turns} turns. " + (TUPLE_LINE if sft else FORMAT_LINE)
    )
    if cfg.format_weight > 0:
        text += " " + TAGGED_LINE.format(action="('move', D)" if sft else "ACTION")
    return text


MAX_PROMPT_CHARS = 20000
"""Longest prompt file (characters): VisGym's own prompt is ~1,000."""


def read_prompt_file(path: str) -> tuple[str, str]:
    """The text of a prompt file (`task.prompt_file`) and its sha256, or a one-line refusal."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"prompt_file {path!r} cannot be read as UTF-8 text: {e}") from None
    if not text.strip() or len(text) > MAX_PROMPT_CHARS:
        raise UsageError(
            f"prompt_file {path!r} holds {len(text.strip())} characters: give 1..{MAX_PROMPT_CHARS}"
        )
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()


def answer_view[C](
    cfg: C,
    answer_format: str = "visgym",
    format_weight: float = 0.0,
    prompt_file: str | None = None,
) -> C:
    """`cfg` (a squares set's `EnvConfig`) with an answer format, format weight and prompt file."""
    if answer_format not in ANSWER_FORMATS:
        raise UsageError(f"answer_format {answer_format!r}: use {' or '.join(ANSWER_FORMATS)}")
    if cfg.parser not in ANSWER_FORMATS:  # rlkit's cell mazes keep their own format and rules
        if answer_format != "visgym" or prompt_file or format_weight:
            raise UsageError("answer_format, format_weight and prompt_file are for squares sets")
        return cfg
    if answer_format == "visgym-sft":
        cfg = replace(cfg, parser=answer_format, prompt_style=answer_format)
    rules = None if prompt_file is None else read_prompt_file(prompt_file)[0]
    return replace(cfg, format_weight=format_weight, rules=rules)


def feedback(
    before: rules.State,
    after: rules.State,
    moves: Sequence[Move],
    error: str | None,
    answer_format: str = "visgym",
) -> str:
    """One turn's feedback: what happened, in a sentence the model reads beside the picture."""
    if error:
        ask = (
            "Answer with ('move', D), D one of 0=right, 1=up, 2=left, 3=down, or ('stop', 'stop')."
            if answer_format == "visgym-sft"
            else f"Finish with <action>ACTION</action>, ACTION one of {ACTIONS_LINE}."
        )
        return (
            f"Your answer could not be read ({error}), so the turn is lost and nothing moved. {ask}"
        )
    if after.stopped:
        if rules.solved(after):
            return "You stopped on the red target square: solved."
        return "You stopped off the target square: the episode ends unsolved, reward 0."
    if any(isinstance(m, Stop) for m in moves):  # a parser that reads stop, a game without it
        return "Stop is not an action in this game; nothing moved."
    if after.bumps > before.bumps:
        return f"You tried to move {moves[-1].word} into a wall and did not move."
    return f"You moved {moves[-1].word}."
