"""The job monitor: a running job's status, progress, stability warning, curves, log tail and
newest captured rollouts, with Stop and "Resubmit on failure", polled on a daemon thread."""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import ipywidgets as widgets

from rlkit.errors import RlkitError, UsageError
from rlkit.notebook.curves import live_curves
from rlkit.notebook.plots import figure_png, png_width
from rlkit.notebook.progress import read_progress
from rlkit.notebook.rollouts import RolloutsView
from rlkit.run import Run, open_run, run_or_none
from rlkit.run.stability import warning_line

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


class JobLike(Protocol):
    """What the monitor needs from a job handle (`rlkit.cluster.jobs.JobHandle`)."""

    def status(self) -> object: ...
    def logs(self) -> str: ...
    def stop(self) -> object: ...


def status_name(status: object) -> str:
    """ "RUNNING" from a Ray JobStatus, an Enum or a string."""
    return str(getattr(status, "value", status)).upper()


def tail_lines(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:]) if n > 0 else ""


@dataclass(frozen=True)
class MonitorSnapshot:
    """A job monitor's state as text and its curves as a PNG (the text: Jupyter's fallback)."""

    text: str
    png: bytes

    def __repr__(self) -> str:
        return self.text

    def _repr_png_(self) -> bytes | None:
        return self.png or None


