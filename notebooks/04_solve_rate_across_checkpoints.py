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
# # 04 · Solve rate across checkpoints
#
# Every checkpoint of the run on the pinned test set (a local run: the trainer's evals, plus any
# checkpoint without one scored now; a SkyRL run: the eval dumps of its evaluated steps), with
# 95% bands clustered by maze, the untrained model as baseline and the warm-start/GRPO boundary. Then per-difficulty
# curves, a test paired by maze between GRPO's first checkpoint and the last, and summary.json.
#
# How to read it: each point is one checkpoint's solve rate on the same 64 mazes, the band its
# 95% interval. Step 0 is the untrained model as the trainer scored it; the dashed line is the
# same weights as notebook 02 scored them, with more samples and another seed: the two differ
# by sampling noise only, so read them through their intervals. The shaded span is the warm
# start; GRPO's own gain is measured from its boundary. Terms (design effect, pass@k, entropy,
# clip fraction, logprob gap, ...): the [glossary](../docs/glossary.md).

# %% tags=["parameters"]
out_dir = "runs/demo"
preset = "local-tiny"
run_name = None
run_dir = None  # a run to read instead of the preset's local one: a SkyRL run dir works too
skyrl_export = None  # or a SkyRL run's export dir (holding dumped_evals/)
address = None  # the cluster's Jobs API: reads the run there when this kernel cannot see it

# %% [markdown]
# The cell above is tagged `parameters`: every setting of this notebook, with its default.
# `make demo` runs the notebooks with papermill, which adds a cell headed `# Parameters` right
# after it holding the demo's values; those are the ones that count in an executed notebook.
# Relative paths (`out_dir="runs/demo"`) mean the project root (or `$RLKIT_HOME`), wherever
# the notebook runs from.

# %%
from rlkit.notebook import baselines, curves, plots, report, workbench
from rlkit.notebook.paths import home_path

out_dir = home_path(out_dir)  # relative: against the project root, as `make demo` runs
source = workbench.run_source(
    out_dir, preset, run_name=run_name, run_dir=run_dir, skyrl_export=skyrl_export
)
run = workbench.open_source(source, address=address)  # either backend, wherever its files are
evals = workbench.checkpoint_evals(run)  # a missing one is scored with the run's own config
print(run.describe())  # after that scoring: the evals counted are the ones shown (05 counts alike)
boundary = run.warm_start_end()
base = baselines.run_baselines(out_dir, run, evals)  # those that played this run's test set
others = workbench.other_eval_sets(run)  # a run's other eval sets (eval_sets): a curve each
fig = plots.solve_rate_curve(
    evals,
    baseline=base.get(report.BASE),
    warm_start_end=boundary,
    run_id=run.name,
    others=others,
)
curve_png = workbench.save_png(fig, out_dir, "solve_rate_across_checkpoints")
fig

# %% [markdown]
# *Figure: test-set solve rate of every checkpoint with its 95% band. A good run: the warm
# start ends near the base model's level plus ~20 points (locally ~40%), GRPO then climbs
# steeply and flattens near the top (the demo: ~97% sampled), and the last few checkpoints'
# bands overlap (a plateau, not a swing). A curve that peaks and falls back is the learning
# rate or a collapse: look at the stability figure below. A SkyRL run that evaluated several
# sets (`eval_sets=visgym-easy,visgym-hard`) draws one curve a set, each labelled with its set
# and protocol: the gap between them is how far training on one set carries to the other.*

# %%
fig = plots.by_difficulty(report.milestones(evals, boundary), run_id=run.name)
difficulty_png = workbench.save_png(fig, out_dir, "solve_rate_by_difficulty")
fig

# %% [markdown]
# *Figure: the same checkpoints by shortest-path length. Good: every length improves, and the
# long paths (the hard end) close most of their gap by the end. A run that only gains on short
# paths has learned the first move, not the maze.*

# %%
fig = curves.training_curves(run, run_id=run.name)
curves_png = workbench.save_png(fig, out_dir, "training_curves")
fig

# %% [markdown]
# *Figure: the trainer's own numbers per step. Good: the BC loss falls in the warm start; in
# GRPO the rollout reward rises (it is lower than the test set's solve rate while half the
# training mazes are played on a tight turn budget); KL to the warm-started policy (`loss/kl`,
# the k3 estimate `recipe.kl_loss_coef` weighs) grows in GRPO and stays bounded, at a level
# set by the model and its step size (this run's own range is printed under the stability
# figure below; one climbing without bound means the penalty is too weak); entropy falls as
# the policy sharpens; turns per episode fall towards the shortest paths' lengths.*

