"""What the squares game (VisGym's maze_2d) says to the model: its rules, the answer format, and
the feedback after every turn. rlkit's own words for VisGym's facts (`get_prompt`: size,
colours, actions, success only by stopping on the target) and SkyRL's instruct format line.

Feedback follows VisGym's events: a move made, a move into a wall (no move; VisGym: "cannot move
into a wall"), an unreadable answer (the turn is spent, the same picture follows; SkyRL's
parse-failure message lists the valid actions), and `stop`, which ends the episode and is judged
there: reward 1 on the target, 0 anywhere else.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlkit.maze import rules
from rlkit.maze.core import Maze, Move, Stop

ACTIONS_LINE = "left, right, up, down or stop"

FORMAT_LINE = (
    "End every answer with the action you choose inside action tags, <action>ACTION</action>, "
    f"where ACTION is one of {ACTIONS_LINE}; you may think it through in text before the tag."
)
"""SkyRL's instruct recipe's format instruction, in rlkit's words."""


def rules_text(max_turns: int, maze: Maze | None = None) -> str:
    """The system prompt: the picture's meaning, the actions, how to win, the turn budget."""
    size = f"{maze.height}x{maze.width} " if maze is not None else ""
    return (
        f"You are in a {size}grid maze seen from above, one square at a time. Gray squares are "
        "walls, white squares are open floor, the blue circle is you and the red square is the "
        "target. Each turn choose one action: move one square left, right, up or down, or stop. "
        "A move into a wall leaves you where you were. Stop ends the game at once, and you win "
        "only if you stop while standing on the red square; reaching it without stopping is not "
        f"enough. You have {max_turns} turns. " + FORMAT_LINE
    )


def parse_failure(error: str) -> str:
    return (
        f"Your answer could not be read ({error}), so the turn is lost and nothing moved. "
        f"Finish with <action>ACTION</action>, ACTION one of {ACTIONS_LINE}."
    )


def feedback(
    before: rules.State, after: rules.State, moves: Sequence[Move], error: str | None
) -> str:
    """One turn's feedback: what happened, in a sentence the model reads beside the picture
    (and the trajectory keeps as the turn's note)."""
    if error:
        return parse_failure(error)
    if after.stopped:
        if rules.solved(after):
            return "You stopped on the red target square: solved."
        return "You stopped off the target square: the episode ends unsolved, reward 0."
    if any(isinstance(m, Stop) for m in moves):  # a parser that reads stop, a game without it
        return "Stop is not an action in this game; nothing moved."
    if after.bumps > before.bumps:
        return f"You tried to move {moves[-1].word} into a wall and did not move."
    return f"You moved {moves[-1].word}."
