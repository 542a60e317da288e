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

    @property
    def total_gb(self) -> float:
        return self.checkpoint_gb * self.checkpoints_kept + self.export_gb * self.exports

    def summary(self) -> str:
        return (
            f"~{self.total_gb:.0f} GB on /fsx: {self.checkpoints_kept} checkpoints x "
            f"{self.checkpoint_gb:.0f} GB + {self.exports} HF exports x {self.export_gb:.0f} GB"
        )


CHECKPOINT_BYTES_PER_PARAM = 12
"""An FSDP checkpoint holds fp32 weights (4 B) and Adam's two fp32 moments (8 B) per parameter."""
EXPORT_BYTES_PER_PARAM = 2
"""An HF export is the bf16 weights (Qwen3-VL-8B: ~17.5 GB)."""


def storage_estimate(p: SkyRLPreset) -> StorageEstimate:
    saves = len(
        {*range(p.storage.ckpt_interval, p.batch.steps + 1, p.storage.ckpt_interval), p.batch.steps}
    )  # + run end
    return StorageEstimate(
        checkpoint_gb=p.model.model_params_b * CHECKPOINT_BYTES_PER_PARAM,
        export_gb=p.model.model_params_b * EXPORT_BYTES_PER_PARAM,
        checkpoints_kept=min(saves, p.storage.max_ckpts_to_keep),
        exports=saves,
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
