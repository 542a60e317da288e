"""`rlkit demo` / `make demo`: notebooks 00-05 executed by papermill (one kernel of this
interpreter, one local Ray head, one OUT), each saved ready to open (docs/notebooks.md)."""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rlkit.cluster.workdir import project_root
from rlkit.errors import RlkitError, UsageError

NOTEBOOKS = (
    "00_setup_and_connect",
    "01_mazes",
    "02_baseline_rollouts",
    "03_train_grpo",
    "04_solve_rate_across_checkpoints",
    "05_replay_and_failures",
)
TRAINING_NOTEBOOK = "03_train_grpo"
KERNEL = "rlkit"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def kernel_config() -> dict:
    """Kernels on local IPC sockets under Jupyter's runtime dir (docs/decisions.md)."""
    from jupyter_core.paths import jupyter_runtime_dir

    runtime = Path(jupyter_runtime_dir())
    runtime.mkdir(parents=True, exist_ok=True)
    base = runtime / f"rlkit-kernel-{os.getpid()}-{secrets.token_hex(4)}"
    return {"KernelManager": {"transport": "ipc", "ip": str(base)}}


NOTEBOOK_DIR = project_root() / "notebooks"


def parameters(out_dir: str | Path, *, quick: bool, local_port: int) -> dict[str, Any]:
    """papermill parameters shared by every notebook (each takes the ones it declares)."""
    return {
        "out_dir": str(Path(out_dir).resolve()),
        "preset": "smoke" if quick else "local-tiny",
        "local_port": local_port,
        "samples": 2 if quick else 8,
        "gallery_size": 16 if quick else 64,
        "wait_s": 900 if quick else 3 * 3600,
    }


def ensure_kernel() -> str:
    """The kernelspec `KERNEL`, running this interpreter, in this environment's prefix."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL)
        if spec.argv and Path(spec.argv[0]).resolve() == Path(sys.executable).resolve():
            return KERNEL
    except NoSuchKernel:
        pass  # installed just below
    from ipykernel.kernelspec import install

    install(kernel_name=KERNEL, display_name=KERNEL, prefix=sys.prefix)
    return KERNEL


def execute(name: str, out_dir: Path, params: dict[str, Any], *, kernel: str = KERNEL) -> Path:
    """Execute notebooks/NAME.ipynb into OUT/notebooks/NAME.ipynb, then `ready_to_open`."""
    import papermill
    from traitlets.config import Config

    source = NOTEBOOK_DIR / f"{name}.ipynb"
    if not source.is_file():
        raise UsageError(f"{source} is missing: run `make notebooks` to pair it from {name}.py")
    target = out_dir / "notebooks" / f"{name}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    declared = papermill.inspect_notebook(str(source))  # each notebook gets only its own
    try:
        papermill.execute_notebook(
            str(source),
            str(target),
            parameters={k: v for k, v in params.items() if k in declared},
            kernel_name=kernel,
            cwd=str(NOTEBOOK_DIR),
            progress_bar=False,
            config=Config(kernel_config()),
        )
    except papermill.PapermillExecutionError as e:
        raise RlkitError(
            f"notebook {name} failed in cell {e.exec_count}: {e.ename}: {e.evalue}; see {target}"
        ) from None
    ready_to_open(target)
    return target


def ready_to_open(path: Path) -> None:
    """Widget state only for what is shown, then trust: JupyterLab runs the players kernel-free."""
    import nbformat
    from nbformat.sign import NotebookNotary

    nb = nbformat.read(path, as_version=4)
    shown_widget_state(nb)
    NotebookNotary().sign(nb)
    nbformat.write(nb, path)


WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
MODEL_REF = re.compile(r'"IPY_MODEL_([^"\\]+)"')
"""How a widget's state names another widget (ipywidgets' `widget_serialization`)."""


def shown_widget_state(notebook: dict) -> tuple[int, int]:
    """Keep only the widget models an output shows and those they refer to; (kept, dropped)."""
    meta = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE)
    if not meta or not meta.get("state"):
        return 0, 0
    state: dict[str, dict] = meta["state"]
    shown = {
        out["data"][WIDGET_VIEW]["model_id"]
        for cell in notebook.get("cells", [])
        for out in cell.get("outputs", [])
        if WIDGET_VIEW in out.get("data", {})
    }
    keep: set[str] = set()
    todo = [m for m in shown if m in state]
    while todo:
        model = todo.pop()
        if model not in keep:
            keep.add(model)
            refs = MODEL_REF.findall(json.dumps(state[model].get("state", {})))
            todo += [m for m in refs if m in state]
    dropped = len(state) - len(keep)
    if keep:
        meta["state"] = {model: entry for model, entry in state.items() if model in keep}
    else:  # no output shows a widget: no widget state to save
        del notebook["metadata"]["widgets"]
    return len(keep), dropped


def run_demo(
    out_dir: str | Path = "runs/demo",
    *,
    quick: bool = False,
    local_port: int | None = None,
) -> dict:
    """Execute the notebooks in order; returns summary.json's content plus timings."""
    from rlkit.cluster.launch import plan_training
    from rlkit.cluster.localhead import free_port, start_local_head
    from rlkit.notebook.progress import RunFollower

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ensure_kernel()
    head = None if local_port is not None else start_local_head(free_port(), num_cpus=2)
    port = local_port if head is None else head.port
    params = parameters(out, quick=quick, local_port=port)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        run_dir = plan_training(params["preset"], out).run_dir  # notebook 03's, followed
        for name in NOTEBOOKS:
            start = time.monotonic()
            print(f"[demo] {name} ...", flush=True)
            with RunFollower(run_dir) if name == TRAINING_NOTEBOOK else nullcontext():
                execute(name, out, params)
            timings[name] = round(time.monotonic() - start, 1)
            print(f"[demo] {name} done in {timings[name]:.0f} s", flush=True)
    finally:
        if head is not None:
            head.stop()
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    summary["timings_s"] = {**timings, "total": round(time.monotonic() - t0, 1)}
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    print("\n".join(summary.get("table", [])))
    if summary.get("headline"):
        print(summary["headline"])
    return summary
