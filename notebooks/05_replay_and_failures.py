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
# the final checkpoint's failures by kind with one episode of each. A local run or a SkyRL run
# (`run_dir`: the episodes its evals dumped, replayed through rlkit's env).
#
# Colours: red agent, green exit, grey trail, dark grey the previous cell; blue arrow the
# oracle's move, orange the model's (only blue when they agree). Each replay is a player that
# runs in the browser with no kernel: it plays the same here and in an executed notebook.
# Under each frame, four bars give the policy's probability of each move: a trained policy is
# sure (one tall bar) where the maze leaves one good move, and spreads where two moves are
# equally short. Failure kinds: the [glossary](../docs/glossary.md).

# %% tags=["parameters"]
out_dir = "runs/demo"
preset = "local-tiny"
run_name = None
run_dir = None  # a run to read instead of the preset's local one: a SkyRL run dir works too
skyrl_export = None  # or a SkyRL run's export dir (holding dumped_evals/)
address = None  # the cluster's Jobs API: reads the run there when this kernel cannot see it
maze = None  # test maze index; None: one where the two checkpoints disagree

# %% [markdown]
# The cell above is tagged `parameters`: every setting of this notebook, with its default.
# `make demo` runs the notebooks with papermill, which adds a cell headed `# Parameters` right
# after it holding the demo's values; those are the ones that count in an executed notebook.
# Relative paths (`out_dir="runs/demo"`) mean the project root (or `$RLKIT_HOME`), wherever
# the notebook runs from.

# %%
from IPython.display import HTML, display

from rlkit.notebook import plots, workbench
from rlkit.notebook.paths import home_path
from rlkit.notebook.player import checkpoint_diff, replay

out_dir = home_path(out_dir)  # relative: against the project root, as `make demo` runs
source = workbench.run_source(
    out_dir, preset, run_name=run_name, run_dir=run_dir, skyrl_export=skyrl_export
)
run = workbench.open_source(source, address=address)  # either backend, wherever its files are
shown = workbench.run_replays(run, maze=maze)  # scores a checkpoint without an eval, as 04 does
print(run.describe())  # after that scoring: the same count of evals as 04's
print(shown)
replay(shown.episode, label=shown.label)

# %%
pair = shown.pair  # None when the run has one evaluated step: nothing to compare
checkpoint_diff(*pair, labels=shown.labels) if pair else HTML("<p>one evaluated step</p>")

# %% [markdown]
# The final checkpoint's failures by kind (02 defines the kinds), then one episode of each. Wall
# bumps and loops that remain after training usually mean the model misreads a wall in one
# specific view.

# %%
fig = plots.failure_breakdown(shown.last)
workbench.save_png(fig, out_dir, "final_failures")
fig

# %% [markdown]
# *Figure: the final checkpoint's failed episodes by kind (compare 02's base model). Good:
# few failures in all (the demo: a handful of the final eval's 256 episodes, 64 mazes x 4
# samples), and no `format_error`. Loops that
# remain are usually one maze the policy misreads, replayed below.*

# %%
for kind, traj in shown.failures().items():
    display(HTML(f"<h4>{kind}</h4>"), replay(traj, label=shown.label))

# %% [markdown]
# **Next:** the same run on a real cluster. `deploy/README.md` builds the image, creates the
# Ray cluster on HyperPod and submits `qwen3vl-8b` (all 8 GPUs of one ml.g7e.48xlarge node);
# notebooks 03-05 then follow, score and
# replay it with `address`, `skyrl` and `run_dir` (the run dir on /fsx) set.
