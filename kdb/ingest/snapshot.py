"""Ingest orchestration: walk a cache, store every file's bytes, analyse kernel folders, record one snapshot.

Order matters for crash safety: blobs are written (atomically) first, the catalog last, in one
transaction. A kill at any point leaves at worst unreferenced blobs, which `kdb gc` sweeps.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kdb import __version__
from kdb.analysis.model import DEFAULT_OPTIONS, AnalysisOptions
from kdb.errors import CollectedMeanwhile, InputError, IntegrityError, TagError, UsageError
from kdb.ingest.columns import STAGED_COLUMNS
from kdb.ingest.inductor import INDUCTOR_KINDS, FolderFacts, InductorLinks, link_inductor
from kdb.ingest.training import train_missing
from kdb.ingest.walker import Walk, WalkedFile, walk_cache
from kdb.ingest.worker import GroupResult, GroupSettings, groups_of, reuse_unchanged, run_groups
from kdb.profile.relink import ProfileRelink
from kdb.store.catalog import JSON_LOAD_MIN_VALUES, Catalog, Table, value_count
from kdb.store.home import Home
from kdb.store.staging import Staging
from kdb.store.tags import check_tag

# Real Triton artifacts are at most a few MB; a file this large is not one of them.
DEFAULT_MAX_FILE_BYTES = 1 << 30
# Values (a list cell's elements counted one by one) held in memory before they are spilled to the staging
# file, ~1,300 kernels' rows (2,000 kernels measured: the parent peaked at 252 MB RSS; 240 MB with a quarter
# of it, whose 4x as many JSON loads cost 6 s more), checked every FLUSH_CHECK_EVERY folders. A mid-run
# spill takes only the tables big enough for DuckDB's JSON reader (connection.JSON_LOAD_MIN_VALUES); the
# others wait for the last one.
FLUSH_VALUES = 1_000_000
FLUSH_CHECK_EVERY = 32


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
    found: dict[str, int] = field(default_factory=dict)  # Triton caches, generated modules, best configs, …
    links: dict[str, dict[str, int]] = field(default_factory=dict)  # link kind -> {linked how / ambiguous / missing: n}
    # kernels analysed now whose mix is not from the best source, by why (instr_note): "no SASS: …" -> n
    notes: dict[str, int] = field(default_factory=dict)
    # files whose size, mtime and inode matched the last ingest of the directory: not read again
    files_unchanged: int = 0
    # seconds spent in each phase (walking, reading the catalog, storing and analysing, …), in order
    phase_seconds: dict[str, float] = field(default_factory=dict)
    # --replace: the replaced snapshot's imported profiles, linked again to the new kernels (each file's summary,
    # as `kdb profile import` gives it), and those dropped, each with its name, profile_hash and reason
    profiles_relinked: list[dict[str, Any]] = field(default_factory=list)
    profiles_dropped: list[dict[str, Any]] = field(default_factory=list)
    # damaged stored blobs that this cache's bytes replaced (kdb/store/blobs.py: Repair)
    blobs_repaired: int = 0


@dataclass(frozen=True)
class IngestRequest:
    """What `ingest` is asked to do: snapshot the cache directory `source` as `tag`, with `labels`; `replace` an
    existing snapshot of that tag; `workers` processes (None: every core); files over `max_file_bytes` are
    problems, not read; `lock_wait_s` for the home's writer lock and the catalog; `rehash`: read every file and
    check every stored blob it reuses (`--rehash`). `append` (kdb's Triton cache manager): add the folders of
    `source` to the snapshot `tag` if it exists (else create it), plus these (cache_key, folder_digest) pairs the
    catalog already holds."""

    source: Path
    tag: str
    labels: dict[str, str] | None = None
    replace: bool = False
    workers: int | None = None
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    lock_wait_s: float = 600.0
    options: AnalysisOptions = DEFAULT_OPTIONS
    rehash: bool = False
    append: Sequence[tuple[str, str]] | None = None
    # problems met before the ingest, recorded with the snapshot: (path, cache_key, stage, reason); a replay's
    # kernels that could not be compiled (kdb/replay/run.py)
    problems: Sequence[tuple[str, str | None, str, str]] = ()


# What one ingest reports as it goes (nothing here prints): (files done, files, bytes done, bytes) as kernel
# folders are stored, and the step it is in.
Progress = Callable[[int, int, int, int], None]
Phase = Callable[[str], None]


@dataclass(frozen=True)
class _Run:
    """One ingest as its steps see it: the request, the walked cache and its groups, the workers resolved, where
    progress goes, and the profiles to relink (`replace`)."""

    request: IngestRequest
    walk: Walk
    groups: list[tuple[str | None, list[WalkedFile], bool]]
    workers: int
    progress: Progress | None
    phase: Phase
    relink: ProfileRelink | None


def validate_tag(tag: str) -> str:
    """A new snapshot's tag follows the one rule set of every tag (kdb/store/tags.py)."""
    return check_tag(tag)


def parse_labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"invalid label {pair!r}: expected key=value")
        labels[key] = value
    return labels


