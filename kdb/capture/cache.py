"""The store behind kdb's Triton cache manager: one per process, shared by every CacheManager Triton makes.

A put writes the file into this process's own folder (the path Triton is given back and reads from), then
links it into the spool; a finished compile (its group file) makes its folder whole, and whole folders are
recorded by `commit`: stored in the blob store and analysed exactly as `kdb ingest` does (it is the same
ingest, appending to the capture's snapshot), then listed in the index that serves later reads. A read
looks in this process's folder, the spool, then the index (a blob, checked against its digest on read).

Waiting is bounded: a commit after a compile only runs if no other process of the tag is committing and
the catalog is free at once; the one at exit waits KDB_CAPTURE_WAIT seconds. Whatever stays spooled is
recorded by the next commit of any process (or `kdb capture commit`): nothing put is lost.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from kdb.capture.spool import GROUP_PREFIX, SpoolLayout, check_name
from kdb.errors import CatalogBusy, IntegrityError, KdbError
from kdb.store.home import Home, resolve_home, resolve_shared
from kdb.store.lock import write_lock

T = TypeVar("T")
CAPTURE_DIR = "capture"
DEFAULT_WAIT_S = 10.0
# Folders finished meanwhile are recorded together: one ingest of many folders costs little more than of one.
DEFAULT_COMMIT_EVERY_S = 2.0
# The largest file Triton writes is a code object of a few MB; the same bound as `kdb ingest`'s.
MAX_FILE_BYTES = 1 << 30


def default_tag(now: datetime | None = None) -> str:
    """One snapshot per UTC day unless KDB_CAPTURE_TAG names one: `capture-2026-11-25`."""
    return f"capture-{(now or datetime.now(UTC)):%Y-%m-%d}"


def open_home() -> Home:
    shared = resolve_shared(None, None)
    return Home.shared(*shared) if shared else Home(resolve_home(None))


def capture_root(home: Home) -> Path:
    return home.root / CAPTURE_DIR  # a shared home's root is its store


class Capture:
    """What one process captured and was served, and how (the counters)."""

    def __init__(self, home: Home | None = None, tag: str | None = None) -> None:
        self.home = home or open_home()
        self.layout = SpoolLayout(capture_root(self.home), tag or os.environ.get("KDB_CAPTURE_TAG") or default_tag())
        self.wait_s = float(os.environ.get("KDB_CAPTURE_WAIT", DEFAULT_WAIT_S))
        local = None if self.home.is_shared else self.layout.root / "proc"
        if local is not None:
            local.mkdir(parents=True, exist_ok=True)
            _remove_dead_folders(local)
        # Linked into the spool where it can be (the same file system): a shared home's is local to the host.
        self.mine = Path(tempfile.mkdtemp(prefix=f"kdb-capture-{os.getpid()}-", dir=local))
        self.stats: Counter[str] = Counter()
        self.adopted: set[str] = set()
        self._order: dict[str, list[str]] = {}  # cache key -> file names in the order this process put them
        self._index: dict[str, dict] = {}  # index entries read (a recorded folder's entry never changes)
        self._lock = threading.Lock()
        self.every_s = float(os.environ.get("KDB_CAPTURE_COMMIT_EVERY", DEFAULT_COMMIT_EVERY_S))
        self._last_commit = -self.every_s
        self._committer: threading.Thread | None = None
        self._commit_problem: str | None = None
        # What a commit runs, imported now: the last commit runs at exit, when Python refuses the atexit hooks
        # that importing concurrent.futures (the ingest's worker pool) registers.
        import kdb.ingest.snapshot  # noqa: F401
        import kdb.store.catalog  # noqa: F401

    # -- files ---------------------------------------------------------------------------------------
    def _own(self, key: str, name: str) -> Path:
        return self.mine / check_name(key, "cache key") / check_name(name)

    def _write_own(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
        temp.write_bytes(data)
        os.replace(temp, path)

    def put(self, key: str, name: str, data: bytes) -> Path:
        if len(data) > MAX_FILE_BYTES:
            raise KdbError(f"{key}/{name}: {len(data)} bytes, over the {MAX_FILE_BYTES}-byte limit of a cache file")
        path = self._own(key, name)
        self._write_own(path, data)
        self.layout.install(path, key, name)
        with self._lock:
            self.stats["puts"] += 1
            self.stats["put_bytes"] += len(data)
            order = self._order.setdefault(key, [])
            if name not in order:
                order.append(name)
        return path

    def put_order(self, key: str) -> list[str]:
        with self._lock:
            return list(self._order.get(key, ()))

    def get(self, key: str, name: str) -> Path | None:
        """The file's path in this process's folder, brought there from the spool or the store; None: a miss."""
        path = self._own(key, name)
        with self._lock:
            self.stats["lookups"] += 1
        if path.exists():
            self._count("hits")
            return path
        # Spooled, then being recorded (a commit moves the folder spool -> commit -> index, in that order): a
        # file is always in one of the three places, whichever moment the lookup looks.
        for waiting in (self.layout.spool / key / name, self.layout.commit / key / name):
            if self._bring(waiting, path):
                self._count("hits")
                return path
        entry = self._index.get(key) or self.layout.read_index(key)
        if entry is not None:
            self._index[key] = entry
        if entry is None or name not in entry["files"]:
            self._count("misses")
            return None
        digest, size = entry["files"][name]
        try:
            data = self.home.store.get(digest, size)
        except (IntegrityError, OSError):  # its snapshot removed and collected, or the blob damaged: a miss
            self._count("misses")
            self._count("stale_index")
            self.layout.index_path(key).unlink(missing_ok=True)
            self._index.pop(key, None)
            return None
        self._write_own(path, data)
        self._count("hits")
        self._count("store_reads")
        if key not in self.adopted:
            self.adopted.add(key)
            self.layout.note_adopted(key, entry["folder_digest"])
        return path

    def _bring(self, source: Path, path: Path) -> bool:
        """Link (else copy) a spooled file into this process's folder; False when it is not there (any more)."""
        if not source.exists():
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, path)
        except FileExistsError:
            pass
        except OSError:  # moved on meanwhile, or another file system: copy what can still be read
            data = _read_or_none(source)
            if data is not None:
                self._write_own(path, data)
        return path.exists()

    def _count(self, what: str) -> None:
        with self._lock:
            self.stats[what] += 1

    def group_written(self) -> None:
        """A compile finished: record what is whole, in a thread beside the compile, at most one at a time and
        once per KDB_CAPTURE_COMMIT_EVERY seconds (a commit is a whole ingest, ~0.5-1 s: one per kernel made
        each compile wait for it, bench/capture_bench.py), if nobody else is recording and the catalog is free."""
        # Compile workers (Inductor's pool) are often ended without running their exit hooks: counters as of now.
        _write_stats(self)
        with self._lock:
            now = time.monotonic()
            if (self._committer is not None and self._committer.is_alive()) or now - self._last_commit < self.every_s:
                return
            self._last_commit = now
            self._committer = threading.Thread(target=self._commit_quietly, name="kdb-capture-commit", daemon=True)
            self._committer.start()

    def _commit_quietly(self) -> None:
        try:
            self.commit(wait_s=0.0)
        except CatalogBusy:
            self._count("commits_deferred")
        except Exception as exc:  # noqa: BLE001 - a failed commit loses nothing (the folders stay spooled)
            self._count("commits_failed")
            with self._lock:
                first, self._commit_problem = self._commit_problem is None, f"{type(exc).__name__}: {exc}"
            if first:
                print(
                    f"kdb capture: recording failed ({self._commit_problem}); the files stay spooled", file=sys.stderr
                )
        _write_stats(self)

    def finish(self) -> None:
        """At exit: the running commit finishes (up to KDB_CAPTURE_WAIT), then one last commit records the rest."""
        committer = self._committer
        if committer is not None:
            committer.join(self.wait_s)
        self.commit(wait_s=self.wait_s)

    # -- recording -----------------------------------------------------------------------------------
    def commit(self, wait_s: float) -> int:
        """Record every whole spooled folder and every adopted one in the tag's snapshot; return how many
        folders were recorded. CatalogBusy when another committer of the tag or a writer of the catalog held
        on longer than `wait_s` (nothing is lost: the folders stay spooled)."""
        from kdb.ingest.snapshot import ingest  # the ingest is imported where a commit runs, not at import

        layout = self.layout
        layout.lock.parent.mkdir(parents=True, exist_ok=True)
        with write_lock(layout.lock, wait_s):  # the home's writer lock, on the tag's own lock file
            layout.commit.mkdir(parents=True, exist_ok=True)
            for folder in list(layout.whole_folders()):
                target = layout.commit / folder.name
                if target.exists():  # left by a killed commit: the spooled copy is the same compile
                    shutil.rmtree(folder, ignore_errors=True)
                    continue
                os.replace(folder, target)
            keys = sorted(p.name for p in layout.commit.iterdir())
            adopted = [(k, d) for k, d in layout.take_adopted() if k not in keys]
            if not keys and not adopted:
                layout.adopted_done()
                layout.commit.rmdir()
                return 0
            ingest(
                self.home,
                layout.commit,
                layout.tag,
                workers=1,
                lock_wait_s=wait_s,
                rehash=True,
                append=adopted,
                labels={"captured_by": "kdb.capture"},
            )
            self._write_index(keys)
            shutil.rmtree(layout.commit, ignore_errors=True)
            layout.adopted_done()
            self._count("commits")
            with self._lock:
                self.stats["folders_committed"] += len(keys)
            return len(keys) + len(adopted)

    def _write_index(self, keys: list[str]) -> None:
        from kdb.store.catalog import Catalog

        with Catalog.open(self.home.catalog, read_only=True, wait_s=self.wait_s) as catalog:
            rows = catalog.capture_index(self.layout.tag, keys)
        folders: dict[str, tuple[str, dict[str, tuple[str, int]]]] = {}
        for key, folder_digest, name, digest, size in rows:
            folders.setdefault(key, (folder_digest, {}))[1][name] = (digest, size)
        for key, (folder_digest, files) in folders.items():
            self.layout.write_index(key, folder_digest, files)

    def close(self) -> None:
        shutil.rmtree(self.mine, ignore_errors=True)


