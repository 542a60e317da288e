"""SkyRL on the cluster: presets -> SkyRL overrides, the Ray-job entrypoint, SkyRL's experiment
with rlkit's metrics bridge, and the fixes and CPU seam its processes install."""
