"""The store behind kdb's Triton cache manager: one per process, shared by every CacheManager Triton makes.

A put writes the file into this process's own folder (the path Triton is given back and reads from), then
links it into the spool; a finished compile (its group file) makes its folder whole, and whole folders are
recorded by `commit`: stored in the blob store and analysed exactly as `kdb ingest` does (it is the same
ingest, appending to the capture's snapshot), listed in the index and kept as the served folder (the spooled
files themselves) that later reads get: kdb/capture/served.py. A read looks in this process's folder, the
spool, then the index (its served folder, else a blob checked against its digest, written to this folder).

Waiting is bounded: a commit after a compile only runs if no other process of the tag is committing and
the catalog is free at once; the one at exit waits KDB_CAPTURE_WAIT seconds. Whatever stays spooled (a
process killed, a forked worker ended by `os._exit`, the catalog busy) is recorded by the next commit of any
process, by `kdb capture commit`, or by any command that reads the tag: nothing put is lost.

A capture appends only to a snapshot it made (labelled captured_by=kdb.capture): a tag `kdb ingest` made is
never changed. Each kind of problem (kdb unusable, the store damaged, a commit failing) is said once per
process on stderr.
"""

from __future__ import annotations

import atexit
import contextlib
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

# the recording, and what commands ask of it, at the path they have always been imported from
from kdb.capture.recording import CAPTURED_BY as CAPTURED_BY
from kdb.capture.recording import RECORD_BEFORE_READ_WAIT_S as RECORD_BEFORE_READ_WAIT_S
from kdb.capture.recording import ForeignSnapshot as ForeignSnapshot
from kdb.capture.recording import check_own_snapshot, detach_commit, one_line, record
from kdb.capture.recording import record_waiting as record_waiting
from kdb.capture.recording import status_lines as status_lines
from kdb.capture.served import ServedFolders
from kdb.errors import CatalogBusy, IntegrityError, KdbError
from kdb.store.home import Home, resolve_home, resolve_shared
from kdb.store.spool import SpoolLayout, capture_root
from kdb.store.spool_index import DamagedIndexEntry
from kdb.store.spool_names import GROUP_PREFIX, check_name, is_kernel_file
from kdb.store.spool_upkeep import remove_dead_process_folders

T = TypeVar("T")
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


