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
# # 03 · Train with GRPO
#
# Training runs as a Ray job, so it survives this kernel. Local presets (`smoke`, `local-tiny`)
# train the tiny Qwen3-VL with rlkit's GRPO loop on the local head; the cluster preset
# `qwen3vl-8b` runs SkyRL on HyperPod (values in
# `presets/hyperpod-qwen3vl-8b/03_train_grpo.yaml`) and,
# without an address, is only printed (a dry run); `skyrl-tiny-cpu` runs SkyRL's own trainer on
# the local head.
#
# What GRPO does here: each step takes `mazes_per_step` training mazes (never the test mazes)
# and plays `group_size` episodes on each with the current policy. Every episode is scored 0
# or 1 (exit reached or not) and compared with its own group: its advantage is its reward
# minus the group's mean, divided by the group's spread. There is no critic; the group is the
# baseline. The update makes every move of above-average episodes more likely and of
# below-average ones less likely, with PPO's clipped ratio over a couple of passes. A group
# where all episodes scored alike has every advantage 0 and teaches nothing in plain GRPO
# (`local-tiny` still trains a group that all failed, at -1: see below). The cell after the
# monitor works one real group of this run through that formula. Terms (advantage, KL, clip
# fraction, behaviour cloning, token_mean, ...): the [glossary](../docs/glossary.md).
#
# Why a warm start: GRPO needs groups that sometimes succeed. A randomly initialised model
# solves a fifth of the mazes by luck but not consistently, and learns little from that.
# Locally, a short behaviour-cloning phase on the BFS oracle's moves brings it to ~40% first:
# the stand-in for the instruct model the cluster run starts from (Qwen3-VL-8B solves 43.75%
# of the test set before training). A KL penalty (`recipe.kl_loss_coef`, 0.05 in `local-tiny`) keeps
# the policy near that starting point, which steadies the late curve.
#
# Why half the mazes get a tight turn budget (`grpo.turn_slack`, `grpo.tight_fraction`): the
# test env allows 12 turns on a 3x3 maze, so most detours still reach the exit and a 0/1
# reward hardly tells a sharp policy from a wandering one. Half of each step's mazes are played
# with their shortest path's number of turns (any wrong move costs the reward), the other half
# with the full 12 (so the policy also learns to recover after a wrong move). The reward stays
# 0/1 and the evals always play the pinned 12-turn env.
#
# Why groups that all failed still teach (`recipe.fail_advantage`, -1 in `local-tiny`): plain
# GRPO skips a group whose episodes all failed, so a maze where the policy is confidently
# wrong (a wrong first move into a loop that the picture repeats) stays wrong for good: the
# last failures of a plain run were whole mazes lost in 4 samples of 4. Here each episode of
# such a group gets advantage -1, which makes its moves less likely and leaves room to find
# the way. The late learning rate then falls along a cosine to 1e-6 (`grpo.lr_end`), so the
# curve settles instead of swinging once the policy is near the top.

# %% tags=["parameters"]
out_dir = "runs/demo"  # local runs train in OUT/<run name>
preset = "local-tiny"  # smoke | local-tiny | local-tiny-visgym | skyrl-tiny-cpu | qwen3vl-8b
address = None  # None: local Ray head; the cluster's Jobs API address for SkyRL runs
local_port = 8265
run_name = None  # None: the preset's name
skyrl = {}  # SkyRL preset changes, e.g. {"nodes": 2, "runs_root": "/fsx/rlkit/runs"}
recipe = {}  # algorithm switches for either backend (rlkit.recipe), e.g. {"eps_clip_high": 0.28}
submit = True  # False: print the plan only (nothing is submitted)
wait_s = 3 * 3600  # how long a headless run waits for the job (0: don't wait)

# %% [markdown]
# The cell above is tagged `parameters`: every setting of this notebook, with its default.
# `make demo` runs the notebooks with papermill, which adds a cell headed `# Parameters` right
# after it holding the demo's values; those are the ones that count in an executed notebook.
# Relative paths (`out_dir="runs/demo"`) mean the project root (or `$RLKIT_HOME`), wherever
# the notebook runs from.

