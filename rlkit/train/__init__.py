"""The local GRPO backend: config and presets (torch-free `config`), the GRPO math, a step's
functions (`step`, `update`), the trainer that coordinates them, the warm start, run directories
and checkpoints, metrics, fault injection."""
