"""The local GRPO backend: config and presets (torch-free `config`), the GRPO math (`grpo`), one
GRPO step top to bottom (`step`), the trainer that coordinates it, the warm start, metrics,
fault injection and the learning checks (`rescore`)."""
