"""The local GRPO backend: config and presets (torch-free `config`), the GRPO math (`grpo`), one
GRPO step top to bottom (`step`), the trainer that coordinates it and logs its metrics, the warm
start, fault injection and the learning checks (`rescore`, `update_check`)."""
