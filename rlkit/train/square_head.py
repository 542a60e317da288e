"""The warm start's dense auxiliary loss (`warm_start.aux_weight`; through GRPO with
`grpo.aux_weight`): a linear head on the vision tower's last block predicts the oracle's answer
on every floor square of the picture, outside the policy's loss."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from rlkit.env.maze_env import EnvConfig
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import Maze
from rlkit.model.batching import build_batch, image_digest
from rlkit.model.chat import Encoded
from rlkit.model.load import LoadedModel

IGNORE = -100
"""A label the loss skips: walls and the pad."""


def block_side(loaded: LoadedModel, env: EnvConfig, maze: Maze) -> int:
    """Squares per side of one vision patch, or a one-line refusal of a layout it cannot label."""
    vision = loaded.model.config.vision_config
    patch, px = vision.patch_size, env.style.cell_px
    side = maze.height + env.style.pad
    if (
        maze.game != "squares"
        or vision.spatial_merge_size != 1
        or patch % px
        or side % (patch // px)
    ):
        raise UsageError(
            f"aux_weight needs the squares game drawn so that each {patch} px patch "
            f"holds whole {px} px squares and the {side}-square picture whole patches, with merge "
            "1 (local-tiny-visgym: patch_size 16, 8 px squares, pad 1); set warm_start.aux_weight "
            "and grpo.aux_weight 0"
        )
    return patch // px


_CACHE: dict[tuple, np.ndarray] = {}
"""Labels by (maze content, picture side, block, choices): a maze's are computed once."""


def square_labels(maze: Maze, pad: int, block: int, choices: Sequence) -> np.ndarray:
    """(patches, block * block) int64: the oracle's answer index (in `choices`) at every floor
    square of `maze`'s picture, by patch; `IGNORE` on walls and the pad."""
    side, choices = maze.height + pad, tuple(choices)
    key = (maze.content_hash, side, block, choices)
    if key not in _CACHE:
        if len(_CACHE) > 4096:
            _CACHE.clear()
        grid = np.full((side, side), IGNORE, np.int64)
        for r, c in np.argwhere(~maze.squares):
            state = rules.State(maze=maze, pos=(int(r), int(c)), trail=((int(r), int(c)),))
            grid[r, c] = choices.index(rules.best_move(state))
        g = side // block  # row-major patches, row-major squares inside each
        grid = grid.reshape(g, block, g, block).transpose(0, 2, 1, 3)
        _CACHE[key] = grid.reshape(-1, block * block)
    return _CACHE[key]


class SquareHead(nn.Module):
    """A linear head on the vision tower's last block, hooked while it lives (`close` unhooks)."""

    def __init__(self, loaded: LoadedModel, block: int, choices: Sequence, seed: int = 0) -> None:
        super().__init__()
        vision = loaded.model.config.vision_config
        self.block, self.choices = block, tuple(choices)
        with torch.random.fork_rng(devices=[]):  # the run's seed alone sets its start
            torch.manual_seed(seed)
            self.linear = nn.Linear(vision.hidden_size, block * block * len(self.choices))
        self.linear.to(loaded.device, loaded.model.dtype)
        self._out: torch.Tensor | None = None
        last = loaded.model.model.visual.blocks[-1]
        self._hook = last.register_forward_hook(self._keep)

    def _keep(self, module, inputs, output) -> None:
        self._out = output if torch.is_tensor(output) else output[0]

    def close(self) -> None:
        self._hook.remove()

    def loss(self, prompts: Sequence[Encoded], mazes: Sequence[Maze], pad: int) -> torch.Tensor:
        """Cross-entropy over the floor squares of the last forward's distinct pictures."""
        if self._out is None:
            raise RuntimeError("SquareHead.loss before a forward pass of the model")
        labels, seen = [], set()
        for prompt, maze in zip(prompts, mazes, strict=True):
            for patches, _ in prompt.images:
                key = image_digest(patches)
                if key not in seen:
                    seen.add(key)
                    labels.append(square_labels(maze, pad, self.block, self.choices))
        target = torch.from_numpy(np.concatenate(labels)).to(self._out.device)
        if target.shape[0] != self._out.shape[0]:
            raise RuntimeError(f"{target.shape[0]} labelled patches, {self._out.shape[0]} seen")
        logits = self.linear(self._out).reshape(-1, len(self.choices))
        self._out = None
        return nn.functional.cross_entropy(logits.float(), target.reshape(-1), ignore_index=IGNORE)


def tower_optimizer(loaded: LoadedModel, head: SquareHead) -> torch.optim.Optimizer:
    """The GRPO phase's optimizer of the per-square loss: the vision tower and the head."""
    params = [p for p in loaded.model.model.visual.parameters() if p.requires_grad]
    return torch.optim.AdamW([*params, *head.parameters()], weight_decay=0.0)


def squares_update(
    loaded: LoadedModel,
    head: SquareHead,
    opt: torch.optim.Optimizer,
    batches: Sequence[tuple[Sequence[Encoded], Sequence[Maze], int]],
    *,
    weight: float,
    lr: float,
) -> dict[str, float]:
    """One step of the per-square loss (times `weight`, at `lr`) per (prompts, mazes, pad) batch
    on the vision tower alone; returns their mean loss."""
    for group in opt.param_groups:
        group["lr"] = lr
    loaded.model.train()
    losses = []
    for prompts, mazes, pad in batches:
        inputs = build_batch(loaded, prompts)
        loaded.model.model.get_image_features(
            inputs.pixel_values, inputs.unique_grid_thw, return_dict=True
        )
        loss = head.loss(prompts, mazes, pad)
        opt.zero_grad()
        (weight * loss).backward()
        opt.step()
        losses.append(float(loss.detach()))
    opt.zero_grad()  # the policy's optimizer shares the tower: no stale gradient
    loaded.model.eval()
    return {"loss/grpo_squares": sum(losses) / len(losses)}
