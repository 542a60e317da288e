"""The local GRPO backend: config and presets (torch-free `config`), the GRPO math, the trainer,
the warm start, run directories and checkpoints, metrics, fault injection."""
