"""One writer at a time per home: an advisory lock file that the OS releases when the process dies; and the probes
of such locks held by other processes (the capture's writers, kdb/store/spool.py)."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kdb.errors import CatalogBusy

POLL_S = 0.2


@contextmanager
def write_lock(path: Path, wait_s: float) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise CatalogBusy(
                        f"catalog busy: another kdb process is writing to {path.parent} (waited {wait_s:g} s; see --wait)"
                    ) from None
                time.sleep(POLL_S)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def is_held(path: Path) -> bool:
    """Whether a live process holds the lock on `path` (the OS drops a dead process's locks)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def remove_unheld(path: Path) -> int:
    """Remove a lock file no process holds, holding its lock meanwhile (a writer that opened it just now sees
    that its path is gone and takes another): 1 when removed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return 0
    try:
        path.unlink(missing_ok=True)
        return 1
    finally:
        os.close(fd)


def pid_of(path: Path) -> int | None:
    head = path.name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def pid_alive(pid: int) -> bool:
    """Whether a process of this id runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True
