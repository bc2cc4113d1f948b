"""kdb as Triton's cache: every compile captured as it happens, stored once, shared by a fleet.

Set, in the environment of the process that compiles (its workers inherit it):

    TRITON_CACHE_MANAGER=kdb.capture:CacheManager          # kdb serves and stores every cache file
    KDB_HOME=/path/to/home                                 # or KDB_CATALOG + KDB_STORE: a shared fleet home
    KDB_CAPTURE_TAG=rocm6.2-nightly                        # the snapshot (default: capture-YYYY-MM-DD, UTC)

or, to keep Triton's own local cache directory in front and use kdb as the fleet's remote cache:

    TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager
    TRITON_REMOTE_CACHE_BACKEND=kdb.capture:RemoteBackend

`kdb capture env` prints these lines for the current home. Triton releases 2.3 to 3.9 have both hooks
(2.2 and older: TRITON_CACHE_MANAGER only; `kdb capture check` says what the installed one has).

A problem of kdb's (store full, catalog locked, shared home unreachable, KDB_CAPTURE_TAG naming a snapshot
`kdb ingest` made) never breaks a compile: it is said once on stderr and that process goes on without kdb
(Triton compiles; files go to a private folder). A damaged blob or index entry is never served: Triton
compiles that kernel again, and the damage is said once.
"""

from __future__ import annotations

import json
import os
from typing import Any

from kdb.capture import keyparts
from kdb.capture.cache import fallback_dir, group_file, guarded, stats
from kdb.capture.keyparts import end_warmup
from kdb.store.spool import GROUP_PREFIX

__all__ = ["CacheManager", "RemoteBackend", "RemoteCacheBackend", "end_warmup", "stats"]
keyparts.install()  # imported by Triton: every compile's key parts recorded (kdb/capture/keyparts.py)


def triton_cache_dir() -> str:
    """The folder Triton's own FileCacheManager would use in this process (its release's rule)."""
    try:
        from triton import knobs  # 3.4+

        return str(knobs.cache.dir)
    except ImportError:
        from triton.runtime import cache

        return os.getenv("TRITON_CACHE_DIR", "").strip() or cache.default_cache_dir()


def group_bytes(key: str, names: list[str]) -> bytes:
    """The group file Triton's own FileCacheManager writes for these files, byte for byte, whatever the
    release (a sorted name list in 2.3, a name -> path map in 3.0+): its own put_group is run on a recorder
    whose paths are those of Triton's cache folder, so an export of the capture equals that folder."""
    from triton.runtime.cache import FileCacheManager

    folder = os.path.join(triton_cache_dir(), key)

    class _Recorder(FileCacheManager):
        def __init__(self) -> None:  # no folder is made
            self.key, self.cache_dir, self.lock_path = key, folder, os.path.join(folder, "lock")
            self.recorded = b""

        def put(self, data: Any, filename: str, binary: bool = True) -> str:
            self.recorded = data if isinstance(data, bytes) else str(data).encode()
            return os.path.join(folder, filename)

    recorder = _Recorder()
    recorder.put_group("", {name: os.path.join(folder, name) for name in names})  # in Triton's order
    return recorder.recorded


def group_names(data: bytes) -> list[str]:
    """The files a group file names (either format)."""
    children = json.loads(data).get("child_paths")
    return list(children) if isinstance(children, dict | list) else []


def _as_bytes(data: Any) -> bytes:
    return data if isinstance(data, bytes) else str(data).encode()


