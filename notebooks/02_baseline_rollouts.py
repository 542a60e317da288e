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
# # 02 · Baseline rollouts
#
# Scripted policies (random: the floor; an oracle that errs 25% of the time; the BFS oracle: the
# ceiling) and the untrained base model, each on every test maze `samples` times. Solve rates
# come with 95% intervals clustered by maze (a maze's samples are not independent evidence: the
# table's last line names the method); results are cached in OUT/baselines/ for notebooks 04, 05.

# %% tags=["parameters"]
out_dir = "runs/demo"
preset = "local-tiny"  # local training preset: fixes the base model and the env
samples = 8  # episodes per test maze (64 x 1 cannot tell 90% from 95%)
replay_maze = 0  # test maze index to replay

# %%
from rlkit.notebook import plots, workbench
from rlkit.notebook.paths import home_path
from rlkit.notebook.widgets import ReplayWidget

out_dir = home_path(out_dir)  # relative: against the project root, as `make demo` runs

base = workbench.baseline_evals(out_dir, preset, samples=samples)
print(workbench.solve_rate_table(base))

# %%
fig = plots.by_difficulty(base)
workbench.save_png(fig, out_dir, "baselines_by_difficulty")
fig

# %% [markdown]
# One episode of the base model: blue arrow the oracle's move, orange the model's.

# %%
trajs = workbench.baseline_trajectories(out_dir, workbench.BASE)
ReplayWidget(workbench.episode(trajs, base[workbench.BASE], replay_maze))

# %% [markdown]
# Failure taxonomy: how the failed episodes went wrong (loop, wall bump, wrong branch at a
# junction, format error, out of turns).

# %%
fig = plots.failure_breakdown(base[workbench.BASE])
workbench.save_png(fig, out_dir, "base_failures")
fig

# %%
plots.failure_breakdown(base["random"])
