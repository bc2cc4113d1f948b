"""Ingest orchestration: walk a cache, store every file's bytes, analyse kernel folders, record one snapshot.

Order matters for crash safety: blobs are written (atomically) first, the catalog last, in one
transaction. A kill at any point leaves at worst unreferenced blobs, which `kdb gc` sweeps.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kdb import __version__
from kdb.analysis import (
    ANALYSIS_TABLES,
    TABLE_COLUMNS,
    AnalysisOptions,
    FolderAnalysis,
    FolderFile,
    analyze_folder,
)
from kdb.catalog import Catalog, Staging, Table
from kdb.errors import InputError, TagError, UsageError
from kdb.home import Home
from kdb.lock import write_lock
from kdb.store import STREAM_THRESHOLD, BlobStore, hash_bytes
from kdb.walker import Walk, WalkedFile, kernel_json, walk_cache

# Real Triton artifacts are at most a few MB; a file this large is not one of them.
DEFAULT_MAX_FILE_BYTES = 1 << 30
# Below this many files a worker pool costs more than it saves.
POOL_MIN_FILES = 200

BLOB_COLUMNS = ["hash", "size", "stored_size"]
FOLDER_COLUMNS = ["folder_digest", "cache_key", "file_count", "bytes"]
FOLDER_FILE_COLUMNS = ["folder_digest", "name", "hash", "size", "kind"]
FOLDER_SET_COLUMNS = ["cache_key", "folder_digest"]  # the set digest is computed when the snapshot is written
TOP_FILE_COLUMNS = ["snapshot_id", "path", "hash", "size", "kind"]
KERNEL_COLUMNS = [
    "folder_digest", "cache_key", "name", "backend", "arch", "warp_size", "num_warps", "num_stages", "num_ctas",
    "waves_per_eu", "matrix_instr_nonkdim", "kpack", "shared", "triton_version", "triton_version_source",
    "hash", "metadata", "metadata_digest",
]
PROBLEM_COLUMNS = ["snapshot_id", "path", "cache_key", "stage", "reason"]
# Rows an ingest stages (kdb/catalog.py Staging) before one transaction moves them into the catalog.
STAGED_COLUMNS: dict[str, list[str]] = {
    "blobs": BLOB_COLUMNS, "folders": FOLDER_COLUMNS, "folder_files": FOLDER_FILE_COLUMNS,
    "folder_sets": FOLDER_SET_COLUMNS, "top_files": TOP_FILE_COLUMNS, "kernel_folders": KERNEL_COLUMNS,
    "file_problems": PROBLEM_COLUMNS, **TABLE_COLUMNS,
}
# Rows held in memory before they are spilled to the staging file.
FLUSH_ROWS = 50_000



@dataclass
class GroupResult:
    cache_key: str | None
    folder_digest: str | None = None
    known: bool = False  # the catalog holds this folder already: nothing stored, nothing analysed
    files: list[dict[str, Any]] = field(default_factory=list)  # name (relative to the folder), hash, size, kind
    blobs: list[dict[str, Any]] = field(default_factory=list)
    analysis: FolderAnalysis | None = None
    problems: list[tuple[str, str | None, str, str]] = field(default_factory=list)  # read problems
    new_bytes: int = 0
    bytes_read: int = 0


def folder_digest(cache_key: str, files: list[tuple[str, str]]) -> str:
    """Content address of a cache folder: its name and its (relative name, blob hash) pairs."""
    h = hashlib.sha256(cache_key.encode() + b"\0")
    for name, digest in sorted(files):
        h.update(name.encode() + b"\0" + digest.encode() + b"\n")
    return h.hexdigest()


@dataclass(frozen=True)
class IngestSummary:
    tag: str
    source: str
    kernels: int
    files: int
    raw_bytes: int
    new_bytes: int
    stored_bytes: int
    problems: int
    seconds: float
    problem_list: list[dict[str, Any]]


def _store_group(store_root: str, cache_key: str | None, files: list[WalkedFile], max_bytes: int,
                 analyze: bool, known: frozenset[str], options: AnalysisOptions) -> GroupResult:
    """Runs in a worker: hash a folder's files; unless the catalog knows the folder, store and analyse it."""
    store = BlobStore(Path(store_root))
    out = GroupResult(cache_key)
    read: list[tuple[WalkedFile, bytes | None, str]] = []
    for f in files:
        if f.size > max_bytes:
            out.problems.append((f.rel, cache_key, "read", f"{f.size} bytes is larger than --max-file-size; not stored"))
            continue
        try:
            if f.size > STREAM_THRESHOLD:  # stored while hashed, in streaming passes
                put = store.put_file(f.abspath, f.size)
                read.append((f, None, put.digest))
                out.blobs.append({"hash": put.digest, "size": put.size, "stored_size": put.stored_size})
                out.new_bytes += put.stored_size if put.new else 0
                continue
            with open(f.abspath, "rb") as fh:
                data = fh.read(max_bytes + 1)
        except OSError as exc:
            out.problems.append((f.rel, cache_key, "read", f"cannot read: {exc.strerror or exc}"))
            continue
        read.append((f, data, hash_bytes(data)))
    prefix = "" if cache_key is None else cache_key + "/"
    for f, data, digest in read:
        size = len(data) if data is not None else f.size
        out.files.append({"name": f.rel[len(prefix):], "hash": digest, "size": size, "kind": f.kind})
        out.bytes_read += size
    if cache_key is not None:
        out.folder_digest = folder_digest(cache_key, [(r["name"], r["hash"]) for r in out.files])
        out.known = out.folder_digest in known
    if out.known:
        return out
    contents: list[FolderFile] = []
    for f, data, digest in read:
        if data is None:
            continue
        put = store.put_bytes(data, digest)
        out.blobs.append({"hash": put.digest, "size": put.size, "stored_size": put.stored_size})
        out.new_bytes += put.stored_size if put.new else 0
        contents.append(FolderFile(f.rel, f.kind, data))
    if analyze and cache_key is not None and out.folder_digest is not None:
        json_file = kernel_json(files)
        json_contents = next((c for c in contents if json_file and c.rel == json_file.rel), None)
        if json_contents is not None:
            out.analysis = analyze_folder(cache_key, out.folder_digest, json_contents, contents, options)
    return out


