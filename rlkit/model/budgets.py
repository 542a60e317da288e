"""Token budgets of a maze run before GPU-hours are spent, torch-free (the dry run reads them):
docs/models-and-engines.md#token-budgets-modelbudgetspy."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.env.maze_env import QWEN3VL_IMAGE
from rlkit.errors import UsageError
from rlkit.maze.core import STOP, Action
from rlkit.maze.parsing import format_action, format_tuple
from rlkit.model.action_tag import answer_length

TURN_FRAMING = ("<|im_start|>user\n", "<|im_end|>\n")
"""Qwen's chat framing of a message (header, end); the tiny template writes the same."""
IMAGE_WRAP = "<|vision_start|><|image_pad|><|vision_end|>"
"""An image part in the template; the processor expands the pad to the image's tokens."""
GENERATION_HEADER = "<|im_start|>assistant\n"
ANSWER_TAIL = "\n"
"""What a re-render adds after a sampled answer's end of turn (`<|im_end|>` then a newline)."""
ANSWER_ROOM = 4
"""Tokens beyond the canonical answer a derived answer budget allows (a space, a stray token)."""
BAD_ANSWER = "<action>up, down</action>"
"""An answer the env refuses with its longest feedback note: the longest observation text."""
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")


@dataclass(frozen=True)
class ImageProcessor:
    """The numbers of a Qwen2/3-VL image processor that decide an image's token count."""

    patch: int
    merge: int
    min_pixels: int
    max_pixels: int

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ImageProcessor:
        """From `preprocessor_config.json` (Qwen3-VL's `size` or Qwen2-VL's min/max_pixels)."""
        size = cfg.get("size") or {}
        return cls(
            patch=int(cfg.get("patch_size", 14)),
            merge=int(cfg.get("merge_size", 2)),
            min_pixels=int(cfg.get("min_pixels") or size.get("shortest_edge") or 56 * 56),
            max_pixels=int(cfg.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280),
        )

    @property
    def factor(self) -> int:
        """Side of one merged token in px: sizes are rounded to multiples of it."""
        return self.patch * self.merge

    def describe(self) -> str:
        return (
            f"patch {self.patch}, merge {self.merge}, min {self.min_pixels:,} px, "
            f"max {self.max_pixels:,} px"
        )


QWEN3VL = ImageProcessor(**QWEN3VL_IMAGE)
TINY = ImageProcessor(patch=8, merge=2, min_pixels=16 * 16, max_pixels=1024 * 1024)
"""rlkit's tiny model (`rlkit.model.config.TinyConfig`)."""


def smart_resize(height: int, width: int, p: ImageProcessor) -> tuple[int, int]:
    """The (height, width) the processor resizes an image to (transformers' `smart_resize`)."""
    if max(height, width) / min(height, width) > 200:
        raise UsageError(f"a {height}x{width} image is beyond the processor's 200:1 aspect limit")
    f = p.factor
    h, w = round(height / f) * f, round(width / f) * f
    if h * w > p.max_pixels:
        beta = math.sqrt((height * width) / p.max_pixels)
        h = max(f, math.floor(height / beta / f) * f)
        w = max(f, math.floor(width / beta / f) * f)
    elif h * w < p.min_pixels:
        beta = math.sqrt(p.min_pixels / (height * width))
        h, w = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
    return h, w