class Capture:
    """What one process captured and was served, and how (the counters)."""

    def __init__(self, home: Home | None = None, tag: str | None = None, *, check_snapshot: bool = True) -> None:
        self.home = home or open_home()
        self.layout = SpoolLayout(capture_root(self.home), tag or os.environ.get("KDB_CAPTURE_TAG") or default_tag())
        self.wait_s = float(os.environ.get("KDB_CAPTURE_WAIT", DEFAULT_WAIT_S))
        if check_snapshot and not self.layout.owned.exists():
            # said before anything is spooled; a busy catalog leaves it to the commit, which checks again
            with contextlib.suppress(CatalogBusy):
                check_own_snapshot(self.home, self.layout.tag, wait_s=0.0)
        self._proc = None if self.home.is_shared else self.layout.root / "proc"
        if self._proc is not None:
            self._proc.mkdir(parents=True, exist_ok=True)
            remove_dead_process_folders(self._proc)
        self._mine: Path | None = None
        self._mine_pid = 0
        self._writing: dict[str, tuple[int, Path]] = {}  # cache key -> the lock saying this process writes it
        self.stats: Counter[str] = Counter()
        self.adopted: set[str] = set()
        self._order: dict[str, list[str]] = {}  # cache key -> file names in the order this process put them
        self._index: dict[str, dict] = {}  # index entries read (a recorded folder's entry never changes)
        self._unservable: set[str] = set()  # cache keys whose entry or blob this process found damaged
        self.served = ServedFolders(self.layout)  # recorded folders' own files, what a hit returns
        self._waiting_s = (str(self.layout.spool), str(self.layout.commit))
        self.detached: int | None = None  # the process id of a commit left to run after this process
        self._lock = threading.Lock()
        self.every_s = float(os.environ.get("KDB_CAPTURE_COMMIT_EVERY", DEFAULT_COMMIT_EVERY_S))
        self._last_commit = -self.every_s
        self._committer: threading.Thread | None = None
        # The ingest (duckdb) is imported by the first commit (`group_written`); else the exit commit detaches

    def forked(self) -> None:
        """In a child made by fork (a `multiprocessing` worker): the parent's threads and locks are not the
        child's, nor are its counters; the writer locks it holds stay the parent's (closing the child's copies
        leaves them held by the parent); the child gets its own folder at its first file."""
        self._lock = threading.Lock()
        self.served.forked()
        self._committer = None
        self.stats = Counter()
        for fd, _ in self._writing.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._writing = {}

    # -- files ---------------------------------------------------------------------------------------
    @property
    def mine(self) -> Path:
        """This process's folder, whose paths Triton is given: linked into the spool where it can be (the same
        file system; a shared home's is local to the host). A forked child makes its own."""
        if self._mine is None or self._mine_pid != os.getpid():
            self._mine = Path(tempfile.mkdtemp(prefix=f"kdb-capture-{os.getpid()}-", dir=self._proc))
            self._mine_pid = os.getpid()
        return self._mine

    def _own(self, key: str, name: str) -> Path:
        return self.mine / check_name(key, "cache key") / check_name(name)

    def put(self, key: str, name: str, data: bytes) -> Path:
        if len(data) > MAX_FILE_BYTES:
            raise KdbError(f"{key}/{name}: {len(data)} bytes, over the {MAX_FILE_BYTES}-byte limit of a cache file")
        path = self._own(key, name)
        write_whole(path, data)
        group = name.startswith(GROUP_PREFIX)
        if not group and is_kernel_file(name):
            with self._lock:
                writing = key in self._writing
            if not writing:  # before the folder's first file is in the spool: never a folder nobody owns
                lock = self.layout.start_writing(key)
                with self._lock:
                    self._writing[key] = lock
        self.layout.install(path, key, name)
        if group:  # the compile finished: the folder is whole
            with self._lock:
                held = self._writing.pop(key, None)
            if held is not None:
                self.layout.done_writing(*held)
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

    def get(self, key: str, name: str) -> Path | str | None:
        """The file's path: its served folder's, or this process's folder's (from the spool or a blob); None: a miss."""
        with self._lock:
            self.stats["lookups"] += 1
        served = self.served.known(key, name)  # checked by this process: one stat
        if served is not None:
            self._count("hits")
            return served
        if self._mine is None or self._mine_pid != os.getpid():  # no folder of its own yet: nothing there
            check_name(key, "cache key"), check_name(name)
        elif (path := self._own(key, name)).exists():
            self._count("hits")
            return path
        # Spooled, then being recorded (a commit moves the folder spool -> commit -> index, in that order): a
        # file is always in one of the three places, whichever moment the lookup looks.
        for folder in self._waiting_s:  # (strings: pathlib's joins cost more than the stats on this path)
            if os.path.exists(found := os.path.join(folder, key, name)) and bring(found, path := self._own(key, name)):
                self._count("hits")
                return path
        if key in self._unservable:  # found damaged by an earlier lookup: Triton compiles it
            self._count("misses")
            return None
        if (entry := self._index.get(key)) is None:
            try:
                entry = self.layout.read_index(key)  # served only when its files hash to its folder digest
            except DamagedIndexEntry as exc:
                self._found_damaged(key, str(exc))
                return None
        if entry is not None:
            self._index[key] = entry
        if entry is None or name not in entry["files"]:
            self._count("misses")
            return None
        digest, size = entry["files"][name]
        served, problem = self.served.check(key, entry)
        if problem is not None:
            self._count("served_damaged")
            damaged(f"capture served file {problem}; served from the blob store")
        if served is not None:
            self._count("hits")
            self._count("served")
            self._adopt(key, entry)
            return os.path.join(served, name)
        try:
            data = self.home.store.get(digest, size)
        except (IntegrityError, OSError) as exc:
            self._index.pop(key, None)
            if self.home.store.has(digest):  # there, and not what its name says: Triton never gets it
                self._found_damaged(key, str(exc))
            else:  # its snapshot removed and collected: the entry is stale
                self._count("misses")
                self._count("stale_index")
                self.layout.index_path(key).unlink(missing_ok=True)
            return None
        write_whole(path := self._own(key, name), data)
        self._count("hits")
        self._count("store_reads")
        self._adopt(key, entry)
        return path

    def _adopt(self, key: str, entry: dict) -> None:
        if key not in self.adopted:
            self.adopted.add(key)
            self.layout.note_adopted(key, entry["folder_digest"])

    def _found_damaged(self, key: str, what: str) -> None:
        """A folder the index names that cannot be served intact: a miss now and at every later lookup of this
        process (Triton compiles it; its commit replaces the damaged blob and writes the entry again)."""
        with self._lock:
            self._unservable.add(key)
            self.stats["misses"] += 1
            self.stats["damaged"] += 1
        damaged(what)

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
            # the ingest's pool modules register atexit hooks, refused once the interpreter shuts down: import now
            import concurrent.futures.process  # noqa: F401
            import concurrent.futures.thread  # noqa: F401

            self._committer = threading.Thread(target=self._commit_quietly, name="kdb-capture-commit", daemon=True)
            self._committer.start()

    def _commit_quietly(self) -> None:
        try:
            self.commit(wait_s=0.0)
        except CatalogBusy:
            self._count("commits_deferred")
        except ForeignSnapshot as exc:  # made by `kdb ingest` since this process looked: kdb stops here
            self._count("commits_failed")
            give_up(str(exc))
        except Exception as exc:  # noqa: BLE001 - a failed commit loses nothing (the folders stay spooled)
            self._count("commits_failed")
            say("failure", f"recording failed ({one_line(exc)}); {self._stay_spooled()}")
        _write_stats(self)

    def _stay_spooled(self) -> str:
        return f"the files stay spooled (`kdb capture commit --tag {self.layout.tag}` records them)"

    def finish(self) -> None:
        """At exit: the running commit finishes (up to KDB_CAPTURE_WAIT), then one last commit records the rest;
        a process that never committed (only served) leaves it to a detached `kdb capture commit` (what it cannot
        record waits for the next commit or reader: nothing is lost)."""
        committer = self._committer
        if committer is not None:
            committer.join(self.wait_s)
        if {"kdb.ingest.snapshot", "kdb.store.catalog"} <= sys.modules.keys():  # a commit ran: imported
            self.commit(wait_s=self.wait_s)
        elif self.adopted or self.layout.waiting():
            self.detached = detach_commit(self.layout)

    # -- recording -----------------------------------------------------------------------------------
    def commit(self, wait_s: float) -> int:
        """Record every whole spooled folder and every adopted one in the tag's snapshot; return how many
        folders were recorded. CatalogBusy when another committer of the tag or a writer of the catalog held
        on longer than `wait_s`, ForeignSnapshot when the tag is a snapshot capture did not make (nothing is
        lost: the folders stay spooled)."""
        keys, adopted = record(self.home, self.layout, wait_s, index_wait_s=self.wait_s)
        if keys or adopted:
            self._count("commits")
            with self._lock:
                self.stats["folders_committed"] += len(keys)
        return len(keys) + len(adopted)

    def close(self) -> None:
        """This process's writer locks go (a folder it did not finish is then one its writer left) and its
        folder (a forked child's parent keeps its own)."""
        with self._lock:
            writing, self._writing = self._writing, {}
        for fd, path in writing.values():
            with contextlib.suppress(OSError):
                self.layout.done_writing(fd, path)
        if self._mine is not None and self._mine_pid == os.getpid():
            shutil.rmtree(self._mine, ignore_errors=True)


