"""Fuzz the action parser and the env with random and adversarial model outputs.

A policy early in training writes anything: megabytes of text, unicode, tags inside tags,
nothing at all. The parser and `MazeEnv.step` must answer every one of them without raising,
without hanging (each call has a time bound) and within their contracts: moves only with no
error, at most `max_moves` of them, an episode that ends by the turn budget at the latest.
Inputs: a seeded generator of adversarial strings (12,000) and hypothesis (random text).
"""

from __future__ import annotations

import random
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlkit.env.maze_env import EnvConfig, MazeEnv
from rlkit.maze.core import Action, Stop
from rlkit.maze.generation import generate
from rlkit.maze.parsing import PARSERS, format_action, parse_actions

N_ADVERSARIAL = 12_000
PARSE_BOUND_S = 0.25
"""Per call; a linear parser over its 4096-char window needs well under a millisecond, so only
a pathological (super-linear) case or a hang gets near this, even on a loaded machine."""
STEP_BOUND_S = 1.0
"""Per env step: a parse plus drawing one observation."""

WORDS = ["up", "down", "left", "right", "UP", "Left", "stop", "north", "upp", "ｕｐ", "uр"]
PIECES = [
    "<action>",
    "</action>",
    "< action >",
    "</ action>",
    "<ACTION>",
    "<action",
    "action>",
    "<",
    ">",
    "/",
    ",",
    " ",
    "\n",
    "\t",
    "\x00",
    "\u200b",
    "\u202e",
    "\ud800",
    "😀",
    "迷宫",
    "<think>",
    "</think>",
    "\\",
    "<<action>>",
    "&lt;action&gt;",
]


def adversarial(rng: random.Random) -> str:
    """One hostile answer: a random recipe of repetition, nesting, unicode and sheer length."""
    kind = rng.randrange(8)
    word = rng.choice(WORDS)
    if kind == 0:  # very long: up to ~500 kB, with or without a tag at either end
        body = rng.choice(PIECES + WORDS) * rng.randint(1_000, 60_000)
        return rng.choice(["", f"<action>{word}</action>"]) + body + rng.choice(["", word])
    if kind == 1:  # nested tags, a few to thousands deep
        depth = rng.randint(1, 3_000)
        return "<action>" * depth + word + "</action>" * rng.randint(0, depth)
    if kind == 2:  # many moves in one tag
        return (
            "<action>"
            + ",".join(rng.choice(WORDS) for _ in range(rng.randint(0, 800)))
            + "</action>"
        )
    if kind == 3:  # empty and whitespace-only
        return rng.choice(["", " ", "\n" * rng.randint(1, 10_000), "\t\x00"])
    if kind == 4:  # random unicode code points, surrogates and controls included
        return "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randint(0, 800)))
    if kind == 5:  # long runs of spaces inside a would-be tag: backtracking bait for \s*
        pad = " " * rng.randint(0, 50_000)
        return f"<{pad}action{pad}>{word}<{pad}/{pad}action{pad}"
    if kind == 6:  # a random soup of the pieces above
        return "".join(rng.choice(PIECES + WORDS) for _ in range(rng.randint(0, 1_200)))
    return f"<think>{'hmm ' * rng.randint(0, 10_000)}</think><action>{word}</action>"


def check_parse(text: object, mode: str, max_moves: int) -> None:
    start = time.perf_counter()
    moves, error = parse_actions(text, mode, max_moves)
    elapsed = time.perf_counter() - start
    assert elapsed < PARSE_BOUND_S, (elapsed, repr(text)[:200])
    allowed = (Action, Stop) if mode.startswith("visgym") else Action  # VisGym's game has stop
    assert all(isinstance(m, allowed) for m in moves)
    assert (error is None) == bool(moves) and len(moves) <= max_moves
    assert error is None or (isinstance(error, str) and "\n" not in error)


def test_parser_survives_adversarial_outputs():
    rng = random.Random(0)
    for _ in range(N_ADVERSARIAL):
        text = adversarial(rng)
        check_parse(text, rng.choice(PARSERS), rng.randint(1, 8))
    for junk in (None, b"<action>up</action>", 3, ["up"], {"action": "up"}):
        check_parse(junk, "relaxed", 1)
        check_parse(junk, "strict", 1)


@settings(max_examples=1_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(max_size=4_000) | st.lists(st.sampled_from(PIECES + WORDS)).map("".join),
    mode=st.sampled_from(PARSERS),
    max_moves=st.integers(1, 8),
)
def test_parser_survives_random_text(text, mode, max_moves):
    check_parse(text, mode, max_moves)


@settings(max_examples=300, deadline=None)
@given(moves=st.lists(st.sampled_from(list(Action)), min_size=1, max_size=8), noise=st.text())
def test_a_well_formed_answer_after_any_preamble_parses(moves, noise):
    noise = noise.replace("<", "").replace(">", "")  # a preamble without tags of its own
    answer = noise[-2_000:] + format_action(*moves)
    assert parse_actions(answer, "strict", 8) == (moves, None)
    assert parse_actions(answer, "relaxed", 8) == (moves, None)


def test_env_survives_adversarial_episodes():
    rng = random.Random(1)
    steps = 0
    for episode in range(120):
        parser = rng.choice(PARSERS)
        cfg = EnvConfig(
            max_turns=rng.randint(1, 40),
            parser=parser,
            moves_per_turn=rng.randint(1, 8),
            observation=rng.choice(["image", "text", "both"]),
            prompt_style="visgym-sft" if parser == "visgym-sft" else "compact",
        )
        maze = (  # the visgym parsers read `stop`: VisGym's squares game, not a cell maze
            generate(9, 9, episode, algorithm="visgym")
            if cfg.parser.startswith("visgym")
            else generate(3, 3, episode, placement="random")
        )
        env = MazeEnv(cfg, {"maze": maze})
        messages, _ = env.init()
        assert messages
        done = False
        while not done:
            text = (
                adversarial(rng) if rng.random() < 0.8 else format_action(rng.choice(list(Action)))
            )
            start = time.perf_counter()
            out = env.step(text)
            assert time.perf_counter() - start < STEP_BOUND_S
            steps += 1
            done = out["done"]
            assert out["reward"] in (0.0, 1.0) and (out["reward"] == 0.0 or done)
            assert done or len(out["observations"]) == 1
            assert env.turns <= cfg.max_turns
        assert env.terminated or env.truncated
        metrics = env.get_metrics()
        assert set(metrics) >= {"solved", "turns", "parse_errors"}
        env.close()
    assert steps >= 1_000