# %% [markdown]
# Is training stable? Entropy (with the rollout solve rate beside it and the line below which
# falling entropy is judged), clip fraction, the share of groups that teach nothing, the
# rollout-vs-trainer logprob gap, turns, response length and grad norm; the header names any
# warning the monitor would raise.
#
# Falling entropy is not by itself a problem. When it falls *because groups all succeed*, the
# policy has converged: the header says "entropy converging" and nothing warns. When it falls
# *while the rollout solve rate stays low*, the policy has become sure of moves that fail, its
# groups stop differing and GRPO stops learning: "entropy collapsing", a warning (collapse vs
# convergence in the [glossary](../docs/glossary.md)).

# %%
fig = curves.stability_curves(run, run_id=run.name)
stability_png = workbench.save_png(fig, out_dir, "stability")
fig

# %% [markdown]
# *Figure: the stability signals per step. A healthy local run: entropy falls steadily while
# the rollout solve rate climbs above 90% (convergence); clip fraction follows the step size
# (the tiny model's large steps, lr 3e-4 over 2 passes, clip a large share of tokens in
# GRPO's first steps and it still learns; a smaller learning rate clips less), and one that
# keeps climbing while the solve rate stalls is the warning sign; the zero-variance share
# rises late, as more groups solve every episode; grad norm stays within one order of
# magnitude. A SkyRL run also shows the logprob gap, which should stay well under its 0.1
# line.*
#
# The levels of KL, clip fraction and entropy depend on the model and its step size, so no
# number here is quoted from another run: the cell below prints this run's own, over its GRPO
# steps (the first step's value, the medians of its first and last 50 steps, the range).

# %%
print("\n".join(curves.signal_lines(run)))

# %% [markdown]
# Did GRPO help? Paired by maze: for every maze, the fraction of its samples solved at the last
# checkpoint minus the fraction at GRPO's first. If GRPO changed nothing, each difference would
# be as likely positive as negative; the exact sign-flip test gives the probability (p) of
# differences at least this lopsided under that assumption. The verdict names the better
# checkpoint when p < 0.05, and the interval is on the mean difference in points.

# %%
paired = report.grpo_paired_test(evals, boundary)
print(paired)

# %% [markdown]
# The curve samples each move (the run's own sampling, k per maze). The last checkpoint played
# greedily, always its most likely move, one episode per maze, says whether the policy itself
# solves the mazes or only recovers by chance: a greedy policy that errs tends to repeat the
# error, so its failures are mostly loops. (None for a SkyRL run: its evals are SkyRL's.)

# %%
greedy = workbench.final_greedy_eval(run)
print(greedy.summary() if greedy else f"greedy: not evaluated here ({run.backend} run)")

# %% [markdown]
# Two protocols, side by side. rlkit's samples k episodes a maze and clusters the interval by
# maze; the seed's plays every maze once, greedily, and reports a count with its exact binomial
# interval: "28/64 = 43.75% [31.4%, 56.7%]" is how the seed's starting point was measured (SkyRL's
# default eval on VisGym's maze_2d/easy), so only that line compares with it. A SkyRL run's own
# evals follow the seed's protocol when they ran at temperature 0, one sample a maze.
#
# One greedy result, two intervals: the seed's line (here and in the greedy cell above) gives
# the exact Clopper-Pearson interval on its count (`clopper-pearson`), the way the seed reports;
# the summary table below gives every row, the greedy one too, rlkit's Wilson interval on the
# maze-clustered effective n (`wilson-maze-deff`), so its rows compare alike. Each line names
# its method, and the table's last lines repeat the greedy row's exact interval.

# %%
print("\n".join(report.protocol_lines(evals, greedy)))

# %%
summary = report.build_summary(
    base,
    evals,
    boundary=boundary,
    paired=paired,
    run=str(source),
    plots=[str(curve_png), str(difficulty_png), str(curves_png), str(stability_png)],
    greedy=greedy,
)
report.write_summary(out_dir, summary)
print("\n".join(summary["table"]))
print(summary["headline"])

# %% [markdown]
# **Next:** 05 replays the episodes behind these numbers. For a SkyRL run (HyperPod, or
# `rlkit submit --preset skyrl-tiny-cpu --address local`), set `run_dir` to the run dir it
# printed, e.g. `run_dir="/fsx/rlkit/runs/<run name>"`: the same curves and test come from
# SkyRL's eval dumps (its step 0 is the untrained model, when the run evaluated before training).
