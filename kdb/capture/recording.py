"""Recording what a capture spooled, outside any capture process too (`kdb capture commit`, a command about to read a
tag): the same ingest as `kdb ingest`, appending to the capture's snapshot, then the index that serves later reads
(kdb/capture/cache.py: module docstring)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence

from kdb.errors import CatalogBusy, KdbError, NotAppendable, TagError
from kdb.store.home import Home
from kdb.store.lock import write_lock
from kdb.store.spool import SpoolLayout, capture_root, serve, served_stamps
from kdb.store.spool_index import index_entries
from kdb.store.spool_upkeep import capture_tags, died_phrase

# How long a command about to read a tag waits to record what captures left for it, before it says how many
# folders wait instead (the catalog busy with a long ingest; a commit of the tag by a capture takes ~1 s).
RECORD_BEFORE_READ_WAIT_S = 5.0
# The label a capture's snapshot is made with: capture appends only to snapshots that carry it.
CAPTURED_BY = ("captured_by", "kdb.capture")


class ForeignSnapshot(TagError):
    """KDB_CAPTURE_TAG names a snapshot that capture did not make (`kdb ingest`, or a transfer of one): capture
    never adds kernels of another compile to it."""


def record(
    home: Home, layout: SpoolLayout, wait_s: float, *, index_wait_s: float | None = None
) -> tuple[list[str], list[tuple[str, str]]]:
    """Record the whole spooled folders of `layout`'s tag and the folders its processes adopted, into the tag's
    snapshot (made, labelled as a capture's, when there is none): the same ingest as `kdb ingest`, appending.
    Return (cache keys recorded, adopted (cache key, folder digest) pairs). One committer per tag at a time."""
    # imported where a commit runs, not at import; both now: a process's last commit runs at exit, when Python
    # refuses the atexit hooks that importing them (concurrent.futures, duckdb) registers (kdb/capture/cache.py)
    import kdb.store.catalog  # noqa: F401
    from kdb.ingest.snapshot import IngestRequest, ingest

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
            return [], []
        try:
            check_own_snapshot(home, layout.tag, wait_s, writing=True)  # before anything joins it
        except ForeignSnapshot:
            layout.owned.unlink(missing_ok=True)
            raise
        try:
            request = IngestRequest(
                layout.commit,
                layout.tag,
                labels=dict([CAPTURED_BY]),
                workers=1,
                lock_wait_s=wait_s,
                rehash=True,
                append=adopted,
            )
            ingest(home, request)
        except NotAppendable as exc:  # `kdb ingest` made the tag between the check above and the commit
            layout.owned.unlink(missing_ok=True)
            raise ForeignSnapshot(str(exc)) from None
        layout.owned.parent.mkdir(parents=True, exist_ok=True)
        layout.owned.touch()
        _write_index(home, layout, keys, wait_s if index_wait_s is None else index_wait_s)
        shutil.rmtree(layout.commit, ignore_errors=True)
        layout.adopted_done()
        return keys, adopted


def _write_index(home: Home, layout: SpoolLayout, keys: list[str], wait_s: float) -> None:
    from kdb.store.catalog import Catalog

    with Catalog.open(home.catalog, read_only=True, wait_s=wait_s) as catalog:
        rows = catalog.queries.capture_index(layout.tag, keys)
    folders: dict[str, tuple[str, dict[str, tuple[str, int]]]] = {}
    for key, folder_digest, name, digest, size in rows:
        folders.setdefault(key, (folder_digest, {}))[1][name] = (digest, size)
    for key, (folder_digest, files) in folders.items():
        # the recorded files stay, served as they are (kdb/store/spool.py), then the entry names them
        entry = {"folder_digest": folder_digest, "files": files}
        serve(layout, layout.commit / key, key, entry)
        stamps = served_stamps(layout.served_path(key, folder_digest), files)
        layout.write_index(key, folder_digest, files, stamps)


def check_own_snapshot(home: Home, tag: str, wait_s: float, *, writing: bool = False) -> None:
    """ForeignSnapshot when `tag` is a snapshot capture did not make. `writing`: the commit's check, which
    may migrate the catalog first (a read-only open refuses an old one); else a read-only look, and only
    ForeignSnapshot or CatalogBusy come out (whatever else keeps it from looking, the commit checks again)."""
    from kdb.store.catalog import Catalog

    if not home.has_catalog():
        return  # the commit makes it, and the snapshot with capture's label
    try:
        if writing:
            with home.writer(wait_s), Catalog.open(home.catalog, wait_s=wait_s) as catalog:
                labels = catalog.queries.get_snapshot(tag)["labels"] if catalog.snapshot_id(tag) is not None else None
        else:
            with Catalog.open(home.catalog, read_only=True, wait_s=wait_s) as catalog:
                labels = catalog.queries.get_snapshot(tag)["labels"] if catalog.snapshot_id(tag) is not None else None
    except CatalogBusy:
        raise
    except Exception:  # noqa: BLE001 - only the look is given up: the commit opens the catalog itself and says why
        if writing:
            raise
        return
    if labels is not None and dict(labels).get(CAPTURED_BY[0]) != CAPTURED_BY[1]:
        raise ForeignSnapshot(
            f"snapshot {tag!r} was not made by a capture (it has no captured_by=kdb.capture label): capture adds "
            "kernels only to snapshots it made; set KDB_CAPTURE_TAG to a new tag"
        )


def record_waiting(home: Home, tags: Sequence[str] | None, wait_s: float) -> list[str]:
    """Before a command reads `tags` (None: every tag): record what captures left waiting for them (processes
    killed or ended by `os._exit`, a commit deferred). Returns one line for each tag whose waiting folders could
    not be recorded (the catalog busy, the tag a snapshot capture did not make), saying how many wait and how to
    record them; the command then reads what is recorded."""
    root = capture_root(home)
    if not root.is_dir():
        return []
    known = capture_tags(root)
    wanted = known if tags is None else [t for t in dict.fromkeys(tags) if t in known]
    notices = []
    for tag in wanted:
        layout = SpoolLayout(root, tag)
        waiting = len(layout.waiting() | layout.adopted_waiting())
        if not waiting:
            continue
        how = f"`kdb capture commit --tag {tag}` records them"
        try:
            record(home, layout, wait_s)
        except ForeignSnapshot as exc:
            notices.append(f"{waiting} captured folders wait for {tag} and cannot join it: {exc}")
        except CatalogBusy:
            notices.append(f"{waiting} captured folders wait for {tag} (the catalog is busy): {how}")
        except (KdbError, OSError) as exc:
            notices.append(f"{waiting} captured folders wait for {tag} ({one_line(exc)}): {how}")
    return notices


def status_lines(home: Home, tag: str) -> list[str]:
    """`kdb capture status`: what waits, what is being written, what a dead writer left, what the index serves."""
    layout = SpoolLayout(capture_root(home), tag)
    alive, died = layout.unfinished()
    waiting = layout.waiting() | layout.adopted_waiting()
    served = sum(1 for _ in index_entries(layout.root))
    lines = [
        f"{tag}: {len(waiting)} whole folders wait to be recorded, {len(alive)} still being written, "
        f"{len(died)} left by a writer that died mid-compile (`kdb gc` removes them); the index serves "
        f"{served} folders (all tags)"
    ]
    lines += [f"  {key} {died_phrase(pids)}" for key, pids in died.items()]
    return lines


_DETACHED: list = []


def detach_commit(layout: SpoolLayout) -> int | None:
    """Start `kdb capture commit --tag TAG` at low priority in its own session, its output discarded (what it
    cannot record stays waiting, and `kdb capture status` names it); return its process id. None: one started by
    another process is still running — it, or the next commit or reader, records this process's folders too (a
    fleet of serving processes exiting together starts one committer, not one each)."""
    import subprocess
    import sys

    marker = layout.lock.with_suffix(".detached")
    with contextlib.suppress(OSError, ValueError):
        if _alive(int(marker.read_text())):
            return None
    env = {k: v for k, v in os.environ.items() if k not in ("KDB_CAPTURE_STATS", "TRITON_CACHE_MANAGER")}
    code = "import os, sys; os.nice(10); from kdb.cli import main; sys.argv[0] = 'kdb'; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "capture", "commit", "--tag", layout.tag],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    _DETACHED.append(proc)  # held: it outlives this process on purpose, and is never waited for
    with contextlib.suppress(OSError):
        marker.parent.mkdir(parents=True, exist_ok=True)
        temp = marker.with_name(f".{marker.name}.{os.getpid()}")
        temp.write_text(str(proc.pid))
        os.replace(temp, marker)
    return proc.pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that number
        return True
    return pid > 0


def one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
