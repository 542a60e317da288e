"""Where a training run is (phase, step of total, latest eval, ETA): `make demo`'s terminal bar
(`RunFollower`) and the job monitor's line (`RunProgress.line`)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.errors import RlkitError
from rlkit.run import Run, run_or_none

PACE_WINDOW = 10
"""GRPO steps the ETA's pace is measured over."""


@dataclass(frozen=True)
class RunProgress:
    phase: str
    """`starting`, `warm start` or `GRPO`."""
    step: int
    """The latest global step logged (warm-start steps included)."""
    grpo_step: int
    grpo_total: int | None
    """GRPO steps the run's config asks for (None before run.json)."""
    eval_step: int | None = None
    eval_rate: float | None = None
    eval_ci: tuple[float, float] | None = None
    eval_labels: tuple[str, ...] = ()
    pace_s: float | None = None
    """Seconds per GRPO step over the last `PACE_WINDOW` steps (the basis of the ETA)."""

    @property
    def eta_s(self) -> float | None:
        """Seconds of GRPO left at `pace_s`; None before GRPO's first step."""
        if not self.grpo_total or self.grpo_step < 1 or self.pace_s is None:
            return None
        return max(0.0, (self.grpo_total - self.grpo_step) * self.pace_s)

    def eval_text(self) -> str:
        if self.eval_rate is None:
            return "no eval yet"
        if self.eval_labels:
            return f"eval step {self.eval_step}: {'; '.join(self.eval_labels)}"
        ci = f" [{self.eval_ci[0]:.1%}, {self.eval_ci[1]:.1%}]" if self.eval_ci else ""
        return f"eval step {self.eval_step}: {self.eval_rate:.1%}{ci}"

    def line(self) -> str:
        """One line, e.g. `GRPO step 40/160 | eval step 100: 80.1% [72.2%, 86.2%] | ETA 5 min`."""
        if self.phase == "starting":
            return "starting: no step logged yet"
        if self.phase == "warm start":
            where = f"warm start, step {self.step}"
        else:
            total = f"/{self.grpo_total}" if self.grpo_total else ""
            where = f"GRPO step {self.grpo_step}{total}"
        eta = self.eta_s
        tail = f" | ETA {_duration(eta)}" if eta is not None else ""
        return f"{where} | {self.eval_text()}{tail}"


def eval_labels(record: dict[str, Any]) -> tuple[str, ...]:
    """An eval record's rates labelled by protocol, then each other set's; () if none logged."""
    sets = sorted(
        k[len("eval/") : -len("_solve_rate")]
        for k in record
        if k.startswith("eval/") and k.endswith("_solve_rate") and not k.startswith("eval/sampled_")
    )
    if "eval/seed_protocol" not in record and not sets:
        return ()
    out = [label for p in ("eval/", "eval/sampled_") if (label := _rate_label(record, p))]
    return (*out, *(f"{s}: {label}" for s in sets if (label := _rate_label(record, f"eval/{s}_"))))


