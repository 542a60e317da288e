"""The budget printer: what the dry run and preflight say about a run's model and its tokens,
torch-free. An example: docs/models-and-engines.md#the-budget-report-modelbudget_reportpy."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlkit.env.maze_env import EnvConfig, env_for_set, episode_texts
from rlkit.errors import UsageError
from rlkit.maze.core import Maze
from rlkit.maze.render import RenderStyle
from rlkit.maze.sets import TEST_SETS
from rlkit.model.budgets import (
    ANSWER_ROOM,
    BAD_ANSWER,
    QWEN_ASSUMED,
    Assumed,
    Episode,
    ImageProcessor,
    Tokens,
    TurnBudget,
    preprocessor,
    smart_resize,
    turn_budget,
)
from rlkit.model.checkpoint_files import sampling_defaults, stop_ids, template_source


def set_episode(
    set_name: str, max_turns: int | None = None, cfg: EnvConfig | None = None
) -> Episode:
    """The texts and image size of `set_name`'s episodes (its first maze) under a turn budget
    (default: the set's); `cfg`: the env where it is not the set's own."""
    cfg = cfg or env_for_set(set_name)
    cfg = cfg if max_turns is None else replace(cfg, max_turns=max_turns)
    maze = TEST_SETS[set_name].spec.maze(0)
    system, texts = episode_texts(maze, cfg, BAD_ANSWER)
    image = None if cfg.observation == "text" else picture_size(maze, cfg.style)
    sft = cfg.parser == "visgym-sft"
    return Episode(system, tuple(texts), image, stop=maze.game == "squares", tuples=sft)


def picture_size(maze: Maze, style: RenderStyle) -> tuple[int, int]:
    """(height, width) in px of `maze`'s picture in `style`, as `render_array` draws it."""
    if maze.game == "squares":
        return (maze.height + style.pad) * style.cell_px, (maze.width + style.pad) * style.cell_px
    if style.view == "ego":  # an even window of cells around the agent
        side = (2 * style.ego_radius + 2) * style.cell_px
        return side, side
    return maze.height * style.cell_px, maze.width * style.cell_px


@dataclass(frozen=True)
class BudgetReport:
    """What the dry run and preflight print about a run's model and its token budget."""

    model: str
    model_dir: str | None
    """Where the checkpoint's files were read; None: not here, `assumed` stands in."""
    assumed: Assumed | None
    set_name: str
    processor: ImageProcessor
    image: tuple[int, int] | None
    budget: TurnBudget
    template: str | None = None
    stops: tuple[int, ...] = ()
    overridden: tuple[tuple[str, Any], ...] = ()
    """The checkpoint's sampling defaults rlkit overrides (it passes every value explicitly)."""
    where: str = "read from the checkpoint by `rlkit preflight` on the cluster"
    """Where the checkpoint's own facts are read when they are not here."""

    def lines(self) -> list[str]:
        b = self.budget
        if self.model_dir is None:
            out = [
                f"model:         {self.model}: not on this machine, budget from the preset and "
                f"assumed values ({self.assumed.describe()})",
                f"checkpoint:    template, stop ids and generation defaults: {self.where}",
            ]
        else:
            out = [
                f"model:         {self.model} (files read at {self.model_dir})",
                f"chat template: {self.template or 'none (the checkpoint has no template)'}",
                f"stop ids:      {', '.join(map(str, self.stops)) or 'none named'}",
                "defaults:      "
                + (
                    ", ".join(f"{k} {v}" for k, v in self.overridden)
                    + " in generation_config.json, overridden (rlkit sets every sampling value)"
                    if self.overridden
                    else "no sampling defaults in generation_config.json"
                ),
            ]
        if self.image is not None:
            (h, w), (rh, rw) = self.image, smart_resize(*self.image, self.processor)
            out.append(
                f"image:         {self.set_name} {h}x{w} -> {rh}x{rw} by the processor, "
                f"{b.image - 2} tokens (+2 vision start/end)"
            )
        framing = b.header + b.tail
        kept = f"a prompt keeps the last {b.window} of {b.max_turns} turns"
        window = "" if b.window is None else f" (history window {b.window}: {kept})"
        out += [
            f"per turn:      observation {b.observation} (image {b.image}) + answer <= "
            f"{b.answer} (max_generate_length; canonical {b.canonical}) + {framing} framing = "
            f"{b.per_turn()} tokens",
            f"per episode:   system {b.system} + {b.kept(b.max_turns)} turns x {b.per_turn()} = "
            f"{b.worst_case} tokens at worst{window}; max_input_length "
            f"{b.max_input_length}, max_model_len {b.max_model_len}",
        ]
        warning = b.warning()
        out.append(f"budget:        {'warn: ' + warning if warning else 'every turn fits'}")
        return out

    def check(self) -> None:
        """A one-line UsageError naming the knob when the turn budget cannot fit."""
        why = self.budget.refusal()
        if why is not None:
            raise UsageError(why)


def budget_report(
    model: str,
    model_dir: str | Path | None,
    set_name: str,
    *,
    assumed: Assumed = QWEN_ASSUMED,
    where: str | None = None,
    max_turns: int,
    max_input_length: int,
    max_model_len: int,
    max_generate_length: int | None,
    cfg: EnvConfig | None = None,
    history: int | None = None,
) -> BudgetReport:
    """The report for `model` playing `set_name`: from `model_dir`'s files, else from `assumed`
    (`where`: where the checkpoint's facts are read); `max_generate_length` None: the canonical
    answer plus `ANSWER_ROOM`."""
    tokens = Tokens(model_dir, assumed)
    processor = (preprocessor(model_dir) if model_dir else None) or assumed.processor
    ep = set_episode(set_name, max_turns, cfg)
    budget = turn_budget(
        ep,
        tokens,
        processor,
        max_turns=max_turns,
        max_input_length=max_input_length,
        max_model_len=max_model_len,
        max_generate_length=max_generate_length
        or tokens.answer_tokens(ep.stop, ep.tuples) + ANSWER_ROOM,
        window=history,
    )
    report = BudgetReport(model, None, assumed, set_name, processor, ep.image, budget)
    if model_dir is None:
        return replace(report, where=where) if where else report
    return replace(
        report,
        model_dir=str(model_dir),
        assumed=None,
        template=template_source(model_dir),
        stops=stop_ids(model_dir),
        overridden=tuple(sampling_defaults(model_dir).items()),
    )
