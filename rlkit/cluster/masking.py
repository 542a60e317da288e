"""What rlkit prints about a submission, with its secrets hidden.

A submission's env vars often hold tokens (WANDB_API_KEY, HF_TOKEN) and pip options private
index URLs with credentials; every line rlkit prints about a job (the notebook's echo, the
CLI's dry run) goes through here, so neither value ever reaches a notebook's saved output.
"""

from __future__ import annotations

import re
from typing import Any


def mask_env(env_vars: dict[str, str]) -> dict[str, str]:
    """Env var names with their values hidden: they often hold tokens (WANDB_API_KEY, HF_TOKEN)."""
    return {k: "***" for k in env_vars}


_URL_CREDENTIALS = re.compile(r"(\w+://)[^/\s@]+@")


def mask_url_credentials(text: str) -> str:
    """`https://user:token@host/...` -> `https://***@host/...`: private index URLs in pip
    options carry tokens as often as env vars do."""
    return _URL_CREDENTIALS.sub(r"\1***@", text)


def describe_submission(
    submission_id: str, entrypoint: str, runtime_env: dict[str, Any], metadata: dict[str, str]
) -> str:
    """What is (or would be) submitted, printable: env var values masked."""
    lines = [f"submission id: {submission_id}", f"entrypoint:    {entrypoint}"]
    lines.append(f"working_dir:   {runtime_env.get('working_dir')}")
    if runtime_env.get("env_vars"):
        masked = mask_env(runtime_env["env_vars"])
        lines.append("env_vars:      " + " ".join(f"{k}={v}" for k, v in masked.items()))
    if runtime_env.get("pip"):
        lines.append("pip:           " + mask_url_credentials(" ".join(runtime_env["pip"])))
    lines.append("metadata:      " + " ".join(f"{k}={v}" for k, v in metadata.items()))
    return "\n".join(lines)
