"""Captions that cannot drift: what notebook 04 and the glossary say a healthy KL, clip fraction
and entropy look like quotes no number from some other run. Their levels depend on the model
and its step size, so the notebook prints the run's own (`rlkit.notebook.curves.signal_lines`,
checked on a real run in tests/test_captures.py) and the text quotes only numbers the code
defines: the presets' step sizes and KL weights, the stability module's lines, the windows
`signal_lines` reports."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from rlkit.cluster.skyrl.presets import get_preset
from rlkit.notebook import curves
from rlkit.recipe import Recipe
from rlkit.run.stability import CONVERGED_SOLVE, ENTROPY_COLLAPSE_FRACTION, LOGPROB_GAP_LIMIT
from rlkit.train.presets import preset as local_preset

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_04 = ROOT / "notebooks" / "04_solve_rate_across_checkpoints.py"
GLOSSARY = ROOT / "docs" / "glossary.md"
CAPTIONS = ("*Figure: the trainer's own numbers", "*Figure: the stability signals", "The levels of")
ENTRIES = ("KL (to the reference)", "clip fraction", "entropy", "collapse vs convergence (entropy)")


def code_numbers() -> list[float]:
    tiny, gpu = local_preset("local-tiny"), get_preset("qwen3vl-8b")
    return [
        tiny.grpo.lr,
        tiny.grpo.epochs,
        tiny.recipe.kl_loss_coef,
        gpu.recipe.kl_loss_coef,
        gpu.batch.lr,
        Recipe().eps_clip_low,
        CONVERGED_SOLVE,
        ENTROPY_COLLAPSE_FRACTION,
        LOGPROB_GAP_LIMIT,
        curves.EARLY_STEPS,
        0,  # "near 0", "kl_loss_coef > 0"
        1,  # the ratio's band, "1 - eps_clip_low"
    ]


def numbers(text: str) -> list[tuple[str, float]]:
    """Every number in `text` (a percentage as a fraction), citations' years and notebook
    numbers left out."""
    text = re.sub(r"[A-Z][a-z]+(?: et al\.)? (?:19|20)\d\d|notebook \d\d", "", text)
    found = re.findall(r"(?<![\w.-])(\d+(?:\.\d+)?(?:e-?\d+)?)(%?)", text)
    return [(n + pct, float(n) / (100 if pct else 1)) for n, pct in found]


def notebook_paragraphs() -> list[str]:
    """Notebook 04's markdown cells, each as one line."""
    cells = re.split(r"^# %%.*$", NOTEBOOK_04.read_text(), flags=re.M)
    return [
        " ".join(line.removeprefix("#").strip() for line in cell.strip().splitlines())
        for cell in cells
    ]


def glossary_entry(title: str) -> str:
    text = GLOSSARY.read_text()
    m = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^### |\Z)", text, flags=re.M | re.S)
    assert m, f"docs/glossary.md has no entry {title!r}"
    return m.group(1)


def test_the_healthy_level_captions_quote_only_numbers_the_code_defines():
    texts = {}
    for paragraph in notebook_paragraphs():
        for start in CAPTIONS:
            if start in paragraph:
                texts[f"notebook 04: {start}"] = paragraph
    assert len(texts) == len(CAPTIONS), sorted(texts)
    texts |= {f"glossary: {title}": glossary_entry(title) for title in ENTRIES}
    known = code_numbers()
    quoted, stray = 0, []
    for where, text in texts.items():
        for said, value in numbers(text):
            quoted += 1
            if not any(math.isclose(value, k, rel_tol=1e-9) for k in known):
                stray.append(f"{where}: {said}")
    assert quoted >= 8 and not stray, f"numbers the code does not define: {stray}"


def test_notebook_04_prints_the_runs_own_levels_under_its_stability_figure():
    cells = re.split(r"^# %%.*$", NOTEBOOK_04.read_text(), flags=re.M)
    stability = next(i for i, c in enumerate(cells) if "curves.stability_curves(run" in c)
    printed = next(i for i, c in enumerate(cells) if "curves.signal_lines(run)" in c)
    assert stability < printed <= stability + 3
    said = re.search(
        r"the medians of its first and last (\d+) steps", " ".join(cells[printed - 1].split())
    )
    assert said and int(said.group(1)) == curves.EARLY_STEPS


def test_signal_lines_read_grpo_steps_only_with_the_first_and_last_windows():
    warm = [{"step": s, "train/phase": "warm_start", "loss/bc": 1.0} for s in range(1, 11)]
    steps = range(11, 131)  # 120 GRPO steps
    grpo = [
        {
            "step": s,
            "train/phase": "grpo",
            "loss/kl": 0.01 * (s - 10),
            "loss/clip_fraction": 0.3 if s < 61 else 0.05,
            "loss/entropy": 1.0 - 0.007 * (s - 10),
        }
        for s in steps
    ]
    kl, clip, entropy = curves.signal_spans(warm + grpo)
    assert kl.steps == tuple(steps) and kl.values[0] == 0.01
    first, last = curves.EARLY_STEPS, curves.EARLY_STEPS
    assert statistics.median(clip.early) == 0.3 and len(clip.early) == first
    assert statistics.median(clip.late) == 0.05 and len(clip.late) == last
    lines = curves.signal_lines(warm + grpo)
    assert lines[0].startswith("KL to the reference (`loss/kl`) over 120 GRPO steps (11-130)")
    assert "median 0.3 over the first 50 and 0.05 over the last 50" in lines[1]
    assert f"the last is {entropy.values[-1] / entropy.values[0]:.0%} of the first" in lines[2]
    none = curves.signal_lines(warm)
    assert none[0] == "KL to the reference (`loss/kl`): not logged by this run's GRPO steps"
