"""SkyRL on the cluster: presets -> SkyRL overrides, the Ray-job entrypoint, readers for what a
SkyRL run writes (checkpoints, HF exports, eval dumps)."""
