"""How the store names, creates and compresses its files (blobs, their temporaries, exported caches' files) and
streams large ones: shared by writing a blob (kdb/store/blobs.py), replacing a damaged one (kdb/store/repair.py)
and the dictionaries (kdb/store/dictionary_index.py)."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

TEMP_PREFIX = ".tmp-"
HASH_HEX_LEN = 64
# Blobs are compressed one by one, without the cross-file context `tar | zstd -3` enjoys. Measured on
# a 300-kernel cache (bench/): level 3 gave 14.3 MB against the archive's 12.5 MB, level 9 12.0 MB for
# 1.2 s of CPU instead of 0.2 s, a few percent of an ingest dominated by parsing.
COMPRESSION_LEVEL = 9
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


def is_blob_name(name: str) -> bool:
    return len(name) == HASH_HEX_LEN and all(c in "0123456789abcdef" for c in name)


def refresh_mtime(final: Path | int) -> None:
    """Refresh a reused blob's mtime (FINAL: its path or an open descriptor), which keeps a shared
    home's gc (kdb/store/maintenance.py: grace period) from deleting it before the ingest that reuses it
    commits."""
    # gone meanwhile (the commit's refresh catches that), or a store this process may not write to
    with contextlib.suppress(OSError):
        os.utime(final)