def ingest(
    home: Home, request: IngestRequest, *, progress: Progress | None = None, phase: Phase | None = None
) -> IngestSummary:
    """Ingest `request.source` as `request.tag`. `progress` is told (files done, files, bytes done, bytes) as kernel
    folders are stored; `phase` the step the ingest is in: walking, storing (dictionaries), storing and analysing,
    linking, committing (the CLI shows both; nothing here prints)."""
    source, tag = request.source, request.tag
    validate_tag(tag)
    started = time.monotonic()
    timed = _PhaseClock(phase)
    timed("walking")
    walk = walk_cache(source)
    if progress:
        progress(0, len(walk.files), 0, sum(f.size for f in walk.files))
    groups = groups_of(walk.files)
    if request.append is None and not any(analyze for _, _, analyze in groups):
        raise InputError(
            f"{source}: no Triton kernel folders found (expected folders holding NAME.json beside NAME.ttir/…)"
        )
    workers = request.workers or os.cpu_count() or 1
    relink = ProfileRelink(home, tag) if request.replace else None
    run = _Run(request, walk, groups, workers, progress, timed, relink)
    for attempt in range(3):
        try:
            recorded, problem_list, totals, links, notes = _ingest_once(home, run)
            break
        except CollectedMeanwhile:  # shared home: a concurrent gc dropped folders this ingest skipped as known
            if attempt == 2:
                raise
    return IngestSummary(
        tag=tag,
        source=str(source),
        kernels=recorded["kernel_count"],
        files=totals["file_count"],
        raw_bytes=totals["raw_bytes"],
        new_bytes=totals["new_bytes"],
        stored_bytes=recorded["stored_bytes"],
        problems=len(problem_list),
        seconds=time.monotonic() - started,
        problem_list=problem_list,
        found=links.found,
        links={kind: dict(counts) for kind, counts in links.links.items()},
        notes=notes,
        files_unchanged=totals.get("files_unchanged", 0),
        phase_seconds=timed.finish(),
        blobs_repaired=totals.get("blobs_repaired", 0),
        profiles_relinked=[asdict(kept) for kept in relink.kept] if relink else [],
        profiles_dropped=list(relink.dropped) if relink else [],
    )


def _ingest_once(
    home: Home, run: _Run
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, int], InductorLinks, dict[str, int]]:
    request, phase, relink = run.request, run.phase, run.relink
    source, tag, lock_wait_s, append = request.source, request.tag, request.lock_wait_s, request.append
    phase("reading the catalog")
    with home.writer(lock_wait_s):
        with Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
            if catalog.snapshot_id(tag) is not None and not request.replace and append is None:
                raise TagError(f"tag {tag!r} exists already (use --replace to overwrite it)")
            known = catalog.queries.known_folders([key for key, _, _ in run.groups if key is not None])
            stats = {} if request.rehash else catalog.queries.file_stats(socket.gethostname(), str(source.resolve()))
            schema = catalog.staging_schema(STAGED_COLUMNS)
        reused, groups = reuse_unchanged(run.groups, known, stats)
        home.store.ensure()
        phase("storing (dictionaries)")
        train_missing(home.store, [f for _, files, _ in groups for f in files], run.workers)
        staging = Staging(home.staging_path, schema)
        try:
            seen = _Seen()
            phase("storing and analysing")
            totals = _store_and_stage(home, staging, run, (reused, groups), known, seen)
            totals["files_unchanged"] = sum(len(r.files) for r in reused)
            phase("linking")
            links = _link(home, seen, lock_wait_s)
            tables = {name: Table(name, STAGED_COLUMNS[name]) for name in links.rows}
            for name, rows in links.rows.items():
                for row in rows:
                    tables[name].add(**row)
            if request.problems:
                tables.setdefault("file_problems", Table("file_problems", STAGED_COLUMNS["file_problems"]))
                for path, cache_key, stage, reason in request.problems:
                    tables["file_problems"].add(path=path, cache_key=cache_key, stage=stage, reason=reason)
            if append:
                tables["folder_sets"] = Table("folder_sets", STAGED_COLUMNS["folder_sets"])
                for cache_key, folder_digest in append:
                    tables["folder_sets"].add(cache_key=cache_key, folder_digest=folder_digest)
            flush(staging, tables)
            staging.close()
            home.store.durable()
            snapshot = {
                "tag": tag,
                "created_at": datetime.now(UTC).replace(tzinfo=None),
                "source_path": str(source.resolve()),
                "host": socket.gethostname(),
                "kdb_version": __version__,
                "labels": request.labels or {},
                **totals,
            }
            phase("committing")
            with Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
                catalog.writer.write_snapshot(
                    snapshot,
                    staging.path,
                    replace=request.replace,
                    ensure_blobs=home.store.refresh if home.is_shared else None,
                    append=append is not None,
                    relink=relink.bound(catalog.profiles) if relink is not None else None,
                )
                recorded = catalog.queries.get_snapshot(tag)
                problem_list = catalog.queries.snapshot_problems(tag)
        finally:
            staging.remove()
    return recorded, problem_list, totals, links, dict(sorted(seen.notes.items()))