def _rate_label(record: dict[str, Any], prefix: str) -> str | None:
    rate, low, high = (record.get(prefix + k) for k in ("solve_rate", "ci_low", "ci_high"))
    if rate is None:
        return None
    ci = f" [{low:.1%}, {high:.1%}]" if low is not None and high is not None else ""
    if record.get(prefix + "seed_protocol") and prefix + "solved" in record:
        solved, n = int(record[prefix + "solved"]), int(record[prefix + "mazes"])
        return f"{solved}/{n} = {solved / n:.2%}{ci} (seed's protocol)"
    if prefix + "seed_protocol" in record:
        return f"{rate:.1%}{ci} (sampled, {record[prefix + 'samples']:.0f} a maze)"
    return f"{rate:.1%}{ci}"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def read_progress(
    source: str | Path | Run, records: list[dict[str, Any]] | None = None
) -> RunProgress:
    """The run's progress from its metrics (`records` if already read) and config."""
    run = run_or_none(source)
    if run is None:
        return RunProgress("starting", 0, 0, None)
    if records is None:
        records = run.metrics()
    try:
        total = int(run.config()["schedule"]["steps"])
    except (RlkitError, KeyError, TypeError, ValueError):
        total = None
    steps = [r for r in records if isinstance(r.get("step"), int)]
    if not steps:
        return RunProgress("starting", 0, 0, total)
    warm = [r["step"] for r in steps if r.get("train/phase") == "warm_start" and "loss/bc" in r]
    ws_end = max(warm, default=0)
    if run.backend == "skyrl":
        grpo = [r for r in steps if "rollout/reward_mean" in r]
    else:
        grpo = [r for r in steps if r.get("train/phase") == "grpo" and "rollout/episodes" in r]
    last_eval = next((r for r in reversed(steps) if "eval/solve_rate" in r), {})
    ws_elapsed = max(
        (r.get("timing/elapsed_s", 0.0) for r in steps if r["step"] <= ws_end), default=0.0
    )
    clock = [ws_elapsed] + [r["timing/elapsed_s"] for r in grpo if "timing/elapsed_s" in r]
    n = min(PACE_WINDOW, len(clock) - 1)
    pace = (clock[-1] - clock[-1 - n]) / n if n and clock[-1] > clock[-1 - n] else None
    ci = [last_eval.get(k) for k in ("eval/ci_low", "eval/ci_high")]
    return RunProgress(
        phase="GRPO" if grpo else "warm start",
        step=max(r["step"] for r in steps),
        grpo_step=len({r["step"] for r in grpo}),
        grpo_total=total,
        eval_step=last_eval.get("step"),
        eval_rate=last_eval.get("eval/solve_rate"),
        eval_ci=None if None in ci else tuple(ci),
        eval_labels=eval_labels(last_eval),
        pace_s=pace,
    )


class RunFollower:
    """Follows a run dir every `poll_s` until `stop()`: a tqdm bar on a terminal, else its line at
    most every `log_every_s` and at the end."""

    def __init__(
        self, run_dir: str | Path, *, poll_s: float = 2.0, log_every_s: float = 30.0, file=None
    ) -> None:
        self.run_dir = Path(run_dir)
        self.poll_s = poll_s
        self.log_every_s = log_every_s
        self.file = file if file is not None else sys.stderr
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="rlkit-run-follower", daemon=True)
        self.last: RunProgress | None = None

    def __enter__(self) -> RunFollower:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(10)

    def _polls(self) -> Iterator[tuple[bool, RunProgress | None]]:
        """(whether it is the last poll, the progress or None) every `poll_s` until `stop()`."""
        final = False
        while not final:
            final = self._halt.wait(self.poll_s)
            try:
                self.last = read_progress(self.run_dir)
            except RlkitError:  # a line being written: the next poll reads it whole
                yield final, None
            else:
                yield final, self.last

    def _follow(self) -> None:
        interactive = hasattr(self.file, "isatty") and self.file.isatty()
        (self._follow_bar if interactive else self._follow_lines)()

    def _follow_lines(self) -> None:
        said, said_at = None, float("-inf")
        for final, p in self._polls():
            now = time.monotonic()
            if p is not None and p.line() != said and (final or now - said_at >= self.log_every_s):
                print(f"training: {p.line()}", file=self.file, flush=True)
                said, said_at = p.line(), now

    def _follow_bar(self) -> None:
        from tqdm import tqdm

        bar = tqdm(total=None, desc="training", unit="step", file=self.file, dynamic_ncols=True)
        in_grpo = False
        try:
            for _, p in self._polls():
                if p is None:
                    continue
                # the clock restarts with GRPO: the warm start's minutes are no GRPO pace
                starts_grpo = p.phase == "GRPO" and not in_grpo
                if starts_grpo or (p.grpo_total and bar.total != p.grpo_total):
                    bar.reset(total=p.grpo_total)
                    bar.n = bar.last_print_n = p.grpo_step  # done before the clock started
                    in_grpo = p.phase == "GRPO"
                if p.grpo_step > bar.n:
                    bar.update(p.grpo_step - bar.n)  # tqdm's rate and ETA follow it
                desc = p.phase if p.phase != "warm start" else f"warm start ({p.step})"
                bar.set_description(desc, refresh=False)
                bar.set_postfix_str(p.eval_text(), refresh=False)
                bar.refresh()
        finally:
            bar.close()
