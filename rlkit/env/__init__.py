"""The skyrl-gym contract: `MazeEnv` (registered as `rlkit-maze`) and SkyRL-format dataset rows."""
