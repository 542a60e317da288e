"""Stage a model once on shared storage (one small Ray job, torch- and Ray-free): download or copy
with resume, check, write `STAGED_MARKER` last. Why and the checks: docs/decisions.md#staging-a-model."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.errors import RlkitError, UsageError
from rlkit.run.remote import answer, follow

if TYPE_CHECKING:
    from rlkit.cluster.client import Cluster

MARK = "RLKIT_STAGE "
STAGED_MARKER = ".rlkit-staged.json"
"""Written last into a staged model's directory: source, files, bytes, when."""
MODELS_ROOT = "/fsx/models"
PROGRESS_EVERY_S = 10.0


def staged_path(model: str, root: str = MODELS_ROOT) -> str:
    """Where `rlkit model stage MODEL` puts a hub model by default: ROOT/<its name>."""
    return f"{root}/{model.rstrip('/').split('/')[-1]}"


def parse_source(source: str) -> tuple[str, str]:
    """("dir", path) for a directory (`/path`, `file:///path`), ("hub", id) for `org/name`."""
    if source.startswith("file://"):
        return "dir", source.removeprefix("file://")
    if source.startswith("/"):
        return "dir", source
    if "://" in source or source.count("/") != 1 or source.startswith("."):
        raise UsageError(
            f"model source {source!r}: give a hub id (org/name), an absolute directory or file:///DIR"
        )
    return "hub", source


def staged_record(path: str | Path) -> dict | None:
    """The stage record of a staged, verified model directory, else None."""
    try:
        return json.loads((Path(path) / STAGED_MARKER).read_text())
    except (OSError, ValueError):
        return None


# -- the job's body ----------------------------------------------------------------------------


def _say(text: str) -> None:
    print(f"rlkit: stage: {text}", flush=True)


def _progress(dest: Path, total: int, stop: threading.Event) -> None:
    """Print bytes under `dest` (partial files included) every PROGRESS_EVERY_S."""
    start = time.monotonic()
    while not stop.wait(PROGRESS_EVERY_S):
        done = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
        rate = done / max(time.monotonic() - start, 1e-9) / 1e6
        _say(f"{done / 1e9:.2f} of {total / 1e9:.2f} GB ({rate:.0f} MB/s)")


def _copy_dir(src: Path, dest: Path) -> dict[str, int]:
    """Copy `src` into `dest`, keeping files already there at their size; {file: size}."""
    if not (src / "config.json").is_file():
        raise RlkitError(f"{src} holds no config.json: not a model directory")
    sizes = {
        str(f.relative_to(src)): f.stat().st_size
        for f in sorted(src.rglob("*"))
        if f.is_file() and f.name != STAGED_MARKER
    }
    total, done = sum(sizes.values()), 0
    for i, (name, size) in enumerate(sizes.items(), 1):
        target = dest / name
        done += size
        if target.is_file() and target.stat().st_size == size:
            _say(f"{name}: already here ({i}/{len(sizes)} files)")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        shutil.copyfile(src / name, part)
        part.replace(target)
        _say(f"{name}: {i}/{len(sizes)} files, {done / 1e9:.2f} of {total / 1e9:.2f} GB")
    return sizes


def _hub_download(repo: str, dest: Path, revision: str | None) -> dict[str, int]:
    """snapshot_download into `dest` (it resumes partial files), with its expected sizes."""
    try:
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    except ImportError as e:
        raise RlkitError(
            f"huggingface_hub is not in the cluster's Python ({e}): stage from a directory"
        ) from e
    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    except GatedRepoError as e:
        raise RlkitError(
            f"{repo} is gated: accept its licence on huggingface.co, then --env HF_TOKEN"
        ) from e
    except RepositoryNotFoundError as e:
        raise RlkitError(f"{repo}: no such model on the hub (or private: --env HF_TOKEN)") from e
    sizes = {s.rfilename: int(s.size or 0) for s in info.siblings}
    _say(f"{repo}@{info.sha[:12]}: {len(sizes)} files, {sum(sizes.values()) / 1e9:.2f} GB")
    stop = threading.Event()
    threading.Thread(target=_progress, args=(dest, sum(sizes.values()), stop), daemon=True).start()
    try:
        snapshot_download(repo, revision=info.sha, local_dir=dest)
    finally:
        stop.set()
    return sizes


