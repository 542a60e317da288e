"""A check's outcome, as the preflight job and the GPU checks report it: a name, a status, what
was found and, when it is not ok, how to fix it.

Its own module so that the preflight job (`rlkit.cluster.preflight`, which also prints the
table) and the GPU verdicts (`rlkit.cluster.gpu_checks`) share it while only preflight imports
the verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    """ok, warn (the run starts but something costs time or money), fail, or skip (not run
    here, the detail says why)."""
    detail: str
    fix: str = ""
