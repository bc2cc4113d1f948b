"""How the store names a cache folder: one content address, used by the ingest that records a folder and by the
capture index that serves it again (kdb/store/spool.py checks an index entry against it)."""

from __future__ import annotations

import hashlib


def folder_digest(cache_key: str, files: list[tuple[str, str]]) -> str:
    """Content address of a cache folder: its name and its (relative name, blob hash) pairs."""
    h = hashlib.sha256(cache_key.encode() + b"\0")
    for name, digest in sorted(files):
        h.update(name.encode() + b"\0" + digest.encode() + b"\n")
    return h.hexdigest()
