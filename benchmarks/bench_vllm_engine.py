"""The vLLM engine vs the HF engine on the same episodes: episodes/s side by side, and the ratio.

    python benchmarks/bench_vllm_engine.py                 # tiny model built in a temp dir
    python benchmarks/bench_vllm_engine.py --model DIR --samples 4 --sampled

Both engines play every maze of the pinned set through `run_episodes` (batched: one model call
per turn for all live episodes), in both answer modes: constrained (the tiny model's one-token
move) and free generation (the 8B's tags, up to `--max-new-tokens`). Greedy by default, so both
engines play identical episodes (the script counts them) and do the same work; `--sampled`
draws with each engine's own sampler (same distribution, different draws). vLLM's start-up is
timed apart from the episodes; both engines get `--threads` torch threads, HF first (vLLM
in-process leaves the thread count as it found it).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from rlkit.env.maze_env import env_for_set
from rlkit.episodes.rollout import run_episodes
from rlkit.maze.sets import pinned_set
from rlkit.model.build import build_tiny
from rlkit.model.load import load
from rlkit.model.policy import ModelPolicy
from rlkit.model.vllm_engine import engine_limits, start_engine
from rlkit.model.vllm_policy import VllmPolicy


def timed(policy, mazes, cfg, args):
    run_episodes(policy, mazes[:2], cfg, seed=args.seed)  # warm-up: allocators, caches
    t0 = time.perf_counter()
    trajs = run_episodes(policy, mazes, cfg, samples=args.samples, seed=args.seed)
    return trajs, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="Qwen3-VL checkpoint dir (default: build the tiny one)")
    ap.add_argument("--set", default="test", help="pinned maze set (64 mazes)")
    ap.add_argument("--samples", type=int, default=1, help="episodes per maze")
    ap.add_argument("--sampled", action="store_true", help="sample (temperature 1) not greedy")
    ap.add_argument("--max-new-tokens", type=int, default=16, help="free generation's budget")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    mazes, cfg = pinned_set(args.set), env_for_set(args.set)
    modes = {
        "constrained": {},
        "free": {"constrained": False, "max_new_tokens": args.max_new_tokens},
    }
    greedy = not args.sampled

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or build_tiny(tmp, seed=0)
        loaded = load(path)
        hf = {
            m: timed(ModelPolicy(loaded, greedy=greedy, **kw), mazes, cfg, args)
            for m, kw in modes.items()
        }
        t0 = time.perf_counter()
        engine = start_engine(path, **engine_limits(args.set, history=1))
        startup = time.perf_counter() - t0
        vl = {
            m: timed(VllmPolicy(engine, greedy=greedy, **kw), mazes, cfg, args)
            for m, kw in modes.items()
        }

    print(f"vLLM start-up {startup:.1f} s (in-process); {args.threads} torch thread(s)")
    for mode in modes:
        rates = {}
        for name, (trajs, secs) in (("hf", hf[mode]), ("vllm", vl[mode])):
            n, turns = len(trajs), sum(len(t.turns) for t in trajs)
            rates[name] = n / secs
            print(
                f"{mode:11s} {name:4s} episodes {n:4d}  turns {turns:5d}  "
                f"solved {sum(t.solved for t in trajs):3d}  {secs:7.2f} s  "
                f"{n / secs:8.1f} episodes/s  {turns / secs:8.1f} turns/s"
            )
        same = sum(
            [u.text for u in a.turns] == [u.text for u in b.turns]
            for a, b in zip(hf[mode][0], vl[mode][0], strict=True)
        )
        print(
            f"{mode:11s} ratio vllm/hf {rates['vllm'] / rates['hf']:.2f}x episodes/s "
            f"({'greedy' if greedy else 'sampled'}); identical episodes {same}/{len(hf[mode][0])}"
        )


if __name__ == "__main__":
    main()
