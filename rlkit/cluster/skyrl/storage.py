"""What a SkyRL run leaves on /fsx: its kept checkpoints and every HF export, and the budget
check the dry run and `rlkit submit` apply before anything starts."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.cluster.skyrl.presets import SkyRLPreset
from rlkit.errors import UsageError


@dataclass(frozen=True)
class StorageEstimate:
    """What a run leaves on /fsx: the kept checkpoints and every HF export (never pruned)."""

    checkpoint_gb: float
    export_gb: float
    checkpoints_kept: int
    exports: int

    lora: bool = False
    """The exports are LoRA adapters (SkyRL exports a LoRA policy's adapter, not its weights)."""

    @property
    def total_gb(self) -> float:
        return self.checkpoint_gb * self.checkpoints_kept + self.export_gb * self.exports

    def summary(self) -> str:
        what = "LoRA adapter exports" if self.lora else "HF exports"
        size = f"{self.export_gb:.2f}" if self.lora else f"{self.export_gb:.0f}"
        return (
            f"~{self.total_gb:.0f} GB on /fsx: {self.checkpoints_kept} checkpoints x "
            f"{self.checkpoint_gb:.0f} GB + {self.exports} {what} x {size} GB"
        )


CHECKPOINT_BYTES_PER_PARAM = 12
"""An FSDP checkpoint holds fp32 weights (4 B) and Adam's two fp32 moments (8 B) per parameter."""
EXPORT_BYTES_PER_PARAM = 2
"""An HF export is the bf16 weights (Qwen3-VL-8B: ~17.5 GB)."""


LORA_PARAMS_PER_RANK_PER_B = 0.374e6
"""Adapter parameters per unit of rank and per billion model parameters, `all-linear`:
Qwen3-VL-8B's linear layers hold 3.28 M per rank over its 8.77 B (docs/cluster.md)."""
ADAPTER_BYTES_PER_PARAM = 4
"""An adapter is saved from FSDP's fp32 parameters."""
LORA_CHECKPOINT_BYTES_PER_PARAM = 4
"""A LoRA run's FSDP checkpoint still holds every fp32 base weight (its model state dict); only
Adam's moments shrink to the adapter's."""


def lora_params_b(p: SkyRLPreset) -> float:
    """The adapter's parameters in billions (`LORA_PARAMS_PER_RANK_PER_B`; 0 with LoRA off)."""
    return p.model.lora_rank * LORA_PARAMS_PER_RANK_PER_B * p.model.model_params_b / 1e9


def storage_estimate(p: SkyRLPreset) -> StorageEstimate:
    """What `p` leaves on /fsx: a checkpoint and an export every `ckpt_interval` steps and at
    the end, the last `max_ckpts_to_keep` checkpoints kept."""
    every = p.storage.ckpt_interval
    saves = len({*range(every, p.batch.steps + 1, every), p.batch.steps})
    params, adapter = p.model.model_params_b, lora_params_b(p)
    if adapter:  # weights + the adapter with its moments + the adapter again (lora_adapter/)
        checkpoint = params * LORA_CHECKPOINT_BYTES_PER_PARAM + adapter * (
            CHECKPOINT_BYTES_PER_PARAM + ADAPTER_BYTES_PER_PARAM
        )
        export = adapter * ADAPTER_BYTES_PER_PARAM
    else:
        checkpoint = params * CHECKPOINT_BYTES_PER_PARAM
        export = params * EXPORT_BYTES_PER_PARAM
    return StorageEstimate(
        checkpoint_gb=checkpoint,
        export_gb=export,
        checkpoints_kept=min(saves, p.storage.max_ckpts_to_keep),
        exports=saves,
        lora=bool(adapter),
    )


def check_storage(p: SkyRLPreset) -> StorageEstimate:
    """The estimate, or a one-line UsageError when it exceeds the preset's /fsx budget."""
    est = storage_estimate(p)
    if est.total_gb > p.storage.fsx_budget_gb:
        raise UsageError(
            f"this run would leave {est.summary()}, over its {p.storage.fsx_budget_gb:.0f} GB budget: "
            "raise --fsx-budget-gb or export less often (a larger ckpt_interval)"
        )
    return est