def write_whole(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    temp.write_bytes(data)
    os.replace(temp, path)


def bring(source: str, path: Path) -> bool:
    """Link (else copy) a spooled file into this process's folder; False when it is not there (any more)."""
    if not os.path.exists(source):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, path)
    except FileExistsError:
        pass
    except OSError:  # moved on meanwhile, or another file system: copy what can still be read
        try:
            write_whole(path, Path(source).read_bytes())
        except FileNotFoundError:  # gone meanwhile: not there
            return False
    return path.exists()


# -- the process's one capture, and what happens when kdb fails ----------------------------------------
_capture: Capture | None = None
_broken: str | None = None
_fallback: Path | None = None
_guard_lock = threading.Lock()
_said: set[str] = set()  # the kinds of problem this process said on stderr


def _after_fork_in_child() -> None:
    """A forked child (a `multiprocessing` worker) starts with the parent's locks as they were at the fork."""
    global _guard_lock
    _guard_lock = threading.Lock()
    if _capture is not None:
        _capture.forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


def say(kind: str, text: str) -> None:
    """One line on stderr for each kind of problem, once per process: kdb unusable or failing to record
    ("failure": on a full disk every write fails the same way), the store damaged, a commit left for later."""
    with _guard_lock:
        if kind in _said:
            return
        _said.add(kind)
    print(f"kdb capture: {text}", file=sys.stderr)


