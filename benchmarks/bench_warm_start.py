"""What does the warm start teach the tiny model on the seed's task? Behaviour cloning alone, each
lever switchable, measured as per-move accuracy and greedy solve rate.

    python benchmarks/bench_warm_start.py [--preset local-tiny-visgym] [--steps 800] [--set k=v ...]
    python benchmarks/bench_warm_start.py --set warm_start.aux_weight=0 --tag no-aux

Builds the preset's tiny model, runs `--steps` BC steps of its warm start (its states, curriculum
and dense per-square loss, `rlkit.train.warmstart`; no stop rule, no GRPO) and every `--every`
steps reports: the held-out per-move accuracy on every floor square of 60 fresh mazes of the
family (by distance to the target), and the greedy solve rate on the pinned eval set (one argmax
episode a maze, the seed's protocol). Writes `benchmarks/results/warm_start_{tag}.json`.
A 15-move path solved at p per move is solved ~p**15 of the time: 95% episodes need ~99.7%.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
import torch

from rlkit.env.maze_env import prompt_messages
from rlkit.episodes.evaluate import EVAL_SEED
from rlkit.episodes.rollout import run_episodes
from rlkit.maze import rules
from rlkit.maze.core import exit_distances
from rlkit.maze.rules import game_moves
from rlkit.maze.sets import pinned_set, train_maze
from rlkit.model.batching import AnswerSpec, choice_logits
from rlkit.model.build import build_tiny
from rlkit.model.load import load
from rlkit.model.policy import ModelPolicy
from rlkit.settings import parse_sets
from rlkit.train.learner import Learner
from rlkit.train.presets import preset
from rlkit.train.square_head import SquareHead, block_side
from rlkit.train.warmstart import bc_batch, bc_schedule, bc_update, square_states

RESULTS = Path(__file__).parent / "results"
HELD_OUT = 60
"""Fresh mazes whose every floor square the per-move accuracy reads (a stream BC never draws)."""
HELD_OUT_STREAM = 40_000_000
"""Training-stream index of the held-out mazes (past BC's, GRPO's and validation's)."""
BANDS = ((1, 4), (5, 8), (9, 12), (13, 16), (17, 99))


def held_out(cfg, seed: int) -> list[tuple]:
    """(state, note, distance) on every floor square of `HELD_OUT` fresh mazes."""
    spec, rng = cfg.task.spec, np.random.default_rng([seed, 17])
    out = []
    for k in range(HELD_OUT):
        maze = train_maze(spec, HELD_OUT_STREAM + k)
        floor = [(int(r), int(c)) for r, c in np.argwhere(~maze.squares)]
        dist = exit_distances(maze)
        out += [(s, n, int(dist[s.pos])) for s, _, n in square_states(maze, floor, rng)]
    return out


@torch.no_grad()
def accuracy(loaded, answer, env, items) -> tuple[float, dict[str, float]]:
    """Share of states whose argmax answer is the oracle's, overall and by distance band."""
    hits = []
    for lo in range(0, len(items), 256):
        part = items[lo : lo + 256]
        prompts = [loaded.encoder.encode(prompt_messages(s, env, n)) for s, n, _ in part]
        best = choice_logits(loaded, prompts, answer).argmax(-1).tolist()
        hits += [
            (d, answer.moves[k] == rules.best_move(s))
            for (s, _, d), k in zip(part, best, strict=True)
        ]
    bands = {
        f"{a}-{b}": round(float(np.mean([h for d, h in hits if a <= d <= b])), 4)
        for a, b in BANDS
        if any(a <= d <= b for d, _ in hits)
    }
    return float(np.mean([h for _, h in hits])), bands


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="local-tiny-visgym")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--every", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--tag", default="default")
    args = ap.parse_args()
    cfg = preset(args.preset).with_overrides({"schedule.seed": args.seed, **parse_sets(args.set)})
    w, task = cfg.warm_start, cfg.task
    torch.set_num_threads(cfg.schedule.threads or torch.get_num_threads())
    items = held_out(cfg, args.seed)
    mazes = pinned_set(task.eval_set)
    rows = []
    with TemporaryDirectory() as tmp:
        loaded = load(build_tiny(tmp, seed=args.seed, config=cfg.model.tiny))
        answer = AnswerSpec.from_loaded(loaded, train_maze(task.spec, 0).game)
        head = None
        if w.aux_weight > 0:
            maze = train_maze(task.spec, 0)
            head = SquareHead(loaded, block_side(loaded, task.env, maze), game_moves(maze))
        params = [{"params": list(loaded.model.parameters())}]
        params += [{"params": list(head.parameters())}] if head else []
        learner = Learner(loaded, torch.optim.AdamW(params, lr=w.lr), answer=answer)
        trained, start = 0.0, time.perf_counter()
        for step in range(1, args.steps + 1):
            t0 = time.perf_counter()
            lr, _ = bc_schedule(w, step, None)
            prompts, actions, batch_mazes = bc_batch(
                loaded, task.spec, task.env, step - 1, w, args.seed
            )
            aux = (head, w.aux_weight, batch_mazes, task.env.style.pad) if head else None
            m = bc_update(learner, prompts, actions, lr=lr, step=step, aux=aux)
            trained += time.perf_counter() - t0
            if step % args.every and step != args.steps:
                continue
            acc, bands = accuracy(loaded, answer, task.env, items)
            policy = ModelPolicy(loaded, greedy=True)
            trajs = run_episodes(
                policy, mazes, task.env, samples=1, seed=EVAL_SEED, history=task.history
            )
            row = {
                "step": step,
                "train_s": round(trained),
                "loss_bc": round(m["loss/bc"], 4),
                "per_move": round(acc, 4),
                "per_move_by_distance": bands,
                "greedy": round(float(np.mean([t.solved for t in trajs])), 4),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = {
        "preset": args.preset,
        "tag": args.tag,
        "seed": args.seed,
        "overrides": parse_sets(args.set),
        "held_out_states": len(items),
        "wall_s": round(time.perf_counter() - start),
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"warm_start_{args.tag}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
