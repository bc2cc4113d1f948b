"""One writer at a time per home: an advisory lock file that the OS releases when the process dies."""

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
