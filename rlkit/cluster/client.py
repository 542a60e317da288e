"""Reach a Ray cluster and run rlkit's work on it as Ray jobs, through Ray's Jobs API, never Ray
Client (why: docs/decisions.md#jobs-api-never-ray-client).

    cluster = connect()                 # local head; or "http://host:8265", "sagemaker_ray://rlkit/ray"
    job = cluster.submit("smoke", "python -m rlkit.cli.main eval --policy oracle")"""

from __future__ import annotations

import functools
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.job_submission import JobSubmissionClient

from rlkit.cluster.address import resolve_address
from rlkit.cluster.jobs import JobHandle, JobRecord, next_submission_id, records_for_run, to_record
from rlkit.cluster.jobs_api import DEFAULT_REQUEST_TIMEOUT_S, call, open_client
from rlkit.cluster.localhead import (
    DEFAULT_DASHBOARD_PORT,
    LocalHead,
    find_local_head,
    start_local_head,
)
from rlkit.cluster.workdir import project_root, quiet_packaging, working_dir_runtime_env
from rlkit.errors import RlkitError
from rlkit.run.remote import answer

__all__ = ["Cluster", "ClusterSummary", "connect"]


SUBMIT_DEADLINE_S = 300.0
"""Submitting uploads the working dir (up to 100 MiB): slow links need minutes."""


def mask_env(env_vars: dict[str, str]) -> dict[str, str]:
    """Env var names with their values hidden: they often hold tokens (WANDB_API_KEY, HF_TOKEN)."""
    return {k: "***" for k in env_vars}


def describe_submission(
    submission_id: str, entrypoint: str, runtime_env: dict[str, Any], metadata: dict[str, str]
) -> str:
    """What is (or would be) submitted, printable: env var values masked."""
    lines = [f"submission id: {submission_id}", f"entrypoint:    {entrypoint}"]
    lines.append(f"working_dir:   {runtime_env.get('working_dir')}")
    if runtime_env.get("env_vars"):
        masked = mask_env(runtime_env["env_vars"])
        lines.append("env_vars:      " + " ".join(f"{k}={v}" for k, v in masked.items()))
    if runtime_env.get("pip"):  # index URLs carry tokens: https://user:token@host -> ***@host
        pip = re.sub(r"(\w+://)[^/\s@]+@", r"\1***@", " ".join(runtime_env["pip"]))
        lines.append("pip:           " + pip)
    lines.append("metadata:      " + " ".join(f"{k}={v}" for k, v in metadata.items()))
    return "\n".join(lines)


@dataclass(frozen=True)
class ClusterSummary:
    """What a cluster has and runs, readable at a glance."""

    address: str
    nodes_alive: int
    nodes_dead: int
    gpus: dict[str, float]
    """GPU count by accelerator type (Ray's `accelerator_type:*` resource), alive nodes only."""
    cpus: float
    memory_gib: float
    client_ray: str
    cluster_ray: str
    client_python: str
    cluster_python: str | None
    """None unless probed (it costs a small job)."""
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def _lines(self) -> list[tuple[str, str]]:
        gpus = ", ".join(f"{n:g}x {t}" for t, n in sorted(self.gpus.items())) or "none"
        cluster_py = self.cluster_python or "not probed (summary(probe_python=True))"
        return [
            ("address", self.address),
            ("nodes", f"{self.nodes_alive} alive, {self.nodes_dead} dead"),
            ("GPUs", gpus),
            ("CPUs", f"{self.cpus:g}"),
            ("memory", f"{self.memory_gib:.1f} GiB"),
            ("Ray", f"client {self.client_ray}, cluster {self.cluster_ray}"),
            ("Python", f"client {self.client_python}, cluster {cluster_py}"),
        ]

    def __str__(self) -> str:
        lines = [f"{k:>8}: {v}" for k, v in self._lines()]
        lines += [f"    note: {n}" for n in self.notes]
        lines += [f" WARNING: {w}" for w in self.warnings]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from html import escape

        rows = "".join(
            f"<tr><th style='text-align:right'>{escape(k)}</th><td>{escape(v)}</td></tr>"
            for k, v in self._lines()
        )
        rows += "".join(f"<tr><td colspan=2><i>{escape(n)}</i></td></tr>" for n in self.notes)
        rows += "".join(
            f"<tr><td colspan=2 style='color:#b00'>&#9888; {escape(w)}</td></tr>"
            for w in self.warnings
        )
        return f"<table>{rows}</table>"


