"""Where an answer names its move: the token position after its last `<action>`, found in the
decoded text. Why by text: docs/models-and-engines.md#where-an-answer-names-its-move-modelaction_tagpy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlkit.errors import UsageError
from rlkit.maze.core import Action
from rlkit.maze.parsing import format_action

ACTION_OPEN = "<action>"


def probe_point(tokenizer: Any, answer_ids: Sequence[int]) -> tuple[int, str] | None:
    """Where to ask for the move: `(k, tail)` with `answer_ids[:k]` the whole tokens before the
    end of the answer's last `<action>`, and `tail` the part of `<action>` that the next token
    also covers ("" when the tag ends on a token boundary); None without a tag."""
    text = tokenizer.decode(list(answer_ids))
    at = text.rfind(ACTION_OPEN)
    if at < 0:
        return None
    cut = at + len(ACTION_OPEN)
    lo, hi = 0, len(answer_ids)  # the most tokens whose text stays within the cut
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(tokenizer.decode(list(answer_ids[:mid]))) <= cut:
            lo = mid
        else:
            hi = mid - 1
    head = tokenizer.decode(list(answer_ids[:lo]))
    if not text.startswith(head):  # a token split inside a character: no clean point
        return None
    return lo, text[len(head) : cut]


def move_choices(tokenizer: Any, tail: str) -> tuple[int, ...] | None:
    """The first token of `tail + word` for each move (`Action` order), or None when they are
    not four distinct tokens that reach into their word."""
    firsts = [tokenizer.encode(tail + a.word, add_special_tokens=False)[:1] for a in Action]
    if any(not f or len(tokenizer.decode(f)) <= len(tail) for f in firsts):
        return None
    choices = tuple(f[0] for f in firsts)
    return choices if len(set(choices)) == len(choices) else None


def answer_length(tokenizer: Any) -> int:
    """Tokens in the longest canonical answer (`<action>WORD</action>` and the end of turn) in
    this tokenizer (tiny: 4, Qwen: 8); answer budgets are checked against it."""
    return 1 + max(
        len(tokenizer.encode(format_action(a), add_special_tokens=False)) for a in Action
    )


def check_answer_budget(tokenizer: Any, budget: int, knob: str) -> None:
    """A one-line error when `budget` tokens cannot hold the canonical answer (naming `knob`)."""
    need = answer_length(tokenizer)
    if budget < need:
        raise UsageError(
            f"{knob} ({budget}) cannot hold the canonical answer: this tokenizer writes "
            f"<action>WORD</action> and the end of turn in {need} tokens; set {knob} >= {need}"
        )
