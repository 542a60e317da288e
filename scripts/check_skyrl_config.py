"""Check rlkit's SkyRL presets against SkyRL's real config classes and validation.

Run where SkyRL is installed (the cluster image, or any Python >= 3.12 env with `skyrl`):

    python scripts/check_skyrl_config.py                 # every preset, 1-4 nodes
    python scripts/check_skyrl_config.py --full          # also SkyRL's validate_cfg (GPU node)

Each override list is parsed by `SkyRLTrainConfig.from_cli_overrides`, which rejects unknown
keys and wrong types; then SkyRL's own batch-size checks run on it. `--full` runs SkyRL's whole
`validate_cfg`, which inspects the model and the installed CUDA/vLLM stack, so run it on a GPU
node of the cluster. Exits 1 on the first failure with SkyRL's message.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also SkyRL's validate_cfg")
    parser.add_argument("--max-nodes", type=int, default=4)
    args = parser.parse_args()
    try:
        from skyrl.train.config import SkyRLTrainConfig
    except ImportError as e:
        print(f"SkyRL is not importable here ({e}); needs Python >= 3.12 and `pip install skyrl`")
        return 1
    from rlkit.skyrl import PRESETS, build_overrides, get_preset

    for name in PRESETS:
        for nodes in range(1, args.max_nodes + 1):
            overrides = build_overrides(get_preset(name, nodes=nodes), f"check-{nodes}")
            try:
                cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
                try:
                    from skyrl.train.utils.utils import validate_batch_sizes
                except ImportError as e:  # the batch checks live beside Ray-dependent helpers
                    print(f"  (batch-size checks skipped: {e})")
                else:
                    validate_batch_sizes(cfg)
                if args.full:
                    from skyrl.train.utils import validate_cfg

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
