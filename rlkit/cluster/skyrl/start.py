"""Where a SkyRL run starts: the model (policy and reference alike, e.g. an SFT checkpoint that
`rlkit model stage` put on /fsx), the squares game's answer format and format reward, and a
prompt file replacing rlkit's rules.

    rlkit submit --preset qwen3vl-8b --model /fsx/models/my-sft \\
        --set answer_format=visgym-sft --set format_weight=0.2 --set prompt_file=/fsx/prompt.txt

`task_view(task)` is the env the run's rows carry; `start_plan(p)` the dry run's line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.cluster.stage import STAGED_MARKER
from rlkit.env.visgym_text import answer_view, read_prompt_file
from rlkit.errors import UsageError

if TYPE_CHECKING:
    from rlkit.cluster.skyrl.preset_sections import SkyTask
    from rlkit.cluster.skyrl.presets import SkyRLPreset
    from rlkit.env.maze_env import EnvConfig


def task_view(task: SkyTask) -> EnvConfig:
    """The env config a run's rows carry: the set's view (`set_view`) with the task's answer
    format, format weight and prompt file (its text as the rules)."""
    from rlkit.cluster.skyrl.preset_checks import set_view

    cfg = set_view(task.eval_set, task.cell_px)
    return answer_view(cfg, task.answer_format, task.format_weight, task.prompt_file)


def model_state(model_path: str) -> str:
    """How the start model looks from here; a directory here that is no HF model is refused."""
    path = Path(model_path)
    if model_path.startswith("rlkit:"):
        return "rlkit's own, built by the job"
    if not model_path.startswith("/") or not path.exists():
        return "a hub id or not visible here: the job loads it"
    if not (path / "config.json").is_file():
        raise UsageError(
            f"model_path {model_path} has no config.json: give an HF model dir "
            "(rlkit model stage MODEL --to DIR writes one)"
        )
    if (path / STAGED_MARKER).is_file():
        return "staged and checked by rlkit model stage"
    return "an HF dir not staged by rlkit model stage (its files are not checked)"


def start_plan(p: SkyRLPreset) -> str:
    """The dry run's `start` line: the model as policy and reference, the answer format, the
    reward and the rules."""
    t = p.task
    answers = (
        "VisGym's ('move', D) with D 0=right 1=up 2=left 3=down, ('stop', 'stop')"
        if t.answer_format == "visgym-sft"
        else "SkyRL's <action>WORD</action>"
    )
    reward = "the verdict" if not t.format_weight else f"{1 - t.format_weight:g} x verdict"
    reward += f" + {t.format_weight:g} x format" if t.format_weight else ""
    rules = "rlkit's"
    if t.prompt_file:
        rules = f"{t.prompt_file} (sha256 {read_prompt_file(t.prompt_file)[1][:12]})"
    model = p.model.model_path
    return (
        f"{model} as policy and reference ({model_state(model)}); answers {answers}; "
        f"reward {reward}; rules {rules}"
    )