def _groups(files: list[WalkedFile]) -> list[tuple[str | None, list[WalkedFile], bool]]:
    by_folder: dict[str | None, list[WalkedFile]] = {}
    for f in files:
        by_folder.setdefault(f.folder, []).append(f)
    groups = []
    for folder, group in sorted(by_folder.items(), key=lambda kv: kv[0] or ""):
        groups.append((folder, group, folder is not None and kernel_json(group) is not None))
    return groups


def _die_with_parent(parent_pid: int) -> None:
    """Worker initializer: exit when the ingest process dies (e.g. SIGKILL).

    An orphaned worker would go on storing blobs and running nvdisasm for an ingest that can no longer
    record them (and, when workers were forked, it held write.lock, leaving every later writer of this
    home "catalog busy"); it should stop when the ingest does.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent_pid:  # the parent died before prctl took effect
                os._exit(1)
            return
    except (OSError, AttributeError):
        pass

    def watch() -> None:  # no prctl (not Linux): poll for the parent instead
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _run_groups(store_root: Path, groups: list[tuple[str | None, list[WalkedFile], bool]], max_bytes: int,
                workers: int, known: dict[str, frozenset[str]], options: AnalysisOptions) -> Iterator[GroupResult]:
    total_files = sum(len(g[1]) for g in groups)
    if workers <= 1 or total_files < POOL_MIN_FILES:
        for key, files, analyze in groups:
            yield _store_group(str(store_root), key, files, max_bytes, analyze, known.get(key, frozenset()), options)
        return
    # A bounded window of tasks in flight, results handed on and dropped in order: memory stays flat
    # however many folders the cache holds (a list of all futures would keep every result alive).
    window = 8 * workers
    # Spawned, not forked: a forked worker starts with a copy of this process (the walk of a 10k-kernel
    # cache, the staging buffers), and copy-on-write turns those pages private as refcounts change;
    # measured at 10k kernels, two forked workers held ~260 MB PSS, two spawned ones ~150 MB.
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_die_with_parent, initargs=(os.getpid(),)) as pool:
        pending: deque[Future[GroupResult]] = deque()
        for key, files, analyze in groups:
            pending.append(pool.submit(_store_group, str(store_root), key, files, max_bytes, analyze,
                                       known.get(key, frozenset()), options))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def validate_tag(tag: str) -> str:
    if not tag or not tag.strip() or tag != tag.strip() or any(c in tag for c in "\n\r\t"):
        raise UsageError(f"invalid tag {tag!r}: use a non-empty name without surrounding spaces")
    return tag


def parse_labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"invalid label {pair!r}: expected key=value")
        labels[key] = value
    return labels


def ingest(home: Home, source: Path, tag: str, *, labels: dict[str, str] | None = None, replace: bool = False,
           workers: int | None = None, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
           progress: Callable[[int, int, int, int], None] | None = None, lock_wait_s: float = 600.0,
           options: AnalysisOptions = AnalysisOptions()) -> IngestSummary:
    validate_tag(tag)
    started = time.monotonic()
    walk = walk_cache(source)
    groups = _groups(walk.files)
    if not any(analyze for _, _, analyze in groups):
        raise InputError(f"{source}: no Triton kernel folders found (expected folders holding NAME.json beside NAME.ttir/…)")
    workers = workers or os.cpu_count() or 1

    with write_lock(home.lock_path, lock_wait_s):
        with Catalog.open(home.catalog_path, wait_s=lock_wait_s) as catalog:
            if catalog.snapshot_id(tag) is not None and not replace:
                raise TagError(f"tag {tag!r} exists already (use --replace to overwrite it)")
            known = catalog.known_folders([key for key, _, _ in groups if key is not None])
            schema = catalog.staging_schema(STAGED_COLUMNS)
        home.store.ensure()
        staging = Staging(home.staging_path, schema)
        try:
            totals = _store_and_stage(home, staging, walk, groups, known, workers, max_file_bytes, progress, options)
            staging.close()
            home.store.durable()
            snapshot = {
                "tag": tag,
                "created_at": datetime.now(timezone.utc).replace(tzinfo=None),
                "source_path": str(source.resolve()),
                "host": socket.gethostname(),
                "kdb_version": __version__,
                "labels": labels or {},
                **totals,
            }
            with Catalog.open(home.catalog_path, wait_s=lock_wait_s) as catalog:
                catalog.write_snapshot(snapshot, staging.path, replace=replace)
                recorded = catalog.get_snapshot(tag)
                problem_list = catalog.snapshot_problems(tag)
        finally:
            staging.remove()
    return IngestSummary(
        tag=tag, source=str(source), kernels=recorded["kernel_count"], files=totals["file_count"],
        raw_bytes=totals["raw_bytes"], new_bytes=totals["new_bytes"], stored_bytes=recorded["stored_bytes"],
        problems=len(problem_list), seconds=time.monotonic() - started, problem_list=problem_list,
    )


def _store_and_stage(home: Home, staging: Staging, walk: Walk, groups: list[tuple[str | None, list[WalkedFile], bool]],
                     known: dict[str, frozenset[str]], workers: int, max_file_bytes: int,
                     progress: Callable[[int, int, int, int], None] | None, options: AnalysisOptions) -> dict[str, int]:
    """Store every file and stage every row; return the snapshot's file count and byte totals."""
    tables = {name: Table(name, columns) for name, columns in STAGED_COLUMNS.items()}
    for p in walk.problems:
        tables["file_problems"].add(path=p.rel, cache_key=p.rel.split("/", 1)[0] if "/" in p.rel else None,
                                    stage="walk", reason=p.reason)
    total_files = len(walk.files)
    total_bytes = sum(f.size for f in walk.files)
    totals = {"file_count": 0, "raw_bytes": 0, "new_bytes": 0}
    done_files = 0
    for result in _run_groups(home.store.root, groups, max_file_bytes, workers, known, options):
        for row in result.blobs:
            tables["blobs"].add(**row)
        for path, key, stage, reason in result.problems:
            tables["file_problems"].add(path=path, cache_key=key, stage=stage, reason=reason)
        if result.cache_key is None:
            for row in result.files:
                tables["top_files"].add(path=row["name"], hash=row["hash"], size=row["size"], kind=row["kind"])
        elif result.files:
            tables["folder_sets"].add(cache_key=result.cache_key, folder_digest=result.folder_digest)
            if not result.known:
                tables["folders"].add(folder_digest=result.folder_digest, cache_key=result.cache_key,
                                      file_count=len(result.files), bytes=result.bytes_read)
                for row in result.files:
                    tables["folder_files"].add(folder_digest=result.folder_digest, **row)
        if result.analysis is not None and result.analysis.kernel is not None:
            tables["kernel_folders"].add(**result.analysis.kernel)
            for name, rows in result.analysis.rows.items():
                for row in rows:
                    tables[name].add(**row)
        totals["new_bytes"] += result.new_bytes
        totals["raw_bytes"] += result.bytes_read
        totals["file_count"] += len(result.files)
        done_files += len(result.files) + sum(1 for p in result.problems if p[2] == "read")
        if progress:
            progress(done_files, total_files, totals["raw_bytes"], total_bytes)
        if sum(len(t) for t in tables.values()) >= FLUSH_ROWS:
            _flush(staging, tables)
    _flush(staging, tables)
    return totals