def image_tokens(height: int, width: int, p: ImageProcessor) -> int:
    """Image tokens (`<|image_pad|>`s) of an image, vision start/end not counted."""
    h, w = smart_resize(height, width, p)
    return (h // p.patch) * (w // p.patch) // (p.merge * p.merge)


@dataclass(frozen=True)
class Assumed:
    """What the budget takes as given when the checkpoint's files are not on this machine."""

    processor: ImageProcessor
    answer_tokens: int
    """The canonical answer with its end of turn (measured: tests/test_budgets.py)."""
    stop_tokens: int
    """`<action>stop</action>` with its end of turn: the squares game's fifth answer."""
    chars_per_token: float
    """Text estimate; below English BPE's ~4 so that the estimate errs long."""

    def describe(self) -> str:
        return (
            f"processor {self.processor.describe()}; canonical answer {self.answer_tokens} "
            f"tokens ({self.stop_tokens} for stop); text ~{self.chars_per_token:g} characters a token"
        )


QWEN_ASSUMED = Assumed(QWEN3VL, answer_tokens=8, stop_tokens=8, chars_per_token=3.0)
"""Qwen3-VL-2B..32B: one processor config and one tokenizer (`stop` is one token too)."""
TINY_ASSUMED = Assumed(TINY, answer_tokens=4, stop_tokens=6, chars_per_token=3.0)
"""The tiny tokenizer: `<action>`, `</action>` and the move words whole; `stop` takes three."""


class Tokens:
    """Counts text tokens: with a checkpoint's `tokenizer.json`, else estimated (`Assumed`)."""

    def __init__(self, model_dir: str | Path | None = None, assumed: Assumed = QWEN_ASSUMED):
        self._tok = None
        self.assumed = assumed
        if model_dir is not None and (Path(model_dir) / "tokenizer.json").is_file():
            from tokenizers import Tokenizer  # torch-free; only where a checkpoint is

            self._tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Ids as a transformers tokenizer returns them (what `answer_length` calls)."""
        if self._tok is None:
            raise UsageError("no tokenizer.json: token ids need the checkpoint's files")
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def count(self, text: str) -> int:
        if self._tok is not None:
            return len(self.encode(text))
        specials = _SPECIAL.findall(text)
        rest = len(_SPECIAL.sub("", text))
        return len(specials) + math.ceil(rest / self.assumed.chars_per_token)

    def answer_tokens(self, stop: bool = False, tuples: bool = False) -> int:
        """The longest canonical answer with its end of turn; `stop` (squares game) counts
        `<action>stop</action>` too, `tuples` VisGym's `('move', 0)` answers instead."""
        if tuples:
            return 1 + max(self.count(format_tuple(m)) for m in (*Action, STOP))
        if self._tok is None:
            a = self.assumed
            return max(a.answer_tokens, a.stop_tokens) if stop else a.answer_tokens
        moves = answer_length(self)
        return max(moves, 1 + len(self.encode(format_action(STOP)))) if stop else moves


@dataclass(frozen=True)
class Episode:
    """What the env shows in one episode of a maze set: the texts and the image size."""

    system: str
    observations: tuple[str, ...]
    """Observation texts: the first, and one after a refused answer (the longest note)."""
    image: tuple[int, int] | None
    """(height, width) of each observation's image; None for a text-only env."""
    stop: bool = False
    """Whether `stop` is an answer (the squares game): its canonical answer counts too."""
    tuples: bool = False
    """Whether answers are VisGym's tuples (`visgym-sft`): theirs are the canonical answers."""


@dataclass(frozen=True)
class TurnBudget:
    """Tokens of one episode under SkyRL's loop."""

    system: int
    """The system message with its framing (0 without one)."""
    observation: int
    """One user message: framing, the image with vision start/end, the longest text."""
    image: int
    """Of which the image (+2 for vision start/end); 0 for a text-only env."""
    header: int
    """The generation header (`<|im_start|>assistant\\n`)."""
    tail: int
    """What follows an answer's end of turn in the re-render (a newline)."""
    answer: int
    """max_generate_length: the longest answer, its end of turn included."""
    canonical: int
    """The canonical answer with its end of turn."""
    max_turns: int
    max_input_length: int
    max_model_len: int
    window: int | None = None
    """Observations a prompt keeps (`history`); None: the whole conversation."""

    def kept(self, turn: int) -> int:
        """Observations in the prompt of `turn` (1-based)."""
        return turn if self.window is None else min(turn, self.window)

    def per_turn(self, answer: int | None = None) -> int:
        return (
            self.observation + self.header + (self.answer if answer is None else answer) + self.tail
        )

    def prompt(self, turn: int, answer: int | None = None) -> int:
        """Tokens SkyRL sends before `turn` (1-based), answers of `answer` tokens before it."""
        answer = self.answer if answer is None else answer
        return self.system + self.kept(turn) * self.per_turn(answer) - (answer + self.tail)

    def history(self, turn: int, answer: int | None = None) -> int:
        """Tokens of the prompt of `turn` with its answer."""
        return self.system + self.kept(turn) * self.per_turn(answer)

    @property
    def worst_case(self) -> int:
        """The last turn's prompt and answer at full-length answers, every turn played."""
        return self.history(self.max_turns)

    def passes_at(self, answer: int | None = None) -> int | None:
        """The first turn after whose answer the history passes max_input_length, else None."""
        return self._first_over(self.history, answer)

    def cut_before(self, answer: int | None = None) -> int | None:
        """The turn SkyRL never starts (its prompt passes max_input_length), else None."""
        return self._first_over(self.prompt, answer)

    def _first_over(self, tokens, answer: int | None) -> int | None:
        turns = range(1, self.max_turns + 1)
        return next((t for t in turns if tokens(t, answer) > self.max_input_length), None)

    def turns_that_fit(self, answer: int | None = None) -> int:
        cut = self.cut_before(answer)
        return self.max_turns if cut is None else cut - 1

    def refusal(self) -> str | None:
        """Why this budget cannot run, in one line naming the knob; None if it can."""
        if self.answer < self.canonical:
            return (
                f"max_generate_length ({self.answer}) cannot hold the canonical answer "
                f"(<action>WORD</action> and the end of turn: {self.canonical} tokens in this "
                f"model's tokenizer); set max_generate_length >= {self.canonical}"
            )
        if self.cut_before(self.canonical) is not None:
            need = self.prompt(self.max_turns, self.canonical)
            fit = self.turns_that_fit(self.canonical)
            return (
                f"max_input_length ({self.max_input_length}) cannot hold max_turns "
                f"({self.max_turns}) even with canonical {self.canonical}-token answers: turn "
                f"{self.max_turns}'s prompt is {need} tokens; set max_input_length >= {need} "
                f"or max_turns <= {fit}"
            )
        longest = min(self.max_input_length, self.prompt(self.max_turns)) + self.answer
        if longest > self.max_model_len:
            return (
                f"max_model_len ({self.max_model_len}) cannot hold a {longest}-token turn "
                f"(a prompt of up to {longest - self.answer} tokens + max_generate_length "
                f"{self.answer}); set max_model_len >= {longest}"
            )
        return None

    def longest_answer_that_fits(self) -> int:
        """The largest max_generate_length (>= canonical) whose answers play every turn."""
        kept = self.kept(self.max_turns)
        if kept < 2:
            return self.answer  # one observation a prompt: no answer is ever part of one
        fixed = self.system + kept * (self.observation + self.header)
        room = (self.max_input_length - fixed) // (kept - 1) - self.tail
        return max(self.canonical, min(self.answer, room))

    def warning(self) -> str | None:
        """Where full-length answers end an episode early, if they do, and the fix."""
        cut = self.cut_before()
        if cut is None:
            return None
        need = self.prompt(self.max_turns)
        model_len = (
            f" and max_model_len >= {need + self.answer}"
            if need + self.answer > self.max_model_len
            else ""
        )
        return (
            f"answers of max_generate_length {self.answer} tokens pass max_input_length "
            f"{self.max_input_length} at turn {self.passes_at()}: SkyRL ends such an episode "
            f"before turn {cut} of {self.max_turns} (stop_reason length); canonical "
            f"{self.canonical}-token answers fit all {self.max_turns} turns. For every turn at "
            f"full length: max_input_length >= {need}{model_len}, or max_generate_length <= "
            f"{self.longest_answer_that_fits()}"
        )


def turn_budget(
    ep: Episode,
    tokens: Tokens,
    processor: ImageProcessor,
    *,
    max_turns: int,
    max_input_length: int,
    max_model_len: int,
    max_generate_length: int,
    window: int | None = None,
) -> TurnBudget:
    """The budget of `ep` for a model whose tokens and processor are given."""
    head, end = TURN_FRAMING
    image = 0
    if ep.image is not None:
        image = image_tokens(*ep.image, processor) + 2
    wrap = IMAGE_WRAP if ep.image is not None else ""
    obs = max(tokens.count(head + wrap + t + end) for t in ep.observations)
    system = tokens.count(f"<|im_start|>system\n{ep.system}{end}") if ep.system else 0
    return TurnBudget(
        system=system,
        observation=obs - (3 if wrap else 0) + image,
        image=image,
        header=tokens.count(GENERATION_HEADER),
        tail=tokens.count(ANSWER_TAIL),
        answer=max_generate_length,
        canonical=tokens.answer_tokens(ep.stop, ep.tuples),
        max_turns=max_turns,
        max_input_length=max_input_length,
        max_model_len=max_model_len,
        window=window,
    )


def preprocessor(model_dir: str | Path) -> ImageProcessor | None:
    """The checkpoint's image processor numbers, None without `preprocessor_config.json`."""
    path = Path(model_dir) / "preprocessor_config.json"
    try:
        return ImageProcessor.from_config(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None
