"""Hits served from the recorded folders' own files (served/<key>.<digest>/, kdb/store/spool.py): the paths a hit
returns, no blob decompressed and nothing copied, each folder checked against its index entry before this process
serves it — every file's size, and its inode and mtime as the commit recorded them (else, or with
KDB_CAPTURE_CHECK=digest always, its digest), once per process and cache key — then each file's size at every
lookup. A folder that is absent (recorded before served folders were kept) or
damaged is served from the blob store instead (kdb/capture/cache.py)."""

from __future__ import annotations

import os
import threading

from kdb.store.spool import SpoolLayout, served_problem


class ServedFolders:
    def __init__(self, layout: SpoolLayout) -> None:
        self.layout = layout
        self.check_digests = os.environ.get("KDB_CAPTURE_CHECK") == "digest"
        self._ok: dict[str, tuple[str, dict]] = {}  # cache key -> (its served folder, its index entry), checked
        self._not: set[str] = set()  # cache keys served from the blobs in this process
        self._lock = threading.Lock()

    def known(self, key: str, name: str) -> str | None:
        """The file's path when this process checked the key's folder already and the file still has its size
        (strings: pathlib's joins cost more than the stat)."""
        found = self._ok.get(key)
        if found is None:
            return None
        folder, entry = found
        recorded = entry["files"].get(name)
        try:
            if recorded is not None and os.stat(path := os.path.join(folder, name)).st_size == recorded[1]:
                return path
        except OSError:
            pass
        with self._lock:  # changed since it was checked: from the blobs from now on
            self._ok.pop(key, None)
            self._not.add(key)
        return None

    def check(self, key: str, entry: dict) -> tuple[str | None, str | None]:
        """(the key's served folder, None) once it matches `entry`; (None, why) when it is there but damaged;
        (None, None) when there is none (or this process found it damaged before)."""
        if key in self._ok:
            return self._ok[key][0], None
        if key in self._not:
            return None, None
        folder = self.layout.served_path(key, entry["folder_digest"])
        problem = served_problem(folder, entry, digests=self.check_digests)
        with self._lock:
            if problem is None:
                self._ok[key] = (str(folder), entry)
                return str(folder), None
            self._not.add(key)
        return None, (problem if folder.exists() else None)

    def forked(self) -> None:
        self._lock = threading.Lock()