@dataclass(repr=False, eq=False)
class Cluster:
    """A connection to one Ray cluster's Jobs API. Create it with `connect()`."""

    client: JobSubmissionClient
    address: str
    notes: list[str]
    local_head: LocalHead | None
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    last_submission: str | None = None
    """What the last `submit` sent, printable (env var values masked)."""

    def __repr__(self) -> str:
        return f"Cluster({self.address!r})"

    def summary(self, *, probe_python: bool = False) -> ClusterSummary:
        """Nodes, GPUs by type, CPUs, memory and versions; warns on a Ray/Python mismatch."""
        nodes = call(self, "listing nodes", self._list_nodes)
        alive = [n for n in nodes if n.get("state") == "ALIVE"]
        gpus: dict[str, float] = {}
        cpus = memory = 0.0
        for node in alive:
            res = node.get("resources_total") or {}
            cpus += float(res.get("CPU", 0.0))
            memory += float(res.get("memory", 0.0))
            if res.get("GPU"):
                kinds = [k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")]
                kind = kinds[0] if kinds else "GPU (type not reported)"
                gpus[kind] = gpus.get(kind, 0.0) + float(res["GPU"])
        # Ray's client records the head's version while checking the connection.
        cluster_ray = getattr(self.client, "_server_ray_version", None) or "?"
        client_python = platform.python_version()
        cluster_python = self._probe_python() if probe_python else None
        warnings = []
        if cluster_ray != ray.__version__:
            warnings.append(
                f"Ray differs: client {ray.__version__}, cluster {cluster_ray}; "
                f"pip install ray[default]=={cluster_ray} in this environment"
            )
        if cluster_python and cluster_python.split(".")[:2] != client_python.split(".")[:2]:
            warnings.append(
                f"Python differs: client {client_python}, cluster {cluster_python}; "
                "pickled objects and pinned wheels may not travel between them"
            )
        if nodes and not alive:
            warnings.append("no node is alive: check the head pod and the worker group")
        return ClusterSummary(
            address=self.address,
            nodes_alive=len(alive),
            nodes_dead=len(nodes) - len(alive),
            gpus=gpus,
            cpus=cpus,
            memory_gib=memory / 2**30,
            client_ray=ray.__version__,
            cluster_ray=cluster_ray,
            client_python=client_python,
            cluster_python=cluster_python,
            notes=tuple(self.notes),
            warnings=tuple(warnings),
        )

    def _list_nodes(self) -> list[dict[str, Any]]:
        # The state API behind `ray list nodes`; dead nodes stay listed, which is the point.
        r = self.client._do_request("GET", "/api/v0/nodes?detail=1&limit=10000")
        if r.status_code != 200:
            raise RlkitError(f"GET /api/v0/nodes answered {r.status_code}: {r.text[:200]}")
        return r.json()["data"]["result"]["result"]

    def _probe_python(self) -> str:
        code = "import json, platform; print('rlkit-python', json.dumps(platform.python_version()))"
        probe = f'python -c "{code}"'
        sid = call(
            self, "submitting the Python probe", lambda: self.client.submit_job(entrypoint=probe)
        )
        job = JobHandle(self, sid, run_name="python-probe")
        return answer(job, "rlkit-python ", "the Python probe printed no version", timeout_s=120)

    def submit(
        self,
        run_name: str,
        entrypoint: str,
        *,
        runtime_env_vars: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        working_dir: str | Path | None = None,
        pip: list[str] | None = None,
    ) -> JobHandle:
        """Submit `entrypoint` as job `rlkit-<run_name>-<n>`, shipping `working_dir` (default:
        the project root, refused above Ray's limit); env var values are never printed."""
        submission_id = next_submission_id(run_name, [j.submission_id for j in self.jobs()])
        root = Path(working_dir) if working_dir is not None else project_root()
        runtime_env = working_dir_runtime_env(root)
        if runtime_env_vars:
            runtime_env["env_vars"] = {str(k): str(v) for k, v in runtime_env_vars.items()}
        if pip:
            runtime_env["pip"] = list(pip)
        meta = {"rlkit_run_name": run_name, **{k: str(v) for k, v in (metadata or {}).items()}}
        kwargs: dict[str, Any] = {}
        # Ray's JobDetails do not report entrypoint resources: metadata keeps them for `watch`
        if num_cpus is not None:
            kwargs["entrypoint_num_cpus"] = meta["rlkit_num_cpus"] = num_cpus
        if num_gpus is not None:
            kwargs["entrypoint_num_gpus"] = meta["rlkit_num_gpus"] = num_gpus
        meta = {k: str(v) for k, v in meta.items()}
        self.last_submission = describe_submission(submission_id, entrypoint, runtime_env, meta)
        kwargs.update(entrypoint=entrypoint, submission_id=submission_id, runtime_env=runtime_env)
        submit = functools.partial(self.client.submit_job, metadata=meta, **kwargs)
        with quiet_packaging():  # uploading the working dir: SUBMIT_DEADLINE_S, not a request's
            sid = call(self, f"submitting {submission_id}", submit, deadline_s=SUBMIT_DEADLINE_S)
        return JobHandle(self, sid, run_name=run_name)

    def jobs(self) -> list[JobRecord]:
        """Every submitted job on the cluster, oldest first."""
        details = call(self, "listing jobs", self.client.list_jobs)
        records = [to_record(d) for d in details if d.submission_id]
        return sorted(records, key=lambda r: (r.start_time or 0, r.submission_id))

    def job_details(self, submission_id: str) -> Any:
        """Ray's JobDetails of one job: entrypoint, runtime env, metadata, resources."""
        ask = self.client.get_job_info
        return call(self, f"reading job {submission_id}", lambda: ask(submission_id))

    def job(self, submission_id: str) -> JobHandle:
        """A handle on a job by its submission id (as `rlkit jobs list` shows it)."""
        for record in self.jobs():
            if record.submission_id == submission_id:
                return JobHandle(self, submission_id, run_name=record.run_name)
        raise RlkitError(f"no job {submission_id} on {self.address}; see `rlkit jobs list`")

    def reattach(self, run_name: str) -> JobHandle:
        """The newest job submitted for `run_name`, e.g. after a kernel restart."""
        records = records_for_run(run_name, self.jobs())
        if not records:
            raise RlkitError(
                f"no job for run {run_name!r} on {self.address}; see `rlkit jobs list`"
            )
        return JobHandle(self, records[-1].submission_id, run_name=run_name)


def connect(
    address: str | None = None,
    *,
    timeout_s: float = 10.0,
    local_port: int = DEFAULT_DASHBOARD_PORT,
    local_num_cpus: int | None = None,
    start_local: bool = True,
) -> Cluster:
    """Connect to a Ray cluster's Jobs API (the local head: started or reused on `local_port`;
    only reused with `start_local=False`); one not reached in `timeout_s` is an RlkitError."""
    target = resolve_address(address)
    notes = list(target.notes)
    local_head = None
    url = target.url
    if url is None:
        if start_local:
            local_head = start_local_head(local_port, num_cpus=local_num_cpus)
        else:
            local_head = find_local_head(local_port)
        if local_head is None:
            raise RlkitError(
                f"no local Ray head answers on 127.0.0.1:{local_port}, so it has no jobs; "
                "give the address of the cluster the jobs ran on"
            )
        notes.append(local_head.describe())
        url = local_head.dashboard_url
    client = open_client(url, timeout_s)
    return Cluster(client, url, notes, local_head)