def _remove_dead_folders(proc: Path) -> None:
    """Own folders of processes that ended without their exit hooks (killed, or compile workers ended by
    their pool): `kdb-capture-<pid>-…`, removed once no process of that id runs on this host."""
    for folder in proc.glob("kdb-capture-*-*"):
        try:
            pid = int(folder.name.split("-")[2])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, IndexError, PermissionError):
            continue


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


# -- the process's one capture, and what happens when kdb fails ----------------------------------------
_capture: Capture | None = None
_broken: str | None = None
_fallback: Path | None = None
_guard_lock = threading.Lock()


def current() -> Capture | None:
    """The process's capture, made on first use; None once kdb failed in this process."""
    global _capture
    if _broken is not None:
        return None
    with _guard_lock:
        if _capture is None:
            _capture = Capture()
            atexit.register(_at_exit)
    return _capture


def guarded(action: Callable[[Capture], T], fallback: Callable[[], T]) -> T:
    """Run `action` on the process's capture; any failure of kdb's (store, catalog, shared home) is said once
    on stderr and the process goes on without kdb: `fallback` answers (a miss, a private file)."""
    global _broken
    try:
        capture = current()
        if capture is not None:
            return action(capture)
    except Exception as exc:  # noqa: BLE001 - a kdb problem must never break the user's compile
        if _broken is None:
            _broken = f"{type(exc).__name__}: {exc}".splitlines()[0]
            print(f"kdb capture: {_broken}; Triton goes on without kdb's cache in this process", file=sys.stderr)
    return fallback()