def safetensors_problem(path: Path) -> str | None:
    """None when the file is as long as its header says, else what is wrong (a cut download)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{path.name}: {size} bytes, no header"
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            return f"{path.name}: header of {n} bytes in a {size}-byte file"
        try:
            header = json.loads(f.read(n))
        except ValueError:
            return f"{path.name}: header is not JSON"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    want = 8 + n + max(ends, default=0)
    return None if want == size else f"{path.name}: {size} bytes, its header says {want}"


def verify(dest: Path, sizes: Mapping[str, int]) -> list[str]:
    """What is wrong with the model at `dest` (empty: config, weights and sizes check out)."""
    problems = []
    try:
        config = json.loads((dest / "config.json").read_text())
        if not isinstance(config, dict) or "model_type" not in config:
            problems.append("config.json has no model_type")
    except (OSError, ValueError) as e:
        problems.append(f"config.json unreadable ({e})")
    index = dest / "model.safetensors.index.json"
    if index.is_file():
        weights = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        weights = sorted(p.name for p in dest.glob("*.safetensors"))
    if not weights:
        problems.append("no safetensors weights (model.safetensors or its index)")
    for name in weights:
        path = dest / name
        problem = safetensors_problem(path) if path.is_file() else f"{name}: missing"
        problems += [problem] if problem else []
    for name, size in sizes.items():
        path = dest / name
        have = path.stat().st_size if path.is_file() else None
        if size and have != size:
            problems.append(f"{name}: {have} bytes, the source has {size}")
    return problems


def stage(source: str, dest: str, revision: str | None = None) -> dict:
    """Download or copy `source` into `dest`, verify it, write the marker: the job's work."""
    kind, where = parse_source(source)
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    (out / STAGED_MARKER).unlink(missing_ok=True)  # not staged until verified again
    start = time.monotonic()
    sizes = _copy_dir(Path(where), out) if kind == "dir" else _hub_download(where, out, revision)
    problems = verify(out, sizes)
    record = {
        "source": source,
        "path": str(out),
        "files": len(sizes),
        "bytes": sum(sizes.values()),
        "seconds": round(time.monotonic() - start, 1),
        "problems": problems,
    }
    if not problems:
        (out / STAGED_MARKER).write_text(json.dumps({**record, "staged_at": time.time()}))
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlkit.cluster.stage")
    p.add_argument("--source", required=True)
    p.add_argument("--to", required=True)
    p.add_argument("--revision")
    a = p.parse_args(argv)
    try:
        record = stage(a.source, a.to, a.revision)
    except (RlkitError, OSError) as e:
        record = {"source": a.source, "path": a.to, "problems": [str(e).splitlines()[0]]}
    print(MARK + json.dumps(record), flush=True)
    return 1 if record["problems"] else 0


# -- the client ----------------------------------------------------------------------------------


def stage_entrypoint(source: str, dest: str, revision: str | None = None) -> str:
    """The job's command, checked here: a known source form and an absolute destination."""
    parse_source(source)
    if not dest.startswith("/"):
        raise UsageError(
            f"--to {dest}: give an absolute path on shared storage, e.g. /fsx/models/NAME"
        )
    argv = ["python", "-m", "rlkit.cluster.stage", "--source", source, "--to", dest]
    return shlex.join(argv + (["--revision", revision] if revision else []))


def stage_model(
    cluster: Cluster,
    source: str,
    dest: str,
    *,
    revision: str | None = None,
    env_vars: Mapping[str, str] | None = None,
    echo: Callable[[str], object] | None = print,
    timeout_s: float = 6 * 3600,
) -> dict:
    """Run the stage job on `cluster`, echo its log, return its record; RlkitError in one line
    when it fails or the model does not verify."""
    entry = stage_entrypoint(source, dest, revision)
    name = f"stage-{dest.rstrip('/').split('/')[-1]}"
    job = cluster.submit(
        name, entry, num_cpus=1, runtime_env_vars=dict(env_vars or {}), metadata={"kind": "stage"}
    )
    if echo is not None:
        follow(job, echo, hide=MARK)
    record = answer(job, MARK, f"staging {source} to {dest}", timeout_s=timeout_s, failed_ok=True)
    if record["problems"]:
        more = f" (+{len(record['problems']) - 1} more)" if len(record["problems"]) > 1 else ""
        raise RlkitError(f"staging {source} to {dest} failed: {record['problems'][0]}{more}")
    return record


if __name__ == "__main__":
    sys.exit(main())
