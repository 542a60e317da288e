import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlkit.maze.core import Action
from rlkit.maze.parsing import MAX_CHARS, format_action, parse_actions


def parse_action(text: object, mode: str = "relaxed") -> Action | None:
    """The single move in `text`, or None."""
    moves, _ = parse_actions(text, mode, 1)
    return moves[0] if moves else None


@pytest.mark.parametrize(
    "text, strict, relaxed",
    [
        ("<action>up</action>", [Action.UP], [Action.UP]),
        ("thinking... <action>left</action>", [Action.LEFT], [Action.LEFT]),
        ("<action>Up</action>", [], [Action.UP]),
        ("< action > DOWN </action>", [], [Action.DOWN]),
        ("<action>up</action> no wait <action>right</action>", [], [Action.RIGHT]),
        ("I will go left", [], [Action.LEFT]),
        ("<action>north</action>", [], []),
        ("", [], []),
        ("<action></action>", [], []),
        ("<action><action>up</action></action>", [], [Action.UP]),
    ],
)
def test_strict_and_relaxed(text, strict, relaxed):
    assert parse_actions(text, "strict")[0] == strict
    assert parse_actions(text, "relaxed")[0] == relaxed


def test_errors_are_short_reasons():
    moves, err = parse_actions("<action>up, left</action>", "strict", 1)
    assert moves == [] and "at most 1" in err
    moves, err = parse_actions("<action>up, left</action>", "strict", 2)
    assert moves == [Action.UP, Action.LEFT] and err is None
    assert parse_actions(None)[1] == "answer is not text"


def test_format_action_roundtrip():
    for a in Action:
        assert parse_action(format_action(a), "strict") == a


@settings(max_examples=3000, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_never_raises_and_always_valid_outcome(text):
    for mode in ("strict", "relaxed"):
        moves, err = parse_actions(text, mode, 2)
        assert (moves and err is None) or (not moves and isinstance(err, str))
        assert all(isinstance(m, Action) for m in moves)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["<action>", "</action>", "up", "LEFT", " ", ",", "<", ">", "/", "é", "\n"]
        ),
        max_size=80,
    )
)
def test_fuzz_adversarial_tag_soup(parts):
    text = "".join(parts)
    for mode in ("strict", "relaxed"):
        moves, err = parse_actions(text, mode, 3)
        assert (moves and err is None) or (not moves and err)


def test_huge_inputs_are_bounded_in_time():
    worst = ["<action>" * 200_000, "<" * 500_000 + "action>", "up " * 300_000, "\u00e9" * 1_000_000]
    for text in worst:
        t = time.perf_counter()
        parse_actions(text, "relaxed", 2)
        parse_actions(text, "strict", 2)
        assert time.perf_counter() - t < 0.5
    assert parse_action("x" * (MAX_CHARS * 3) + "<action>down</action>") == Action.DOWN