class _PhaseClock:
    """The phase callback the ingest calls: tells the caller's callback, and times each phase (a phase
    entered again, as on a retry, adds to its total)."""

    def __init__(self, tell: Callable[[str], None] | None) -> None:
        self.tell = tell
        self.seconds: dict[str, float] = {}
        self.current: str | None = None
        self.since = time.monotonic()

    def __call__(self, name: str) -> None:
        self._close()
        self.current = name
        if self.tell:
            self.tell(name)

    def _close(self) -> None:
        now = time.monotonic()
        if self.current is not None:
            self.seconds[self.current] = round(self.seconds.get(self.current, 0.0) + now - self.since, 3)
        self.since = now

    def finish(self) -> dict[str, float]:
        self._close()
        self.current = None
        return dict(self.seconds)


@dataclass
class _Seen:
    """What the ingest saw that linking Inductor files needs."""

    facts: dict[str, FolderFacts] = field(default_factory=dict)  # analysed now, by cache_key
    known: dict[str, str] = field(default_factory=dict)  # cache_key -> folder_digest of folders analysed before
    files: list[tuple[str, str, str, int]] = field(default_factory=list)  # (path, kind, hash, size)
    notes: dict[str, int] = field(default_factory=dict)  # instr_note -> kernels analysed now

    def add(self, result: GroupResult) -> None:
        for note, n in result.notes.items():
            self.notes[note] = self.notes.get(note, 0) + n
        prefix = "" if result.cache_key is None else result.cache_key + "/"
        for row in result.files:
            if row["kind"] in INDUCTOR_KINDS:
                self.files.append((prefix + row["name"], row["kind"], row["hash"], row["size"]))
        if result.cache_key is None or result.folder_digest is None:
            return
        if result.known:
            self.known[result.cache_key] = result.folder_digest
        elif result.analysis is not None and result.analysis.kernel is not None:
            k = result.analysis.kernel
            src = next(iter(result.analysis.rows.get("kernel_sources", [])), {})
            self.facts[result.cache_key] = FolderFacts(
                result.cache_key,
                k["name"],
                k.get("num_warps"),
                k.get("num_stages"),
                k.get("num_ctas"),
                src.get("source_file"),
                _shapes(src.get("tensor_shapes")),
            )


def _shapes(shapes: list[str] | None) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(d) for d in s.split("x")) for s in shapes or ())


def _link(home: Home, seen: _Seen, lock_wait_s: float) -> InductorLinks:
    facts = dict(seen.facts)
    if seen.known:
        # the home's catalog, local file or shared DuckLake (home.catalog_path is the local file only)
        with Catalog.open(home.catalog, read_only=True, wait_s=lock_wait_s) as catalog:
            rows = {r["folder_digest"]: r for r in catalog.queries.link_facts(list(seen.known.values()))}
        for cache_key, digest in seen.known.items():
            if (r := rows.get(digest)) is not None:
                facts[cache_key] = FolderFacts(
                    cache_key,
                    r["name"],
                    r["num_warps"],
                    r["num_stages"],
                    r["num_ctas"],
                    r["source_file"],
                    _shapes(r["tensor_shapes"]),
                )
    try:
        contents = [(path, kind, home.store.get(digest, size)) for path, kind, digest, size in seen.files]
    except IntegrityError as exc:
        # On a shared home a gc that listed a reused blob before this ingest touched it may delete it
        # after (its stat and unlink are not atomic); the commit would catch that, this read comes first.
        if home.is_shared and any(not home.store.has(digest) for _, _, digest, _ in seen.files):
            raise CollectedMeanwhile("a file this ingest reused was garbage-collected before it was linked") from None
        # a damaged blob of a file whose metadata was unchanged (not read, so not put): --rehash puts it again
        raise IntegrityError(f"{exc}; `kdb ingest --rehash` reads every file again and replaces it") from None
    links = link_inductor(contents, [facts[k] for k in sorted(facts)])
    for path, reason in links.problems:
        links.add("file_problems", path=path, cache_key=None, stage="inductor", reason=reason)
    return links