def fallback_dir() -> Path:
    """Where puts go once kdb failed: a private folder of this process, like Triton's own cache folder."""
    global _fallback
    with _guard_lock:
        if _fallback is None:
            _fallback = Path(tempfile.mkdtemp(prefix=f"kdb-capture-fallback-{os.getpid()}-"))
            atexit.register(shutil.rmtree, _fallback, True)
    return _fallback


def group_file(name: str) -> str:
    return f"{GROUP_PREFIX}{name}"


def _at_exit() -> None:
    capture = _capture
    if capture is None:
        return
    try:
        capture.finish()
    except CatalogBusy as exc:
        left = len(capture.layout.waiting())  # a busy commit moved them to the commit folder first
        print(f"kdb capture: {exc}; {left} folders stay spooled for the next commit", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - at exit too: say it, never raise into the interpreter's shutdown
        print(f"kdb capture: recording failed ({type(exc).__name__}: {exc}); the files stay spooled", file=sys.stderr)
    finally:
        _write_stats(capture)
        capture.close()


def _write_stats(capture: Capture) -> None:
    """KDB_CAPTURE_STATS=DIR: each process leaves DIR/<pid>.json with its counters (lookups, hits, misses,
    puts, commits, …): how a test or a job tells that a second run compiled nothing."""
    target = os.environ.get("KDB_CAPTURE_STATS")
    if target:
        import json

        Path(target).mkdir(parents=True, exist_ok=True)
        body = {"pid": os.getpid(), "tag": capture.layout.tag, "broken": _broken, **capture.stats}
        (Path(target) / f"{os.getpid()}.json").write_text(json.dumps(body, sort_keys=True))


def stats() -> dict[str, Any]:
    return dict(_capture.stats) if _capture is not None else {}
