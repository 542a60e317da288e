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
#
# Colours: red agent, green exit, grey trail, dark grey the previous cell; blue arrow the
# oracle's move, orange the model's (only blue when they agree). Executed notebooks carry a
# player that runs in the browser with no kernel; run the notebook for the live widgets.

# %% tags=["parameters"]
out_dir = "runs/demo"
preset = "local-tiny"
run_name = None
maze = None  # test maze index; None: one where the two checkpoints disagree

# %% [markdown]
# The cell above is tagged `parameters`: every setting of this notebook, with its default.
# `make demo` runs the notebooks with papermill, which adds a cell headed `# Parameters` right
# after it holding the demo's values; those are the ones that count in an executed notebook.
# Relative paths (`out_dir="runs/demo"`) mean the project root (or `$RLKIT_HOME`), wherever
# the notebook runs from.

# %%
from IPython.display import HTML, display

from rlkit.cluster import launch
from rlkit.notebook import plots, report, workbench
from rlkit.notebook.paths import home_path
from rlkit.notebook.widgets import CheckpointDiffWidget, ReplayWidget

out_dir = home_path(out_dir)  # relative: against the project root, as `make demo` runs

run_dir = launch.plan_training(preset, out_dir, run_name=run_name).run_dir
evals = workbench.checkpoint_evals(run_dir)
paired = report.grpo_paired_test(evals, plots.warm_start_end(run_dir))
first, last = evals[paired.step_a], evals[paired.step_b]
first_trajs = workbench.eval_trajectories(run_dir, paired.step_a)
last_trajs = workbench.eval_trajectories(run_dir, paired.step_b)
index = workbench.diff_maze(first, last) if maze is None else maze
ReplayWidget(workbench.episode(last_trajs, last, index), label=f"step {paired.step_b}")

# %%
CheckpointDiffWidget(
    workbench.episode(first_trajs, first, index),
    workbench.episode(last_trajs, last, index),
    labels=(f"step {paired.step_a}", f"step {paired.step_b}"),
)

# %% [markdown]
# Failure examples of the final checkpoint, one per kind (02 defines the kinds). Wall bumps and
# loops that remain after training usually mean the model misreads a wall in one specific view.

# %%
for kind, traj in workbench.failure_examples(last_trajs).items():
    display(HTML(f"<h4>{kind}</h4>"), ReplayWidget(traj, label=f"step {paired.step_b}"))

# %% [markdown]
# **Next:** the same run on a real cluster. `deploy/README.md` builds the image, creates the
# Ray cluster on HyperPod and submits `qwen3vl-8b-6gpu`; notebooks 03-05 then follow, score and
# replay it with `address`, `skyrl` and `skyrl_export` set.
