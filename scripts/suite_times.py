"""Where the suite's time goes: the slowest tests of a pytest JUnit report, and per test file.

    python -m pytest ... --junitxml=after.xml
    python scripts/suite_times.py after.xml [--before before.xml] [--top 30]

Each test's time is its setup + call + teardown (what JUnit records), so a shared fixture shows
on the test that paid for it. With `--before`, both reports side by side and their ratio.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def test_times(report: Path) -> dict[str, float]:
    """nodeid-like `module::test` -> seconds, from a JUnit XML report."""
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError) as e:
        sys.exit(f"cannot read {report} as a JUnit XML report ({e}): pass pytest's --junitxml file")
    out = {}
    for case in root.iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        out[f"{module}::{case.get('name')}"] = float(case.get("time", 0.0))
    return out


def per_file(times: dict[str, float]) -> Counter:
    files: Counter = Counter()
    for test, seconds in times.items():
        files[test.split("::", 1)[0]] += seconds
    return files


def _ratio(before: float | None, after: float) -> str:
    return f"{after / before:5.2f}x" if before else "    -"


def table(after: dict[str, float], before: dict[str, float] | None, top: int) -> list[str]:
    rows = sorted(after.items(), key=lambda kv: -kv[1])[:top]
    lines = []
    for title, items, other in (
        (f"slowest {top} tests", rows, before),
        ("per file", per_file(after).most_common(top), per_file(before) if before else None),
    ):
        head = f"{'before s':>9} {'after s':>8} {'ratio':>6}  {title}" if other else title
        lines += ["", head]
        for name, seconds in items:
            if other is None:
                lines.append(f"{seconds:8.1f}  {name}")
            else:
                was = other.get(name)
                was_s = f"{was:9.1f}" if was is not None else f"{'-':>9}"
                lines.append(f"{was_s} {seconds:8.1f} {_ratio(was, seconds):>6}  {name}")
    total = sum(after.values())
    summary = f"{len(after)} tests, {total:.0f} s of test time"
    if before:
        summary += f" (before: {len(before)} tests, {sum(before.values()):.0f} s)"
    return [summary, *lines]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path, help="pytest --junitxml report")
    p.add_argument("--before", type=Path, help="an earlier report to compare against")
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args(argv)
    before = test_times(a.before) if a.before else None
    print("\n".join(table(test_times(a.report), before, a.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