def give_up(reason: str) -> None:
    """kdb stops serving and capturing in this process (said once); Triton goes on with a private folder."""
    global _broken
    with _guard_lock:
        if _broken is None:
            _broken = reason
    say("failure", f"{reason}; Triton goes on without kdb's cache in this process")


def damaged(what: str) -> None:
    say(
        "damaged",
        f"the store is damaged ({what}); Triton compiles what kdb cannot serve intact (`kdb verify` names the damage)",
    )


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
    """Run `action` on the process's capture; any failure of kdb's (store, catalog, shared home, a full disk,
    a tag capture may not add to) is said once on stderr and the process goes on without kdb: `fallback`
    answers (a miss, a private file)."""
    try:
        capture = current()
        if capture is not None:
            return action(capture)
    except Exception as exc:  # noqa: BLE001 - a kdb problem must never break the user's compile
        give_up(str(exc) if isinstance(exc, ForeignSnapshot) else one_line(exc))
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
        tag = capture.layout.tag
        say(
            "busy",
            f"{exc}; {left} folders stay spooled for the next commit (`kdb capture commit --tag {tag}` records them)",
        )
    except ForeignSnapshot as exc:
        give_up(str(exc))
    except Exception as exc:  # noqa: BLE001 - at exit too: say it, never raise into the interpreter's shutdown
        say("failure", f"recording failed ({one_line(exc)}); {capture._stay_spooled()}")
    finally:
        _write_stats(capture)
        capture.close()


def _write_stats(capture: Capture) -> None:
    """KDB_CAPTURE_STATS=DIR: each process leaves DIR/<pid>.json with its counters (lookups, hits, misses,
    puts, commits, damaged, …): how a test or a job tells that a second run compiled nothing."""
    target = os.environ.get("KDB_CAPTURE_STATS")
    if target:
        import json

        Path(target).mkdir(parents=True, exist_ok=True)
        body = {"pid": os.getpid(), "tag": capture.layout.tag, "broken": _broken, **capture.stats}
        (Path(target) / f"{os.getpid()}.json").write_text(json.dumps(body, sort_keys=True))


def stats() -> dict[str, Any]:
    return dict(_capture.stats) if _capture is not None else {}
