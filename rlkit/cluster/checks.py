"""A check's outcome, as the preflight job and the GPU checks report it: a name, a status, what
was found and, when it is not ok, how to fix it.

Its own module so that the preflight job (`rlkit.cluster.preflight`, which also prints the
table) and the GPU verdicts (`rlkit.cluster.gpu_checks`) share it while only preflight imports
the verdicts. `budget_checks` turns a run's token budget (`rlkit.model.budget_report`) into
checks, so the preflight job states what the dry run prints, from the checkpoint's own files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlkit.model.budget_report import BudgetReport


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    """ok, warn (the run starts but something costs time or money), fail, or skip (not run
    here, the detail says why)."""
    detail: str
    fix: str = ""


def budget_checks(report: BudgetReport) -> list[Check]:
    """The token budget as preflight reports it: the checkpoint's own facts (where its files
    are), the image as the processor sees it, and the budget: fail where the turn budget cannot
    fit (the dry run refuses it too), warn where full-length answers cut episodes short."""
    b = report.budget
    lines = {ln.split(":", 1)[0]: ln.split(":", 1)[1].strip() for ln in report.lines()}
    out = []
    if report.model_dir is None:
        out.append(Check("chat template", "skip", f"not read here: {report.where}"))
    else:
        template = report.template
        out += [
            Check(
                "chat template",
                "ok" if template else "fail",
                template or f"{report.model_dir} has no chat template",
                "" if template else "copy chat_template.json from the model's release",
            ),
            Check(
                "stop ids",
                "ok" if report.stops else "warn",
                lines["stop ids"],
                "" if report.stops else "add eos_token_id to generation_config.json",
            ),
            Check("generation defaults", "ok", lines["defaults"]),
        ]
    if "image" in lines:
        out.append(Check("image tokens", "ok", lines["image"]))
    detail = f"{lines['per turn']}; {lines['per episode']}"
    refusal, warning = b.refusal(), b.warning()
    if refusal:
        return [*out, Check("token budget", "fail", detail, refusal)]
    if warning:
        need = b.prompt(b.max_turns)
        fix = (
            f"{warning}; to play every turn at full length set max_input_length >= {need}, "
            "or lower max_generate_length"
        )
        return [*out, Check("token budget", "warn", detail, fix)]
    return [*out, Check("token budget", "ok", detail)]
