# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: rlkit
#     language: python
#     name: rlkit
# ---

# %% [markdown]
# # 05 · Replay and failures
#
# The trained model's episodes, turn by turn (press Play or drag the slider): a maze where GRPO's
# first checkpoint and the final one disagree, then the two side by side on one slider, then
# one failed episode of each kind.

# %% tags=["parameters"]
out_dir = "runs/demo"
preset = "local-tiny"
run_name = None
maze = None  # test maze index; None: one where the two checkpoints disagree

# %%
from IPython.display import HTML, display

from rlkit.cluster import launch
from rlkit.notebook import plots, workbench
from rlkit.notebook.paths import home_path
from rlkit.notebook.widgets import CheckpointDiffWidget, ReplayWidget

out_dir = home_path(out_dir)  # relative: against the project root, as `make demo` runs

run_dir = launch.plan_training(preset, out_dir, run_name=run_name).run_dir
evals = workbench.checkpoint_evals(run_dir)
paired = workbench.grpo_paired_test(evals, plots.warm_start_end(run_dir))
first, last = evals[paired.step_a], evals[paired.step_b]
first_trajs = workbench.eval_trajectories(run_dir, paired.step_a)
last_trajs = workbench.eval_trajectories(run_dir, paired.step_b)
index = workbench.diff_maze(first, last) if maze is None else maze
ReplayWidget(workbench.episode(last_trajs, last, index))

# %%
CheckpointDiffWidget(
    workbench.episode(first_trajs, first, index),
    workbench.episode(last_trajs, last, index),
    labels=(f"step {paired.step_a}", f"step {paired.step_b}"),
)

# %% [markdown]
# Failure examples of the final checkpoint, one per kind.

# %%
for kind, traj in workbench.failure_examples(last_trajs).items():
    display(HTML(f"<h4>{kind}</h4>"), ReplayWidget(traj))
