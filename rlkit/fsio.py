"""Crash-safe file primitives: fsync, atomic replace (a kill leaves a file old or new), and an
flock-based run lock the kernel releases when its holder dies."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from pathlib import Path

from rlkit.errors import RlkitError

FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


def fsync(path: Path) -> None:
    """fsync a file or a directory (a rename is durable only once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:  # some filesystems cannot fsync a directory; the rename stays atomic
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_synced(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` so readers see the old or the new content, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write_synced(tmp, text)
        os.replace(tmp, path)
        fsync(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno in FULL_DISK:
            raise RlkitError(f"disk full while writing {path}: free space and retry") from e
        raise


class RunLock:
    """An exclusive flock on RUN/.lock; the kernel drops it when the holder dies, even by SIGKILL."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            raise RlkitError(
                f"run directory {self.path.parent} is in use ({holder or 'holder unknown'}): "
                "stop that trainer or choose another run directory"
            ) from None
        except OSError as e:
            os.close(fd)
            raise RlkitError(
                f"cannot lock {self.path} ({e.strerror}): the filesystem needs flock support "
                "(for Lustre mount with -o flock)"
            ) from e
        info = f"pid {os.getpid()} on host {socket.gethostname()} since {time.ctime()}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, info.encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            # The file stays: unlinking a lock file lets two processes lock different inodes.
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