class CacheManager:
    """`TRITON_CACHE_MANAGER=kdb.capture:CacheManager`: Triton's cache, served from and written to kdb.

    Triton makes one per cache key (`CacheManager(key, override=False, dump=False)`); the dump and override
    folders (TRITON_KERNEL_DUMP, TRITON_KERNEL_OVERRIDE) stay Triton's own."""

    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        self.key = key
        self._own: Any = None
        if not (override or dump):
            keyparts.attach(key)
        if override or dump:
            from triton.runtime.cache import FileCacheManager

            self._own = FileCacheManager(key, override=override, dump=dump)

    def _fallback_path(self, filename: str) -> str:
        return str(fallback_dir() / self.key / filename)

    def get_file(self, filename: str) -> str | None:
        if self._own is not None:
            return self._own.get_file(filename)

        def fallback() -> str | None:  # kdb failed in this process: only what it put since
            path = self._fallback_path(filename)
            return path if os.path.exists(path) else None

        def lookup(capture: Any) -> str | None:
            found = capture.get(self.key, filename)
            return None if found is None else str(found)

        return guarded(lookup, fallback)

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        if self._own is not None:
            return self._own.put(data, filename, binary)
        payload = _as_bytes(data)

        def fallback() -> str:
            path = self._fallback_path(filename)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(payload)
            return path

        return guarded(lambda c: str(c.put(self.key, filename, payload)), fallback)

    def get_group(self, filename: str) -> dict[str, str] | None:
        if self._own is not None:
            return self._own.get_group(filename)
        grp = self.get_file(group_file(filename))
        if grp is None:
            return None
        with open(grp, "rb") as f:
            names = group_names(f.read())
        found = {name: self.get_file(name) for name in names}
        if any(path is None for path in found.values()):
            return None  # all or nothing: a partial group made Triton fail (KeyError: 'hsaco'); a miss recompiles
        keyparts.group_seen(self.key, found.get(filename), hit=True)
        return {name: path for name, path in found.items() if path is not None}

    def put_group(self, filename: str, group: dict[str, str]) -> str:
        if self._own is not None:
            return self._own.put_group(filename, group)
        path = self.put(group_bytes(self.key, list(group)), group_file(filename), binary=False)
        guarded(lambda c: c.group_written(), lambda: None)
        keyparts.group_seen(self.key, group.get(filename), hit=False)
        return path


class RemoteCacheBackend:
    """Named as Triton's base class is: Triton 3.4+ accepts a TRITON_REMOTE_CACHE_BACKEND class only if a
    class of this name is in its MRO, and kdb does not import Triton to be imported."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._metadata: bytes | None = None  # the compile's metadata JSON, put before its group (keyparts)
        keyparts.attach(key)  # made inside `triton.compile`: its first compile of a process recorded too


class RemoteBackend(RemoteCacheBackend):
    """`TRITON_REMOTE_CACHE_BACKEND=kdb.capture:RemoteBackend` with Triton's `RemoteCacheManager`: Triton keeps
    its local folder and asks kdb for what it lacks (`get`) and gives kdb what it compiled (`put`)."""

    def get(self, filenames: list[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for name in filenames:

            def lookup(capture: Any, name: str = name) -> Any:
                return capture.get(self.key, name)

            found = guarded(lookup, lambda: None)
            if found is not None:
                with open(found, "rb") as f:
                    out[name] = f.read()
        if len(filenames) > 1 and len(out) < len(filenames):
            return {}  # a group's files: all or nothing (RemoteCacheManager uses whatever comes back)
        if len(filenames) > 1:  # a group served: a hit
            keyparts.group_data_seen(self.key, next((v for k, v in out.items() if k.endswith(".json")), None), True)
        return out

    def put(self, filename: str, data: bytes) -> None:
        payload = _as_bytes(data)
        if filename.endswith(".json") and not filename.startswith(GROUP_PREFIX):
            self._metadata = payload
        if filename.startswith(GROUP_PREFIX):
            # RemoteCacheManager writes its own group format (a sorted name list); kdb keeps the one Triton's
            # folder would hold, its files in the order they were put (the compile's, as FileCacheManager's map).
            names = group_names(payload)
            order: list[str] = guarded(lambda c: c.put_order(self.key), list)
            names = [n for n in order if n in names] + [n for n in names if n not in order]
            payload = group_bytes(self.key, names)
        guarded(lambda c: c.put(self.key, filename, payload), lambda: None)
        if filename.startswith(GROUP_PREFIX):
            guarded(lambda c: c.group_written(), lambda: None)
            keyparts.group_data_seen(self.key, self._metadata, False)
