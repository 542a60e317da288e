"""Every preset name with the backend it trains on: one registry over the local trainer's
presets (`rlkit.train.presets`, a `TrainConfig` each) and SkyRL's (`rlkit.cluster.skyrl.presets`,
a `SkyRLPreset` each). Torch- and Ray-free, so building the `rlkit` parser stays light."""

from __future__ import annotations

from rlkit.cluster.skyrl.presets import PRESETS as SKYRL_PRESETS
from rlkit.errors import UsageError
from rlkit.train.presets import PRESETS as LOCAL_PRESETS

PRESETS: dict[str, str] = {
    **{name: "local" for name in LOCAL_PRESETS},
    **{name: "skyrl" for name in SKYRL_PRESETS},
}
"""Preset name -> `local` or `skyrl`."""


def preset_backend(name: str) -> str:
    """`local` or `skyrl` (`PRESETS`); an unknown name is a one-line UsageError naming all."""
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}: use one of {', '.join(PRESETS)}")
    return PRESETS[name]
