"""Ray: connecting (a real local head or a cluster), jobs through the Jobs API, launching runs,
and SkyRL (`rlkit.cluster.skyrl`). Torch-free: a Studio kernel that only drives the cluster
imports none of it."""