def _store_and_stage(
    home: Home,
    staging: Staging,
    run: _Run,
    work: tuple[list[GroupResult], list[tuple[str | None, list[WalkedFile], bool]]],
    known: dict[str, frozenset[str]],
    seen: _Seen,
) -> dict[str, int]:
    """Store every file and stage every row; return the snapshot's file count and byte totals. `work`: the
    results made from file metadata alone (reuse_unchanged), and the groups to read (`rehash`: each stored blob
    they would reuse is decompressed and compared with the file, and replaced when it differs)."""
    reused, groups = work
    walk, progress = run.walk, run.progress
    walked = {f.rel: f for f in walk.files}
    tables = {name: Table(name, columns) for name, columns in STAGED_COLUMNS.items()}
    for p in walk.problems:
        tables["file_problems"].add(
            path=p.rel, cache_key=p.rel.split("/", 1)[0] if "/" in p.rel else None, stage="walk", reason=p.reason
        )
    total_files = len(walk.files)
    total_bytes = sum(f.size for f in walk.files)
    totals = {"file_count": 0, "raw_bytes": 0, "new_bytes": 0, "blobs_repaired": 0}
    done_files = 0
    request = run.request
    settings = GroupSettings(str(home.store.root), request.max_file_bytes, request.options, request.rehash)
    stored = run_groups(groups, known, settings, run.workers)
    results = itertools.chain(reused, stored)
    for done, result in enumerate(results, 1):
        _stage(tables, result, walked)
        for name, data in result.encoded.items():
            staging.add_encoded(name, data)
        seen.add(result)
        totals["new_bytes"] += result.new_bytes
        totals["blobs_repaired"] += result.repaired
        totals["raw_bytes"] += result.bytes_read
        totals["file_count"] += len(result.files)
        done_files += len(result.files) + sum(1 for p in result.problems if p[2] == "read")
        if progress:
            progress(done_files, total_files, totals["raw_bytes"], total_bytes)
        if done % FLUSH_CHECK_EVERY == 0:
            flush_if_large(staging, tables)
    flush(staging, tables)
    return totals


def _stage(tables: dict[str, Table], result: GroupResult, walked: dict[str, WalkedFile]) -> None:
    """The rows of one stored (or metadata-reused) group."""
    prefix = "" if result.cache_key is None else result.cache_key + "/"
    for row in result.files:  # the directory's metadata index, for the next ingest of it
        f = walked[prefix + row["name"]]
        tables["file_stats"].add(path=f.rel, size=row["size"], mtime_ns=f.mtime_ns, ino=f.ino, hash=row["hash"])
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
            tables["folders"].add(
                folder_digest=result.folder_digest,
                cache_key=result.cache_key,
                file_count=len(result.files),
                bytes=result.bytes_read,
            )
            for row in result.files:
                tables["folder_files"].add(folder_digest=result.folder_digest, **row)
    if result.analysis is not None and result.analysis.kernel is not None:
        tables["kernel_folders"].add(**result.analysis.kernel)
        for name, rows in result.analysis.rows.items():
            for row in rows:
                tables[name].add(**row)


def flush(staging: Staging, tables: dict[str, Table], *, final: bool = True) -> None:
    """Spill the tables' rows into the staging file: every table (`final`), else only those large enough
    for the JSON reader (bound parameters are converted value by value: cheap only for small tables)."""
    for table in tables.values():
        if len(table) and (final or value_count(table) >= JSON_LOAD_MIN_VALUES):
            staging.add(table)
            table.clear()


def flush_if_large(staging: Staging, tables: dict[str, Table]) -> None:
    """Spill what is held once it reaches FLUSH_VALUES: memory stays flat however large the cache."""
    if sum(value_count(t) for t in tables.values()) >= FLUSH_VALUES:
        flush(staging, tables, final=False)
