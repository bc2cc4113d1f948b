"""The part of an ingest that runs in worker processes: hash a folder's files, store the new ones, analyse them."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdb.analysis.folder import FolderJob, analyze_folders
from kdb.analysis.model import AnalysisOptions, FolderAnalysis, FolderFile
from kdb.ingest.columns import STAGED_COLUMNS, compact_rows
from kdb.ingest.walker import WalkedFile, kernel_json
from kdb.store.blobs import STREAM_THRESHOLD, BlobStore, hash_bytes
from kdb.store.folders import folder_digest
from kdb.store.ndjson import ndjson_rows

# Below this many files a worker pool costs more than it saves.
POOL_MIN_FILES = 200
# Kernel folders per worker task: enough tasks to keep every core busy, few enough files in memory.
BATCH_FOLDERS = 24
# Folders with a cubin travel in batches of their own, up to this many: their SASS is disassembled by one
# nvdisasm process per architecture and batch (and per SASS_CHUNK_BYTES of code), and a process costs
# ~0.2 s to start against ~12 µs an instruction (the H100 mlp cache: 372 kernels, 2.7 s of instructions;
# in batches of 24, mixed with AMD folders in the 10k bench cache, start-ups were most of the SASS time).
# More folders a batch hold more files in a worker's memory (10k bench cache: ~0.4 MB a folder).
SASS_BATCH_MAX_FOLDERS = 64


@dataclass
class GroupResult:
    cache_key: str | None
    folder_digest: str | None = None
    known: bool = False  # the catalog holds this folder already: nothing analysed, only damaged or missing blobs stored
    files: list[dict[str, Any]] = field(default_factory=list)  # name (relative to the folder), hash, size, kind
    blobs: list[dict[str, Any]] = field(default_factory=list)
    analysis: FolderAnalysis | None = None
    problems: list[tuple[str, str | None, str, str]] = field(default_factory=list)  # read problems
    new_bytes: int = 0
    bytes_read: int = 0
    repaired: int = 0  # damaged stored blobs these files' bytes replaced
    # analysis rows the worker encoded for the staging file (table -> newline-delimited JSON): the parent
    # appends them as they are, so its per-row work does not grow with the number of workers
    encoded: dict[str, bytes] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)  # instr_note -> 1 for a kernel analysed now


Group = tuple[str | None, list[WalkedFile], bool]  # folder (cache key), its files, whether it is a kernel folder

# The analysis tables whose rows workers encode (the bulk of a kernel's rows); kernel_folders and
# kernel_sources stay rows: the parent reads them to link Inductor files.
ENCODED_TABLES = (
    "kernel_analysis",
    "instr_mix_lists",
    "source_line_lists",
    "instr_mix_loop_lists",
    "analysis_problems",
)


@dataclass(frozen=True)
class GroupSettings:
    """How every group of one ingest is stored and analysed (sent to each worker with its batch): the store's
    root, the largest file read (`--max-file-size`), the analysis options, and `full_check` (`--rehash`: a stored
    blob is decompressed and compared before it is reused)."""

    store_root: str
    max_bytes: int
    options: AnalysisOptions
    full_check: bool = False


def _store_group(
    settings: GroupSettings, group: Group, known: frozenset[str], jobs: list[tuple[GroupResult, FolderJob]]
) -> GroupResult:
    """Runs in a worker: hash a folder's files; unless the catalog knows the folder, store it, and
    (when it is a kernel folder) append its analysis job to JOBS. Every file read is put, a known folder's too: a
    put checks the blob it would reuse and replaces a damaged one (kdb/store/blobs.py: Repair; `full_check`,
    `--rehash`: the stored bytes decompressed and compared), which costs no compression otherwise."""
    cache_key, files, analyze = group
    max_bytes, full_check = settings.max_bytes, settings.full_check
    store = BlobStore(Path(settings.store_root))
    out = GroupResult(cache_key)
    read: list[tuple[WalkedFile, bytes | None, str]] = []
    for f in files:
        if f.size > max_bytes:
            out.problems.append(
                (f.rel, cache_key, "read", f"{f.size} bytes is larger than --max-file-size; not stored")
            )
            continue
        try:
            if f.size > STREAM_THRESHOLD:  # stored while hashed, in streaming passes
                put = store.put_file(Path(f.abspath), f.size, full_check=full_check)
                read.append((f, None, put.digest))
                out.blobs.append({"hash": put.digest, "size": put.size, "stored_size": put.stored_size})
                out.new_bytes += put.stored_size if put.new else 0
                out.repaired += put.repaired
                continue
            with open(f.abspath, "rb") as fh:
                data = fh.read(max_bytes + 1)
        except OSError as exc:
            out.problems.append((f.rel, cache_key, "read", f"cannot read: {exc.strerror or exc}"))
            continue
        read.append((f, data, hash_bytes(data)))
    prefix = "" if cache_key is None else cache_key + "/"
    for f, content, digest in read:
        size = len(content) if content is not None else f.size
        out.files.append({"name": f.rel[len(prefix) :], "hash": digest, "size": size, "kind": f.kind})
        out.bytes_read += size
    if cache_key is not None:
        out.folder_digest = folder_digest(cache_key, [(r["name"], r["hash"]) for r in out.files])
        out.known = out.folder_digest in known
    contents: list[FolderFile] = []
    for f, content, digest in read:
        if content is None:
            continue
        put = store.put_bytes(content, digest, f.kind, full_check=full_check)
        out.new_bytes += put.stored_size if put.new else 0
        out.repaired += put.repaired
        if not out.known:  # a known folder's blobs have their rows
            out.blobs.append({"hash": put.digest, "size": put.size, "stored_size": put.stored_size})
            contents.append(FolderFile(f.rel, f.kind, content))
    if out.known:
        return out
    if analyze and cache_key is not None and out.folder_digest is not None:
        json_file = kernel_json(files)
        json_contents = next((c for c in contents if json_file and c.rel == json_file.rel), None)
        if json_contents is not None:
            jobs.append((out, (cache_key, out.folder_digest, json_contents, contents)))
    return out


# path -> (size, mtime_ns, inode, blob hash, stored size) of the files the last ingest of the directory read
FileStats = dict[str, tuple[int, int, int, str, int]]


def reuse_unchanged(
    groups: list[Group], known: dict[str, frozenset[str]], stats: FileStats
) -> tuple[list[GroupResult], list[Group]]:
    """Split the groups into results made from file metadata alone and groups that must be read.

    A group whose every file has the size, mtime and inode the last ingest recorded takes that ingest's
    hashes without being read; a kernel folder then needs its digest to be one the catalog holds (it was
    stored and analysed before; as for a known folder a worker hashed, no blob rows), a group of loose files
    restates its blob rows (a concurrent gc that dropped one is then caught at the commit)."""
    reused: list[GroupResult] = []
    remaining: list[Group] = []
    for group in groups:
        cache_key, files, _ = group
        recorded = [stats.get(f.rel) for f in files]
        if not files or any(
            r is None or r[:3] != (f.size, f.mtime_ns, f.ino) for f, r in zip(files, recorded, strict=True)
        ):
            remaining.append(group)
            continue
        prefix = "" if cache_key is None else cache_key + "/"
        out = GroupResult(cache_key)
        for f, r in zip(files, recorded, strict=True):
            assert r is not None
            out.files.append({"name": f.rel[len(prefix) :], "hash": r[3], "size": f.size, "kind": f.kind})
            if cache_key is None:
                out.blobs.append({"hash": r[3], "size": f.size, "stored_size": r[4]})
            out.bytes_read += f.size
        if cache_key is not None:
            out.folder_digest = folder_digest(cache_key, [(r["name"], r["hash"]) for r in out.files])
            out.known = out.folder_digest in known.get(cache_key, frozenset())
            if not out.known:  # same files, but the catalog lost the folder (removed and collected): read it
                remaining.append(group)
                continue
        reused.append(out)
    return reused, remaining


def _store_groups(settings: GroupSettings, batch: list[tuple[Group, frozenset[str]]]) -> list[GroupResult]:
    """Runs in a worker: store a batch of folders, then analyse the new kernel folders together."""
    jobs: list[tuple[GroupResult, FolderJob]] = []
    results = [_store_group(settings, group, known, jobs) for group, known in batch]
    analyses = analyze_folders([job for _, job in jobs], settings.options)
    for (out, _), analysis in zip(jobs, analyses, strict=True):
        analysis.rows = compact_rows(analysis.rows)  # as the catalog stores them: fewer rows to pickle and stage
        out.analysis = analysis
        _encode(out, analysis.rows)
    return results


def _encode(out: GroupResult, rows: dict[str, list[dict[str, Any]]]) -> None:
    for row in rows.get("kernel_analysis", []):
        if row.get("instr_note"):
            out.notes[row["instr_note"]] = out.notes.get(row["instr_note"], 0) + 1
    for name in ENCODED_TABLES:
        if rows.get(name):
            data = ndjson_rows([c for c in STAGED_COLUMNS[name] if c != "snapshot_id"], rows[name])
            if data is not None:  # else (a NaN) the rows travel as they are
                out.encoded[name] = data
                del rows[name]


def batches(
    groups: list[Group], known: dict[str, frozenset[str]], workers: int, sass: bool
) -> Iterator[list[tuple[Group, frozenset[str]]]]:
    """Batches of groups: BATCH_FOLDERS kernel folders (or one big run of other files) at a time; when SASS
    is disassembled (SASS), the folders with a cubin come last, in larger batches of their own (at most
    SASS_BATCH_MAX_FOLDERS, and at least two batches a worker)."""
    if not sass:
        yield from _batched(groups, known, BATCH_FOLDERS)
        return
    other = [g for g in groups if not _has_cubin(g)]
    cubins = [g for g in groups if _has_cubin(g)]
    yield from _batched(other, known, BATCH_FOLDERS)
    per_batch = max(BATCH_FOLDERS, min(SASS_BATCH_MAX_FOLDERS, -(-len(cubins) // (2 * workers))))
    yield from _batched(cubins, known, per_batch)


def _has_cubin(group: Group) -> bool:
    return group[2] and any(f.kind == "cubin" for f in group[1])


def _batched(
    groups: list[Group], known: dict[str, frozenset[str]], per_batch: int
) -> Iterator[list[tuple[Group, frozenset[str]]]]:
    batch: list[tuple[Group, frozenset[str]]] = []
    folders = 0
    for group in groups:
        batch.append((group, known.get(group[0] or "", frozenset())))
        folders += group[2]
        if folders >= per_batch or len(batch) >= 4 * BATCH_FOLDERS:
            yield batch
            batch, folders = [], 0
    if batch:
        yield batch


def groups_of(files: list[WalkedFile]) -> list[Group]:
    by_folder: dict[str | None, list[WalkedFile]] = {}
    for f in files:
        by_folder.setdefault(f.folder, []).append(f)
    groups = []
    for folder, group in sorted(by_folder.items(), key=lambda kv: kv[0] or ""):
        groups.append((folder, group, folder is not None and kernel_json(group) is not None))
    return groups


def _init_worker(parent_pid: int) -> None:
    _die_with_parent(parent_pid)
    _return_large_buffers()


# glibc's malloc serves a freed large block's size from its heap from then on (its mmap threshold rises
# with every large free, up to 32 MB), so a worker that once held a batch's files kept that memory. A
# fixed threshold maps every buffer of 256 KB or more on its own and unmaps it when freed: measured
# (ingesting 1,500 folders of the 10k-kernel bench cache) a worker's PSS peaked at 89 MB instead of 107
# (median 71 instead of 81), in the same time.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
LARGE_BUFFER = 256 * 1024


def _return_large_buffers() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER)
        libc.mallopt(M_TRIM_THRESHOLD, 2 * LARGE_BUFFER)
    except (OSError, AttributeError):  # not glibc: its allocator's own policy stays
        pass


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


def run_groups(
    groups: list[Group], known: dict[str, frozenset[str]], settings: GroupSettings, workers: int
) -> Iterator[GroupResult]:
    """Store and analyse the groups as `settings` say, in worker processes when there are enough files."""
    total_files = sum(len(g[1]) for g in groups)
    sass = settings.options.sass
    if workers <= 1 or total_files < POOL_MIN_FILES:
        for batch in batches(groups, known, workers, sass):
            yield from _store_groups(settings, batch)
        return
    # A bounded window of tasks in flight, results handed on and dropped in order: memory stays flat
    # however many folders the cache holds (a list of all futures would keep every result alive).
    window = 2 * workers
    # Spawned, not forked: a forked worker starts with a copy of this process (the walk of a 10k-kernel
    # cache, the staging buffers), and copy-on-write turns those pages private as refcounts change;
    # measured at 10k kernels, two forked workers held ~260 MB PSS, two spawned ones ~150 MB.
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(os.getpid(),),
    ) as pool:
        pending: deque[Future[list[GroupResult]]] = deque()
        for batch in batches(groups, known, workers, sass):
            pending.append(pool.submit(_store_groups, settings, batch))
            if len(pending) >= window:
                yield from pending.popleft().result()
        while pending:
            yield from pending.popleft().result()
