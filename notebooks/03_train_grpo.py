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
# `qwen3vl-8b-6gpu` runs SkyRL on HyperPod (values in `presets/hyperpod-qwen3vl-8b.yaml`) and,
# without an address, is only printed (a dry run).

# %% tags=["parameters"]
out_dir = "runs/demo"  # local runs train in OUT/<run name>
preset = "local-tiny"  # smoke | local-tiny | qwen3vl-8b-6gpu
address = None  # None: local Ray head; the cluster's Jobs API address for SkyRL runs
local_port = 8265
run_name = None  # None: the preset's name
skyrl = {}  # SkyRL preset changes, e.g. {"nodes": 2, "runs_root": "/fsx/rlkit/runs"}
wait_s = 3 * 3600  # how long a headless run waits for the job (0: don't wait)

# %%
from rlkit.cluster import launch
from rlkit.cluster.client import connect
from rlkit.notebook.paths import home_path
from rlkit.notebook.widgets import JobMonitor

out_dir = home_path(out_dir)  # relative: against the project root, as `make demo` runs

plan = launch.plan_training(
    preset, out_dir, address=address, run_name=run_name, skyrl_changes=skyrl
)
print(plan)

# %%
cluster = None if plan.dry_run else connect(address, local_port=local_port)
job = launch.launch_plan(plan, cluster)
job

# %% [markdown]
# The live monitor: status, Stop button, reward/solve curves and the log tail, refreshed every
# few seconds in the background (the cell returns at once).

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
# Headless (papermill, `make demo`): wait for the job and fail this notebook if it failed.

# %%
if job is not None and wait_s > 0:
    print(launch.finish(job, monitor, wait_s))
