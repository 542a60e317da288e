"""rlkit: a Jupyter-first workbench for GRPO post-training of vision-language models on mazes.

Packages by layer, bottom to top: the base modules (errors, fsio, stats, settings, recipe), then
maze, env, episodes, run, model, train, cluster, notebook and cli; each imports only from those
below it; torch stays in model/, train/ and cluster/skyrl/, ray in run/ and cluster/
(`scripts/check_layers.py`, part of `make lint`). Each module's concern: docs/layout.md.
"""

__version__ = "0.1.0"
