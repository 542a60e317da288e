"""Check rlkit's SkyRL presets against SkyRL's real config classes and validation.

Runs wherever SkyRL is installed (this project's venv, the cluster runtime):

    python scripts/check_skyrl_config.py                 # every preset, 1-4 nodes
    python scripts/check_skyrl_config.py --set trainer.epochs=5   # with extra overrides

Each override list is parsed by `SkyRLTrainConfig.from_cli_overrides` (unknown keys and wrong
types fail there), then SkyRL's whole `validate_cfg` runs on it (batch sizes, colocation, the VLM
generator's requirements; all of it runs on CPU). Exits 1 on the first failure with SkyRL's
message. `tests/skyrl/test_config.py` runs the same checks in `make test`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-nodes", type=int, default=4)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    try:
        from skyrl.train.config import SkyRLTrainConfig
        from skyrl.train.utils import validate_cfg
    except ImportError as e:
        print(f"SkyRL is not importable here ({e}); build the venv with `make venv`")
        return 1
    from rlkit.cluster.skyrl.overrides import build_overrides
    from rlkit.cluster.skyrl.presets import PRESETS, get_preset

    for name in PRESETS:
        for nodes in range(1, args.max_nodes + 1):
            overrides = build_overrides(get_preset(name, nodes=nodes), f"check-{nodes}")
            overrides += args.set
            try:
                cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
                validate_cfg(cfg)
            except Exception as e:  # noqa: BLE001 - report SkyRL's own message, whatever its type
                print(f"FAIL {name} nodes={nodes}: {type(e).__name__}: {e}")
                return 1
            engines = cfg.generator.inference_engine.num_engines
            print(
                f"ok   {name} nodes={nodes}: train_batch={cfg.trainer.train_batch_size} "
                f"mini={cfg.trainer.policy_mini_batch_size} engines={engines}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
