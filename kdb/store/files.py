"""How the store creates its files (blobs, their temporaries, exported caches' files) and streams large ones:
shared by writing a blob (kdb/store/blobs.py) and replacing a damaged one (kdb/store/repair.py)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TEMP_PREFIX = ".tmp-"
# Files above STREAM_THRESHOLD (kdb/store/blobs.py) are hashed, compressed and checked in passes of this size.
CHUNK = 1024 * 1024


def create_file(path: Path) -> int:
    """Open a new file at PATH for writing (never an existing file or a symbolic link), with mode 0666
    less the umask, as open() and Triton create files; tempfile.mkstemp's 0600 would hide a shared
    store's blobs, or an exported cache's files, from every other user."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags, 0o666)


def create_temp(directory: Path, prefix: str = TEMP_PREFIX) -> tuple[int, Path]:
    """A new temporary file in DIRECTORY (create_file's mode), as (open descriptor, path)."""
    while True:
        path = directory / f"{prefix}{secrets.token_hex(8)}"
        try:
            return create_file(path), path
        except FileExistsError:
            continue
