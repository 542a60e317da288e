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
# # 06 · Comparing runs
#
# Several runs side by side: two recipes, two seeds of one recipe, or a local run and a SkyRL
# run. Each run is read by the one run reader (`rlkit.run.open_run`), so any mix of backends
# works. The notebook shows:
#
# - every run's solve rate with its 95% band on one axis, by training step and by wall time;
# - a per-difficulty table (maze size and shortest-path length);
# - the final checkpoints, then the best ones, compared maze by maze with the paired test, in words.
#
# How to read it: bands that overlap do not settle anything on their own; the paired test does,
# because it compares the two runs on the same mazes. Two seeds of one recipe differ by chance
# alone, so one pair of runs says little about a recipe: compare several seeds. Terms (paired
# test, design effect, ...): the [glossary](../docs/glossary.md).
#
# With its defaults it reads the one run `make demo` trains (`runs/demo/local-tiny`) and says
# how to add a second; nothing it reads is written to. A second run goes in its own folder,
# e.g. `rlkit train --preset smoke --run-dir runs/smoke` from the project root, or a whole quick
# demo with `rlkit demo --quick --out runs/quick` (its run: `runs/quick/smoke`). `runs` reads a
# relative path (or a bare name under runs/) from the project root ($RLKIT_HOME if set), the CLI
# from its current directory: a run trained from elsewhere goes in by the absolute path
# `rlkit train` prints.

# %% tags=["parameters"]
runs = ["runs/demo/local-tiny"]  # run dirs (either backend) or names under runs/; add more
labels = None  # one label per run for legends and verdicts (None: the runs' names)
reference = 0  # the run the others are compared with (an index or a label)
align = "step"  # "grpo": count steps from each run's GRPO start (local warm start < 0)
eval_set = None  # runs with several eval sets (eval_sets): the set compared; None: each's first
out_dir = None  # where to save the figures as PNG (OUT/plots/); None: save nothing

# %% [markdown]
# The cell above is tagged `parameters`: papermill adds a cell after it with the values of one
# execution (`papermill 06_compare_runs.ipynb out.ipynb -p runs '["runs/a", "runs/b"]'`).
# Relative paths mean the project root (or `$RLKIT_HOME`); a bare name (`"smoke"`) is looked
# for under runs/.

# %%
from rlkit.notebook import compare
from rlkit.notebook.workbench import keep

views = compare.load_runs(runs, labels, eval_set)
print(compare.describe(views))


# %% [markdown]
# Solve rate on the test set at every evaluated step. Left: by training step (the dotted line
# is where a local run's warm start ends; a SkyRL run warm-starts before its step 0, so set
# `align = "grpo"` to line runs up at the start of GRPO). Right: by the trainer's own timing,
# which is the fair axis between a fast recipe and a slow one.

# %%
keep(compare.solve_rate_curves(views, align=align), out_dir, "compare_solve_rate")

# %% [markdown]
# *Figure: what a real difference looks like: one run's band stays above the other's over the
# last several evaluations, in both panels. Crossing curves, or a gap smaller than the bands,
# is what two seeds of the same recipe look like; the paired test below decides.*

# %% [markdown]
# By difficulty, at each run's final checkpoint: the solve rate per maze size and shortest-path
# length, its 95% interval (mazes clustered) and how many mazes stand behind it. Cells with a
# handful of mazes have wide intervals: read them loosely.

# %%
print(compare.format_table(compare.difficulty_rows(views)))
keep(compare.difficulty_figure(views), out_dir, "compare_by_difficulty")

# %% [markdown]
# Maze by maze: each run against the reference run, on the mazes both evaluated. For every
# maze, the share of its samples one run solved minus the other's; if the runs were equally
# good, each difference would be as likely positive as negative, and the exact sign-flip test
# gives the probability (p) of differences at least this lopsided. "Best" is each run's best
# checkpoint picked on this same test set, which flatters it: trust the final comparison first.

# %%
for verdict in compare.verdicts(views, reference):
    print(verdict)

# %% [markdown]
# **Next:** to see *why* two runs differ, replay the mazes one solves and the other fails in
# notebook 05 (set its `run_dir` to each run).
