"""Is the suite's update check sized for any machine, and does it catch a wrong gradient?

    python benchmarks/bench_update_check.py [--seeds 0 1 2 3 4 5 6 7] [--mutations flip zero kl obs]

Runs `rlkit.train.update_check.check_update` with a preset's recipe (`--preset`: the embedded
default's, or a SkyRL preset's such as `qwen3vl-8b`) on each seed
(seeds stand in for machines: another CPU's float kernels are another draw), then once per
mutation on the first seed, each mutation a deliberate bug patched in for that run:

- `flip`: the advantages' sign flipped after `score`;
- `zero`: the advantages zeroed after `score`;
- `kl`: the KL term's sign flipped (the loss pushes away from the reference);
- `obs`: the prompts' text tokens (the observations) in the loss with the episode's advantage.

Prints a row a run (each measure beside its threshold) and, for the seeds, each measure's
smallest margin over its threshold in units of the seeds' spread. Writes
`benchmarks/results/update_check.json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

import rlkit.train.policy_losses as policy_losses
import rlkit.train.step as step_module
import rlkit.train.update_check as update_check
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.model.batching import build_batch, logits_at
from rlkit.recipe import Recipe
from rlkit.train.presets import PRESETS, preset

RESULTS = Path(__file__).parent / "results" / "update_check.json"


@contextmanager
def _patched(module: object, name: str, value: object) -> Iterator[None]:
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def _scaled_advantages(factor: float) -> Callable:
    real = update_check.score

    def score(*args, **kwargs):
        s = real(*args, **kwargs)
        return dataclasses.replace(s, advantages=s.advantages * factor)

    return score


def _kl_flipped() -> Callable:
    real = policy_losses.kl_estimate

    def kl_estimate(logprobs, ref, *estimator):
        out = real(logprobs, ref, *estimator)
        return -out if estimator else out  # the KL term names its estimator; approx_kl_old not

    return kl_estimate


def _observations_in_loss() -> Callable:
    real = step_module.minibatch_loss

    def minibatch_loss(learner, mb, recipe):
        out = real(learner, mb, recipe)
        lm = learner.loaded
        batch = build_batch(lm, [x.prompt for x in mb])
        width = batch.input_ids.shape[1]
        cols = torch.arange(width - 1, device=lm.device).expand(len(mb), -1)
        logp = torch.log_softmax(logits_at(lm, batch, cols), -1)
        ids = batch.input_ids[:, 1:]
        tokens = logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        text = (batch.attention_mask[:, 1:] > 0) & (ids != lm.model.config.image_token_id)
        adv = torch.tensor([x.advantage for x in mb], device=lm.device).unsqueeze(1)
        extra = -(adv * tokens * text).sum() / text.sum()
        loss = dataclasses.replace(out.out, loss=out.out.loss + extra)
        return dataclasses.replace(out, out=loss)

    return minibatch_loss


MUTATIONS: dict[str, Callable[[], object]] = {
    "flip": lambda: _patched(update_check, "score", _scaled_advantages(-1.0)),
    "zero": lambda: _patched(update_check, "score", _scaled_advantages(0.0)),
    "kl": lambda: _patched(policy_losses, "kl_estimate", _kl_flipped()),
    "obs": lambda: _patched(step_module, "minibatch_loss", _observations_in_loss()),
}


def _jittered(scale: float, seed: int) -> Callable:
    """`load` whose model's weights are each multiplied by 1 + scale * N(0, 1): the rounding
    differences another CPU's float kernels make, stood in for."""
    real = update_check.load

    def load(*args, **kwargs):
        loaded = real(*args, **kwargs)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in loaded.model.parameters():
                p.mul_(1 + scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        return loaded

    return load


def recipe_of(name: str) -> Recipe:
    """The recipe of a local preset (`local-tiny`) or a SkyRL one (`qwen3vl-8b`)."""
    return preset(name).recipe if name in PRESETS else get_preset(name).recipe


def measure(seed: int, recipe: Recipe) -> dict:
    t0 = time.perf_counter()
    check = update_check.check_update(recipe, seed=seed)
    t = check.trained
    return {
        "seed": seed,
        "solved_gain": check.solved_gain,
        "observations": t.observation_weighted if t else 0.0,
        "observation_share": abs(t.observation_weighted) / abs(t.weighted) if t else 0.0,
        "greedy_rise": check.greedy_after - check.greedy_before,
        "solved_before": check.solved_before,
        "solved_after": check.solved_after,
        "kl_ratio": check.kl_after / check.kl_before if check.kl_before else None,
        "failures": check.failures(),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def margins(rows: list[dict]) -> dict[str, dict]:
    """Each measure's worst seed against its threshold, in the seeds' standard deviations."""
    c = update_check.UpdateCheck
    limits = {
        "solved_gain": (c.MIN_GAIN, +1),
        "greedy_rise": (c.MIN_AGREEMENT, +1),
        "observation_share": (c.MAX_OBSERVATIONS, -1),
        "kl_ratio": (c.MAX_KL_RATIO, -1),
    }
    out = {}
    for key, (limit, sign) in limits.items():
        values = [r[key] for r in rows if r[key] is not None]
        worst = min(values) if sign > 0 else max(values)
        sd = statistics.stdev(values) if len(values) > 1 else float("nan")
        out[key] = {
            "threshold": limit,
            "mean": statistics.fmean(values),
            "sd": sd,
            "worst": worst,
            "worst_margin_sds": sign * (worst - limit) / sd if sd else float("inf"),
        }
    return out


def _row(label: str, r: dict) -> str:
    verdict = "PASS" if not r["failures"] else "FAIL: " + "; ".join(r["failures"])
    kl = "n/a" if r["kl_ratio"] is None else f"x{r['kl_ratio']:.3f}"
    return (
        f"{label:>10}  gain {r['solved_gain']:+.3f}  obs {r['observations']:+.4f}  "
        f"greedy {r['greedy_rise']:+.1%}  solves {r['solved_before']:.0%}->{r['solved_after']:.0%}"
        f"  KL {kl}  {r['seconds']:.0f}s  {verdict}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    ap.add_argument("--mutations", nargs="*", default=list(MUTATIONS), choices=list(MUTATIONS))
    ap.add_argument("--preset", default="local-tiny", help="whose recipe: a local or SkyRL preset")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"default {RESULTS}")
    ap.add_argument(
        "--jitter",
        type=float,
        default=0.0,
        help="multiply every initial weight by 1 + JITTER * N(0, 1) (e.g. 1e-6: float noise)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    recipe = recipe_of(args.preset)
    seeds = []
    for seed in args.seeds:
        if args.jitter:
            with _patched(update_check, "load", _jittered(args.jitter, seed)):
                seeds.append(measure(seed, recipe))
        else:
            seeds.append(measure(seed, recipe))
        print(_row(f"seed {seed}", seeds[-1]), flush=True)
    mutants = {}
    for name in args.mutations:
        with MUTATIONS[name]():
            mutants[name] = measure(args.seeds[0], recipe)
        print(_row(name, mutants[name]), flush=True)
    worst = margins(seeds)
    for key, m in worst.items():
        print(
            f"{key}: threshold {m['threshold']}, mean {m['mean']:.3f} sd {m['sd']:.3f}, worst "
            f"{m['worst']:.3f} = {m['worst_margin_sds']:.1f} sd from the threshold"
        )
    caught = {k: bool(v["failures"]) for k, v in mutants.items()}
    print(f"seeds passing: {sum(not r['failures'] for r in seeds)}/{len(seeds)}; caught: {caught}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"seeds": seeds, "mutations": mutants, "margins": worst}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
