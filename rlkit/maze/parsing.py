"""One parser from model text to moves: `parse_actions(text, mode, max_moves) -> (moves, error)`,
which never raises. Each mode's rule: docs/mazes.md#reading-an-answer-the-parse-modes."""

from __future__ import annotations

import ast
import re

from rlkit.maze.core import STOP, Action, Move

PARSERS = ("strict", "relaxed", "visgym", "visgym-sft")
VISGYM_DIRECTIONS = (Action.RIGHT, Action.UP, Action.LEFT, Action.DOWN)
"""VisGym maze_2d's move payloads 0..3 in its order (`_action_to_direction`)."""
MAX_CHARS = 4096
VISGYM_MAX_CHARS = 16384
"""Longest answer the `visgym` parser reads (characters); longer ones are a parse failure."""
_VISGYM_TAG = re.compile(r"<action>\s*(\w+)\s*</action>", re.IGNORECASE)
_VISGYM_WORDS: dict[str, Move] = {**{a.word: a for a in Action}, STOP.word: STOP}
_TUPLE = re.compile(r"\(\s*['\"]?(move|stop)['\"]?\s*,", re.IGNORECASE)
_SFT_TUPLE = re.compile(r"""\(\s*(['"]?)(\w+)\1\s*,([^()]{0,40})\)""")
_WORDS = {a.word: a for a in Action}
_STRICT_TAG = re.compile(r"<action>([a-z, ]{1,80})</action>")
_RELAXED_TAG = re.compile(r"<\s*action\s*>([^<>]{0,200})<\s*/\s*action\s*>", re.IGNORECASE)
_WORD = re.compile(r"\b(up|down|left|right)\b", re.IGNORECASE)


def _words(body: str, max_moves: int, strict: bool) -> tuple[list[Action], str | None]:
    parts = [p.strip() for p in body.split(",")] if strict else _WORD.findall(body)
    if strict and any(p not in _WORDS for p in parts):
        return [], "unknown move word in tag"
    if not parts:
        return [], "empty action tag"
    if len(parts) > max_moves:
        return [], f"{len(parts)} moves given, at most {max_moves} allowed"
    return [_WORDS[p.lower()] for p in parts], None


def _visgym(text: str) -> tuple[list[Move], str | None]:
    if not text.strip():
        return [], "empty answer"
    if len(text) > VISGYM_MAX_CHARS:
        return [], f"answer longer than {VISGYM_MAX_CHARS} characters"
    tags = _VISGYM_TAG.findall(text)
    if not tags:
        if _TUPLE.search(text):
            return [], "a tuple like ('move', 0) is not an action tag"
        return [], "no <action> tag"
    word = tags[-1].lower()
    if word not in _VISGYM_WORDS:
        return [], f"unknown action {tags[-1][:20]!r} in the last tag"
    return [_VISGYM_WORDS[word]], None


def _visgym_sft(text: str) -> tuple[list[Move], str | None]:
    if len(text) > VISGYM_MAX_CHARS:
        return [], f"answer longer than {VISGYM_MAX_CHARS} characters"
    for found in _SFT_TUPLE.finditer(text):  # the first two-element tuple literal counts
        name, raw = found.group(2), found.group(3).strip()
        try:
            payload = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            continue
        if not isinstance(payload, tuple):  # `('move', 0, 1)`: three elements, not an action
            break
    else:
        return [], "no two-element action tuple like ('move', 0) or ('stop', 'stop')"
    if name == "move":
        if type(payload) is not int or not 0 <= payload <= 3:
            return [], f"move direction {raw[:20]} is not 0, 1, 2 or 3"
        return [VISGYM_DIRECTIONS[payload]], None
    if name == "stop":
        if not isinstance(payload, str) or not 1 <= len(payload) <= 4:
            return [], "stop takes a short text payload: ('stop', 'stop')"
        return [STOP], None
    return [], f"unknown action name {name[:20]!r}: use 'move' or 'stop'"


def parse_actions(
    text: object, mode: str = "relaxed", max_moves: int = 1
) -> tuple[list[Move], str | None]:
    """Moves in `text` and None, or no moves and a short reason (for the feedback message).
    Only the `visgym` modes can return `STOP`."""
    if not isinstance(text, str):
        return [], "answer is not text"
    if mode == "visgym":
        return _visgym(text)
    if mode == "visgym-sft":
        return _visgym_sft(text)
    if len(text) > MAX_CHARS:
        text = text[-MAX_CHARS:]
    if mode == "strict":
        tags = _STRICT_TAG.findall(text)
        if len(tags) != 1 or text.count("<action>") != 1:
            return [], "no action tag" if not tags else "more than one action tag"
        return _words(tags[0], max_moves, strict=True)
    tags = _RELAXED_TAG.findall(text)
    if tags:
        return _words(tags[-1], max_moves, strict=False)
    bare = _WORD.findall(text)
    if not bare:
        return [], "no move found"
    return [_WORDS[bare[-1].lower()]], None


def format_action(*actions: Move) -> str:
    """The canonical answer text for `actions`: what a perfect model would write."""
    return "<action>" + ", ".join(a.word for a in actions) + "</action>"


def format_tuple(action: Move) -> str:
    """The `visgym-sft` answer for `action`: `('move', D)` in VisGym's numbering, or stop."""
    if action is STOP:
        return "('stop', 'stop')"
    return f"('move', {VISGYM_DIRECTIONS.index(action)})"
