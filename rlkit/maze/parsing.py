"""One parser from model text to moves (Minigrid keeps actions an IntEnum with one parser too).

`parse_actions(text, mode, max_moves) -> (moves, error)` never raises and runs in time linear in
a bounded prefix of the text: answers longer than `MAX_CHARS` are judged on their last
`MAX_CHARS` characters (the answer tag comes last), and the regexes have no nested quantifiers.

- `strict`: exactly one `<action>...</action>` tag holding 1..max_moves lowercase move words
  separated by commas; anything else is an error.
- `relaxed`: case- and whitespace-insensitive, the last tag wins, and with no tag at all the
  last bare move word counts (early policies say "I go left" far more often than the tag).
"""

from __future__ import annotations

import re

from rlkit.maze.core import Action

PARSERS = ("strict", "relaxed")
MAX_CHARS = 4096
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


def parse_actions(
    text: object, mode: str = "relaxed", max_moves: int = 1
) -> tuple[list[Action], str | None]:
    """Moves in `text` and None, or no moves and a short reason (for the feedback message)."""
    if not isinstance(text, str):
        return [], "answer is not text"
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


def parse_action(text: object, mode: str = "relaxed") -> Action | None:
    """The single move in `text`, or None."""
    moves, _ = parse_actions(text, mode, 1)
    return moves[0] if moves else None


def format_action(*actions: Action) -> str:
    """The canonical answer text for `actions`: what a perfect model would write."""
    return "<action>" + ", ".join(a.word for a in actions) + "</action>"
