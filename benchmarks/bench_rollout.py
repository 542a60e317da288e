"""Batched rollouts vs the one-episode-at-a-time loop: same mazes, model, seeds, episode count.

    python benchmarks/bench_rollout.py                 # tiny model built in a temp dir
    python benchmarks/bench_rollout.py --model DIR --samples 4 --free

Batched: `rlkit.episodes.rollout.run_episodes` (one model call per turn for all live episodes). Naive:
`rlkit.episodes.rollout.play_episode` per episode with the same per-episode random stream, so both play
the same episodes (up to float noise in batched vs unbatched forward passes); the script
reports how many episodes came out identical as a sanity check.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from rlkit.env.maze_env import EnvConfig
from rlkit.episodes.rollout import episode_rngs, play_episode, run_episodes
from rlkit.maze.sets import pinned_set
from rlkit.model.build import build_tiny
from rlkit.model.load import load
from rlkit.model.policy import ModelPolicy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="Qwen3-VL checkpoint dir (default: build the tiny one)")
    ap.add_argument("--samples", type=int, default=1, help="episodes per test maze (64 mazes)")
    ap.add_argument("--max-turns", type=int, default=12)
    ap.add_argument("--free", action="store_true", help="free generation instead of constrained")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or build_tiny(tmp, seed=0)
        policy = ModelPolicy(load(path), constrained=not args.free, max_new_tokens=16)
        mazes = pinned_set()
        cfg = EnvConfig(max_turns=args.max_turns)
        run_episodes(policy, mazes[:2], cfg, seed=args.seed)  # warm-up: allocator, caches

        t0 = time.perf_counter()
        batched = run_episodes(policy, mazes, cfg, samples=args.samples, seed=args.seed)
        t_batched = time.perf_counter() - t0

        rngs = episode_rngs(args.seed, len(batched))
        t0 = time.perf_counter()
        naive = [
            play_episode(policy, mazes[t.maze_index], cfg, rng=rng)
            for t, rng in zip(batched, rngs, strict=True)
        ]
        t_naive = time.perf_counter() - t0

    same = sum(
        [u.text for u in a.turns] == [u.text for u in b.turns]
        for a, b in zip(batched, naive, strict=True)
    )
    n = len(batched)
    rows = {}
    for name, trajs, secs in (("batched", batched, t_batched), ("naive", naive, t_naive)):
        turns = sum(len(t.turns) for t in trajs)
        solved = sum(t.solved for t in trajs)
        rows[name] = (n / secs, turns / secs)
        print(
            f"{name:8s} episodes {n:4d}  turns {turns:5d}  solved {solved:3d}  {secs:7.2f} s  "
            f"{n / secs:8.1f} episodes/s  {turns / secs:8.1f} turns/s"
        )
    ratio_e = rows["batched"][0] / rows["naive"][0]
    ratio_t = rows["batched"][1] / rows["naive"][1]
    mode = "free" if args.free else "constrained"
    print(
        f"ratio    {ratio_e:.1f}x episodes/s, {ratio_t:.1f}x turns/s ({mode}, {args.threads} thread(s)); "
        f"identical episodes {same}/{n}"
    )


if __name__ == "__main__":
    main()
