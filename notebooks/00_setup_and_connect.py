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
# # 00 · Setup and connect
#
# rlkit trains a vision-language model with GRPO to solve mazes: each turn the model sees the
# maze as a picture and answers one move; an episode earns reward 1 only if it reaches the exit.
# These seven notebooks are one workflow: 00 connect, 01 the mazes, 02 the baselines, 03 train,
# 04 the solve rate across checkpoints, 05 replays and failures, 06 runs side by side. On a
# laptop or in CI they use the embedded default (a local Ray head and a tiny
# Qwen3-VL-architecture model trained on CPU); on SageMaker HyperPod the same cells drive SkyRL
# training Qwen3-VL-8B. Every term they use (advantage, KL, clip fraction, pass@k, ...) is in
# the [glossary](../docs/glossary.md).
#
# This notebook checks the kernel (Python, torch, transformers, Ray: the cluster's versions),
# then connects to a Ray cluster's Jobs API: by default a local head on 127.0.0.1 (started, or
# reused if one answers); on a cluster, the head's address, e.g. from this notebook's preset
# file: `papermill 00_setup_and_connect.ipynb out.ipynb -f
# presets/hyperpod-qwen3vl-8b/00_setup_and_connect.yaml` (one file per notebook). A Studio
# kernel that only drives the cluster needs no torch (`environment.yml`): the report below
# then says `local_training: no`, which is not a problem.

# %% tags=["parameters"]
address = None  # None: local Ray head; else http://HEAD:8265 or sagemaker_ray://RAYCLUSTER/NS
local_port = 8265  # dashboard (Jobs API) port of the local head
probe_python = False  # True: run a tiny job to read the cluster's Python version
preflight_preset = None  # e.g. "qwen3vl-8b": a short job checks what that run needs

# %% [markdown]
# The cell above is tagged `parameters`: every setting of this notebook, with its default.
# `make demo` runs the notebooks with papermill, which adds a cell headed `# Parameters` right
# after it holding the demo's values; those are the ones that count in an executed notebook.
# Relative paths (`out_dir="runs/demo"`) mean the project root (or `$RLKIT_HOME`), wherever
# the notebook runs from.

# %%
from rlkit.cluster.client import connect
from rlkit.cluster.jobs import format_jobs
from rlkit.cluster.preflight import format_checks, preflight
from rlkit.notebook import workbench

workbench.kernel_report()

# %%
cluster = connect(address, local_port=local_port)
cluster.summary(probe_python=probe_python)

# %% [markdown]
# Preflight (with `preflight_preset`): runtime packages, GPUs, /fsx space against the run's
# estimate, the model, Ray versions; each failure comes with its fix.

# %%
if preflight_preset:
    print(format_checks(preflight(cluster, preflight_preset)))

# %% [markdown]
# Jobs already on the cluster (a training run keeps going when a kernel dies; notebook 03
# reattaches to it by run name).

# %%
print(format_jobs(cluster.jobs(), cluster.address))

# %% [markdown]
# **Next:** 01 shows the mazes the model plays. On HyperPod: create the Ray cluster and reach
# its head (`deploy/README.md` step 6, after steps 1-4), set `address` here, and run the
# preflight with `preflight_preset="qwen3vl-8b"` before the first submission.