class JobMonitor(widgets.VBox):
    """Status, log tail, Stop button and curves of a running job, refreshed every `refresh_s`
    once `start_polling()`. "Resubmit on failure" (on when `resubmit` > 0) resubmits a FAILED job
    as the same run through `resubmitter(job)` (default: on its cluster) and follows the new job."""

    def __init__(
        self,
        handle: JobLike,
        run_dir: str | Path,
        refresh_s: float = 2.0,
        *,
        log_lines: int = 15,
        resubmit: int = 0,
        resubmitter: Callable[[JobLike], JobLike] | None = None,
        remote_every_s: float = 60.0,
    ):
        if refresh_s <= 0:
            raise UsageError(f"refresh_s ({refresh_s}) must be > 0 seconds")
        if resubmit < 0:
            raise UsageError(f"resubmit ({resubmit}) must be >= 0 restarts")
        self.handle = handle
        self.resubmitter = resubmitter
        self.resubmit_switch = widgets.Checkbox(
            value=resubmit > 0, description="Resubmit on failure", indent=False
        )
        self.max_restarts = widgets.BoundedIntText(
            value=resubmit or 3, min=0, max=100, description="restarts", layout={"width": "9em"}
        )
        self.restarts: list[str] = []
        self.run_dir = Path(run_dir)
        self.remote_every_s = remote_every_s
        self._remote: Run | None = None
        self._remote_at = float("-inf")
        self._evals: dict = {}
        self._eval_steps: tuple[int, ...] = ()
        self.refresh_s = refresh_s
        self.log_lines = log_lines
        self.status, self.progress_line, self.note = "UNKNOWN", "", ""
        self.warning = ""  # the stability warning line
        self.error: str | None = None
        self.status_label = widgets.HTML()
        self.log_view = widgets.Textarea(disabled=True, layout={"width": "100%", "height": "16em"})
        self.curves = widgets.Image(format="png", layout={"width": "720px"})
        self.progress = widgets.HTML()
        self.stop_button = widgets.Button(
            description="Stop job", button_style="danger", icon="stop"
        )
        self.stop_button.on_click(lambda _: self.stop_job())
        self.rollouts = RolloutsView()
        self._plotted: tuple[int, int] | None = None
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # the poll thread and a button click may refresh at once
        controls = [self.status_label, self.stop_button, self.resubmit_switch, self.max_restarts]
        super().__init__(
            [widgets.HBox(controls), self.progress, self.curves, self.rollouts, self.log_view]
        )
        self.refresh()

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None:
            bundle["text/plain"] = f"job monitor, {self.status} when shown: {self.progress_line}"
        return bundle

    def snapshot(self) -> MonitorSnapshot:
        """The monitor's state now as text and its curves as a PNG."""
        self.refresh()
        lines = [f"job {getattr(self.handle, 'submission_id', self.handle)}: {self.status}"]
        lines += [self.progress_line, *self.restarts]
        lines += [f"warning: {self.warning}"] if self.warning else []
        lines += [f"error: {self.error}"] if self.error else []
        return MonitorSnapshot("\n".join(x for x in lines if x), bytes(self.curves.value))

    @property
    def polling(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def refresh(self) -> str:
        """Poll the job and the run directory once; returns the status name."""
        with self._lock:
            try:
                self.status = status_name(self.handle.status())
                if self.status == "FAILED" and self._may_restart():
                    self._restart()
                self.log_view.value = tail_lines(self.handle.logs(), self.log_lines)
                self._refresh_curves()
                self.error = None
            except RlkitError as e:  # a dead cluster or a bad file is shown, not raised in a thread
                self.error = str(e)
            colour = {"SUCCEEDED": "green", "FAILED": "red", "STOPPED": "gray"}.get(
                self.status, "#1060c0"
            )
            extra = f" <i>({html.escape(self.error)})</i>" if self.error else ""
            if self.restarts:
                extra += f"<br><small>{html.escape(self.restarts[-1])}</small>"
            self.status_label.value = (
                f"<b style='color:{colour}'>{html.escape(self.status)}</b>{extra}"
            )
            self.stop_button.disabled = self.done
            return self.status

    def _may_restart(self) -> bool:
        return self.resubmit_switch.value and len(self.restarts) < self.max_restarts.value

    def _restart(self) -> None:
        from rlkit.cluster.watch import restart_line, resubmit_job

        old, cluster = self.handle, getattr(self.handle, "cluster", None)
        if self.resubmitter is None and cluster is None:
            raise RlkitError(f"{old!r} has no cluster to resubmit on: pass resubmitter=")
        self.handle = self.resubmitter(old) if self.resubmitter else resubmit_job(cluster, old)
        n = len(self.restarts) + 1
        self.restarts.append(restart_line(n, self.max_restarts.value, old, self.handle, "FAILED"))
        self.status = status_name(self.handle.status())

    def _read_run(self) -> Run | None:
        """The run from its files here, else through the cluster every `remote_every_s`."""
        cluster = getattr(self.handle, "cluster", None)
        local = cluster is None or getattr(cluster, "local_head", None) is not None
        if self.run_dir.is_dir() or local:
            run = run_or_none(self.run_dir)  # a job on this machine's head writes here
            self.note = "" if run is not None else f"{self.run_dir} not written yet"
            return run
        now = time.monotonic()
        if now - self._remote_at >= self.remote_every_s:
            self._remote_at = now
            self._remote = open_run(self.run_dir, cluster)
        self.note = (
            f"{self.run_dir} is not visible from this kernel: read through the cluster every "
            f"{self.remote_every_s:.0f} s"
        )
        return self._remote

    def _refresh_curves(self) -> None:
        run = self._read_run()
        metrics = run.metrics() if run is not None else []
        line = read_progress(run if run is not None else self.run_dir, metrics).line()
        note = f"<br><small>{html.escape(self.note)}</small>" if self.note else ""
        self.warning = warning_line(metrics)
        if self.warning:
            note += f"<br><b style='color:#c05000'>warning: {html.escape(self.warning)}</b>"
        self.progress.value = f"<code>{html.escape(line)}</code>{note}"
        self.progress_line = line
        steps = tuple(run.eval_steps()) if run is not None else ()
        if steps != self._eval_steps:  # read (a SkyRL run: replay) the evals only when new
            self._evals, self._eval_steps = (run.evals() if steps else {}), steps
        evals = self._evals
        self.rollouts.update(run)  # re-reads only when a newer step was captured
        key = (len(metrics), len(evals))
        if key == self._plotted:
            return  # nothing new: skip re-drawing (the expensive part of a refresh)
        png = figure_png(live_curves(metrics, evals, run_id=self.run_dir.name))
        self.curves.value = png
        self.curves.layout.width = f"{png_width(png)}px"  # its own size: never stretched
        self._plotted = key

    def stop_job(self) -> None:
        """Ask the cluster to stop the job, then show its new status."""
        self.handle.stop()
        self.refresh()

    def start_polling(self) -> JobMonitor:
        """Refresh every `refresh_s` in the background until the job ends; returns self."""
        if self.polling or self.done:
            return self
        self._halt.clear()
        self._thread = threading.Thread(target=self._poll, name="rlkit-job-monitor", daemon=True)
        self._thread.start()
        return self

    def stop_polling(self, timeout_s: float = 5.0) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _poll(self) -> None:
        while not self._halt.wait(self.refresh_s):
            if self.refresh() in TERMINAL:
                return