def _flush(staging: Staging, tables: dict[str, Table]) -> None:
    for table in tables.values():
        if len(table):
            staging.add(table)
            table.clear()


def analysis_rows_to_tables(rows_by_table: dict[str, list[dict[str, Any]]]) -> list[Table]:
    from kdb.analysis import TABLE_COLUMNS

    tables = []
    for name in ANALYSIS_TABLES:
        table = Table(name, TABLE_COLUMNS[name])
        for row in rows_by_table.get(name, []):
            table.add(**row)
        tables.append(table)
    return tables


def reindex(home: Home, tags: list[str] | None, *, lock_wait_s: float = 600.0) -> dict[str, int]:
    """Recompute the analysis of every kernel folder of the given snapshots (all when None) from the stored blobs."""
    store = home.store
    done: dict[str, int] = {}
    with write_lock(home.lock_path, lock_wait_s):
        with Catalog.open(home.catalog_path, wait_s=lock_wait_s) as catalog:
            tags = tags or [s["tag"] for s in catalog.list_snapshots()]
            digests: dict[str, str] = {}  # folder digest -> cache key, each analysed once
            for tag in tags:
                folders = catalog.kernel_folders_of(tag)
                digests.update((digest, key) for key, digest in folders)
                done[tag] = len(folders)
            kernels = Table("kernel_folders", KERNEL_COLUMNS)
            rows: dict[str, list[dict[str, Any]]] = {}
            for digest, cache_key in sorted(digests.items()):
                files = [FolderFile(f"{cache_key}/{r['name']}", r["kind"], store.get(r["hash"], r["size"]))
                         for r in catalog.folder_files(digest)]
                walked = [WalkedFile(f.rel, Path(), len(f.data), f.kind, cache_key) for f in files]
                json_file = kernel_json(walked)
                if json_file is None:
                    continue
                result = analyze_folder(cache_key, digest, next(f for f in files if f.rel == json_file.rel), files)
                if result.kernel is not None:
                    kernels.add(**result.kernel)
                for table, table_rows in result.rows.items():
                    rows.setdefault(table, []).extend(table_rows)
            catalog.replace_folder_rows(sorted(digests), [kernels, *analysis_rows_to_tables(rows)])
    return done