# %% [markdown]
# `recipe` changes the algorithm the same way on both backends: its switches are named once
# (`rlkit.recipe`, SkyRL's own names, each with the paper it comes from). A local preset's job
# gets them as `--set recipe.NAME=VALUE`, a SkyRL preset as its `trainer.algorithm.*` overrides
# (printed in the plan below). A switch a backend cannot honour is refused here, in one line.

# %%
from IPython.display import display

from rlkit.cluster import launch
from rlkit.cluster.client import connect
from rlkit.notebook import groups, workbench
from rlkit.notebook.monitor import JobMonitor
from rlkit.notebook.paths import home_path

out_dir = home_path(out_dir)  # relative: against the project root, as `make demo` runs

plan = workbench.plan_run(
    preset, out_dir, address=address, run_name=run_name, skyrl=skyrl, recipe=recipe
)
print(plan)

# %%
cluster = None if plan.dry_run or not submit else connect(address, local_port=local_port)
job = launch.launch_plan(plan, cluster) if cluster else None
job

# %% [markdown]
# The live monitor: status, Stop button, reward/solve curves and the log tail, refreshed every
# few seconds in the background (the cell returns at once). Tick "Resubmit on failure" and a
# failed job is submitted again as the same run, resuming from its last complete checkpoint.
#
# *What a good run looks like in it: the warm start lifts the test-set solve rate to ~40%,
# then GRPO's rollout solve rate and the test evals climb together (locally to ~95% in 160
# steps); the evals' error bars are wide (64 mazes), so read the trend, not one point. A
# rollout solve rate that climbs while the evals stay flat is overfitting the training mazes;
# both flat after the warm start means GRPO's groups are not teaching (see 04's stability
# figure).*

# %%
monitor = JobMonitor(job, plan.run_dir, refresh_s=5).start_polling() if job else None
monitor

# %% [markdown]
# After a kernel restart: run the first two cells (parameters, plan), `cluster = connect(address)`,
# then this cell finds the run's newest job again; the monitor cell above shows it.

# %%
job = cluster.reattach(plan.run_name) if cluster else None
job

# %% [markdown]
# Headless (papermill, `make demo`): wait for the job and fail this notebook if it failed. The
# monitor's final state follows, as text and a static PNG of its curves: a saved notebook keeps
# the live widget above only as it was when first shown (its job then still PENDING).

# %%
if job is not None and wait_s > 0:
    print(launch.finish(job, monitor, wait_s))
    if monitor is not None:
        display(monitor.snapshot())

# %% [markdown]
# **One group, rewards to advantages.** The trainer keeps a few groups of every GRPO step with
# the advantage each episode's tokens got (`rlkit rollouts RUN`). Here is one mixed group
# (some episodes solved, some not) worked by hand, from the newest captured step that has one
# (late in a good run every group solves alike): each episode's reward, the group's mean and
# std, the formula's result, and the advantage the loss really used. The solved episodes get
# a positive advantage and the failed ones a negative one, and the two sides balance (they
# sum to 0). Only when no captured step has a mixed group does the cell show a group whose
# episodes all scored alike (all solved: 0 each, nothing in it beat anything else). (A job
# still running may not have captured a step yet: the cell says so.)

# %%
print(groups.worked_text(plan.run_dir, cluster=cluster) if job else "no run: nothing trained here")

# %% [markdown]
# **Next:** 04 scores every checkpoint on the test set.
#
# **The same on HyperPod** (`deploy/README.md`): with the cluster reachable (notebook 00), set
# `preset="qwen3vl-8b"`, `address` to the head's Jobs API and
# `skyrl={"runs_root": "/fsx/rlkit/runs"}`. The plan cell prints SkyRL's full command first;
# the job then trains Qwen3-VL-8B with vLLM rollouts beside the FSDP policy on 8 GPUs, writes
# checkpoints and `metrics.jsonl` under `/fsx/rlkit/runs/<run name>`, and the monitor above
# follows it. After a node failure, the monitor's resubmit switch (or `rlkit jobs watch RUN
# --resubmit 3`) starts it again from its last checkpoint.
