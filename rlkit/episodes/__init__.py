"""Playing and scoring episodes with any `Policy`: scripted policies, batched rollouts,
evaluation with intervals, the failure taxonomy. No torch: models plug in from `rlkit.model`."""
