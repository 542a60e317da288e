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
# Checks this kernel (Python, torch, transformers, Ray: the cluster's versions), then
# connects to a Ray cluster's Jobs API: by default a local head on 127.0.0.1 (started, or reused
# if one answers), on a cluster the address from a preset file, e.g.
# `papermill 00_setup_and_connect.ipynb out.ipynb -f presets/hyperpod-qwen3vl-8b.yaml`.

# %% tags=["parameters"]
address = None  # None: local Ray head; else http://HEAD:8265 or sagemaker_ray://CLUSTER/NAMESPACE
local_port = 8265  # dashboard (Jobs API) port of the local head
probe_python = False  # True: run a tiny job to read the cluster's Python version
preflight_preset = None  # e.g. "qwen3vl-8b-6gpu": a short job checks what that run needs

# %%
from rlkit.cluster.client import connect
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
for record in cluster.jobs():
    print(record)
