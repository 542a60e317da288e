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
#
# How to read the table: `solve` is the share of episodes that reached the exit; `95% CI` is
# where the true rate lies with 95% confidence, widened for the correlation between a maze's
# samples (its width grows with the design effect); `pass@k` is the chance that at least one
# of k samples solves a maze (both in the [glossary](../docs/glossary.md)). The random
# policy solves about a fifth of these small mazes by luck within 12 turns; the untrained base
# model (the run's initial weights) lands near it because its move choice is close to uniform.
# Training has to beat both by more than their intervals.

# %% tags=["parameters"]
out_dir = "runs/demo"
preset = "local-tiny"  # local training preset: fixes the base model and the env
samples = 8  # episodes per test maze (64 x 1 cannot tell 90% from 95%)
replay_maze = 0  # test maze index to replay

# %% [markdown]
# The cell above is tagged `parameters`: every setting of this notebook, with its default.
# `make demo` runs the notebooks with papermill, which adds a cell headed `# Parameters` right
# after it holding the demo's values; those are the ones that count in an executed notebook.
# Relative paths (`out_dir="runs/demo"`) mean the project root (or `$RLKIT_HOME`), wherever
# the notebook runs from.

# %%
from rlkit.notebook import baselines, plots, report, visgym, workbench
from rlkit.notebook.paths import home_path
from rlkit.notebook.player import replay

out_dir = home_path(out_dir)  # relative: against the project root, as `make demo` runs

base = baselines.baseline_evals(out_dir, preset, samples=samples)
print(report.solve_rate_table(base))

# %%
fig = plots.by_difficulty(base)
workbench.save_png(fig, out_dir, "baselines_by_difficulty")
fig

# %% [markdown]
# *Figure: solve rate by shortest-path length, one bar per policy, with 95% intervals. What
# sane baselines look like: the oracle at 100% everywhere; random falling as paths get longer
# (luck runs out); eps-oracle in between; the base model near random. A base model far above
# random before any training would mean the task leaks the answer.*

# %% [markdown]
# One episode of the base model, turn by turn. Blue arrow: the oracle's (shortest-path) move;
# orange: the model's; when they agree only blue shows. The caption gives the parsed move, the
# oracle's, and whether the agent moved or bumped into a wall. Press Play, step or drag the
# slider: the player needs no kernel, so it plays in an executed notebook too.

# %%
trajs = baselines.baseline_trajectories(out_dir, report.BASE)
replay(workbench.episode(trajs, base[report.BASE], replay_maze))

# %% [markdown]
# Failure taxonomy: each failed episode gets the first kind that fits, in this order.
# `format_error`: half its turns held no valid move; `loop`: it entered some cell 3+ times;
# `wall_bump`: half its moves hit a wall; `wrong_branch`: it left the shortest path at a
# junction and ended off it; `timeout`: none of these, it just ran out of turns.

# %%
fig = plots.failure_breakdown(base[report.BASE])
workbench.save_png(fig, out_dir, "base_failures")
fig

# %% [markdown]
# *Figure: the base model's failed episodes by kind. Before training, expect loops and wall
# bumps to dominate; `format_error` stays at 0 for the local model because its answers are
# constrained to the four moves. The random policy's breakdown below is the reference: a model
# that fails the way random does has learned nothing yet.*

# %%
plots.failure_breakdown(base["random"])

# %% [markdown]
# ## The seed's task: VisGym's maze_2d/easy
#
# The same baselines on `visgym-easy` (VisGym's mazes, 18 turns, `stop` on the target wins),
# played as the `local-tiny-visgym` preset plays them. Random rarely wins here: it must walk
# 12-16 squares and then say `stop` exactly on the target.

# %%
vg = baselines.baseline_evals(out_dir, "local-tiny-visgym", samples=samples)
print(report.solve_rate_table(vg))

# %% [markdown]
# What the seed's 43.75% was measured on, and the seed's protocol (greedy, one sample a maze,
# exact binomial interval) for the oracle and the untrained tiny model:

# %%
print(visgym.SEED_TASK)
print(visgym.seed_protocol_lines(out_dir))

# %% [markdown]
# **Next:** 03 trains the base model with GRPO.
