"""Env step + render throughput: rlkit vs maze-dataset's `as_pixels` vs a naive PIL redraw.

    python benchmarks/bench_render.py [--steps 3000]

Each contender renders the state after every move of a random walk on the same mazes (the
work an env does per step). rlkit is timed twice: the full `MazeEnv.step` (parse, move, render,
PNG data URI) and the raw array render the local trainer uses. Targets: >= 20x maze-dataset,
>= 5x naive PIL.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from PIL import Image, ImageDraw

from rlkit.env.maze_env import EnvConfig, make_env
from rlkit.maze import rules
from rlkit.maze.core import Action, Maze
from rlkit.maze.generation import generate
from rlkit.maze.parsing import format_action
from rlkit.maze.render import RenderStyle, data_uri, render, render_array


def walk(maze: Maze, steps: int, rng: np.random.Generator, budget: int) -> list[rules.State]:
    """States of random-walk episodes, each ending at the exit or after `budget` moves."""
    s, out = rules.initial(maze), []
    for _ in range(steps):
        s = rules.transition(s, [Action(int(rng.integers(4)))])
        if rules.terminal(s) or s.turns >= budget:
            s = rules.initial(maze)
        out.append(s)
    return out


def naive_pil(state: rules.State, cp: int = 8) -> np.ndarray:
    """The obvious implementation: draw every cell and wall with ImageDraw."""
    m = state.maze
    img = Image.new("RGB", (m.width * cp, m.height * cp), (255, 255, 255))
    d = ImageDraw.Draw(img)
    visited = state.visited
    for r in range(m.height):
        for c in range(m.width):
            x, y = c * cp, r * cp
            colour = (
                (220, 30, 30)
                if (r, c) == state.pos
                else (30, 180, 60)
                if (r, c) == m.exit
                else (160, 160, 160)
                if (r, c) in visited
                else None
            )
            if colour:
                d.rectangle([x, y, x + cp - 1, y + cp - 1], fill=colour)
            w = int(m.walls[r, c])
            if w & 1:
                d.line([x, y, x + cp - 1, y], fill=0)
            if w & 4:
                d.line([x, y + cp - 1, x + cp - 1, y + cp - 1], fill=0)
            if w & 8:
                d.line([x, y, x, y + cp - 1], fill=0)
            if w & 2:
                d.line([x + cp - 1, y, x + cp - 1, y + cp - 1], fill=0)
    return np.asarray(img)


def maze_dataset_render(state: rules.State, conn: np.ndarray):
    from maze_dataset import TargetedLatticeMaze

    m = TargetedLatticeMaze(
        connection_list=conn, start_pos=np.array(state.pos), end_pos=np.array(state.maze.exit)
    )
    return m.as_pixels()


def rate(fn, states) -> float:
    t = time.perf_counter()
    for s in states:
        fn(s)
    return len(states) / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--budget", type=int, default=64, help="turn budget per episode")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    maze = generate(args.size, args.size, 0)
    states = walk(maze, args.steps, rng, args.budget)
    conn = np.stack([~(maze.walls[:, :] & 4).astype(bool), ~(maze.walls & 2).astype(bool)])
    full = RenderStyle(view="full")
    env = make_env(maze, EnvConfig(style=full, max_turns=args.budget))
    env.init()
    texts = [format_action(Action(int(a))) for a in rng.integers(4, size=args.steps)]
    t = time.perf_counter()
    for text in texts:
        env.step(text)
        if env.done:
            env.init()
    env_rate = len(texts) / (time.perf_counter() - t)
    rows = {
        "rlkit render_array": rate(lambda s: render_array(s, full), states),
        "rlkit render + PNG URI": rate(lambda s: data_uri(render(s, full)), states),
        "rlkit env.step (+PNG URI)": env_rate,
        "naive PIL redraw": rate(naive_pil, states),
        "maze-dataset as_pixels": rate(
            lambda s: maze_dataset_render(s, conn), states[: max(200, args.steps // 10)]
        ),
    }
    base_md, base_naive = rows["maze-dataset as_pixels"], rows["naive PIL redraw"]
    print(f"{args.size}x{args.size} maze, {args.steps} states")
    print(f"{'contender':28s} {'steps/s':>10s} {'vs maze-dataset':>16s} {'vs naive PIL':>13s}")
    for name, r in rows.items():
        print(f"{name:28s} {r:10.0f} {r / base_md:15.1f}x {r / base_naive:12.1f}x")


if __name__ == "__main__":
    main()
