"""rlkit: a Jupyter-first workbench for GRPO post-training of vision-language models on mazes.

Layers, bottom to top (a module imports only from its own layer or below):
maze, render -> env, policies -> data, models, grpo, runs, evaluate -> rollout, train, skyrl
-> cluster, plots, widgets, cli.
"""

__version__ = "0.1.0"
