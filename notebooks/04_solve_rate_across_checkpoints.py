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
# checkpoint without one scored now; a SkyRL run: its eval dumps), with 95% bands clustered by
# maze, the untrained model as baseline and the warm-start/GRPO boundary. Then per-difficulty
# curves, a test paired by maze between GRPO's first checkpoint and the last, and summary.json.

# %% tags=["parameters"]
out_dir = "runs/demo"
preset = "local-tiny"
run_name = None
skyrl_export = None  # a SkyRL run's export dir (holding dumped_evals/) instead of a local run

# %%
from pathlib import Path

from rlkit.cluster import launch
from rlkit.notebook import plots, workbench
from rlkit.notebook.paths import home_path

out_dir = home_path(out_dir)  # relative: against the project root, as `make demo` runs
skyrl_export = home_path(skyrl_export) if skyrl_export else None

source = skyrl_export or launch.plan_training(preset, out_dir, run_name=run_name).run_dir
evals = workbench.checkpoint_evals(source)
boundary = plots.warm_start_end(source)
base = workbench.cached_baselines(out_dir)
fig = plots.solve_rate_curve(
    evals, baseline=base.get(workbench.BASE), warm_start_end=boundary, run_id=Path(source).name
)
curve_png = workbench.save_png(fig, out_dir, "solve_rate_across_checkpoints")
fig

# %%
fig = plots.by_difficulty(workbench.milestones(evals, boundary), run_id=Path(source).name)
difficulty_png = workbench.save_png(fig, out_dir, "solve_rate_by_difficulty")
fig

# %%
fig = plots.training_curves(source, run_id=Path(source).name)
curves_png = workbench.save_png(fig, out_dir, "training_curves")
fig

# %% [markdown]
# Did GRPO help? Paired by maze: how the fraction of each maze's samples solved changed, an exact
# sign-flip test on those changes, and the difference in solve rate with its 95% interval.

# %%
paired = workbench.grpo_paired_test(evals, boundary)
print(paired)

# %%
summary = workbench.build_summary(
    base,
    evals,
    boundary=boundary,
    paired=paired,
    run=str(source),
    plots=[str(curve_png), str(difficulty_png), str(curves_png)],
)
workbench.write_summary(out_dir, summary)
print("\n".join(summary["table"]))
