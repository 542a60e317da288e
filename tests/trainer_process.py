"""`rlkit train` in a child process that starts in milliseconds, for the crash-and-resume tests.

A plain subprocess pays ~6 s of imports (torch, transformers) per trainer; the fault tests start
a handful of them. Children here are forked from one multiprocessing forkserver that imported
the trainer once (and ran no torch op, so no thread pool is forked). Each child gets its own
session (so its process group can be killed), its own log for stdout and stderr, and its own
fault setting; it then runs the real CLI, as `python -m rlkit.cli.main train` would.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from pathlib import Path

from rlkit.train import faults

_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["rlkit.cli.main", "rlkit.train.trainer"])


def _train(argv: list[str], fault: str | None, log: str, cwd: str) -> None:
    os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(cwd)
    os.environ.pop(faults.ENV_VAR, None)
    if fault:
        os.environ[faults.ENV_VAR] = fault
    from rlkit.cli.main import main

    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class TrainerProcess:
    """The part of `subprocess.Popen` the fault tests use, over a forkserver child."""

    def __init__(self, argv: list[str], *, fault: str | None, log: Path, cwd: Path):
        log.touch()  # readable at once, before the child opens it
        self._proc = _CTX.Process(target=_train, args=(argv, fault, str(log), str(cwd)))
        self._proc.start()
        self.pid = self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.exitcode

    def poll(self) -> int | None:
        return self._proc.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise TimeoutError(f"trainer pid {self.pid} still running after {timeout} s")
        return self._proc.exitcode

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL the child's whole session (the child itself if it has not made one yet)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            self.send_signal(signal.SIGKILL)
