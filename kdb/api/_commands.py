"""The CLI's commands over one home, as values: each function does what its command does (recording what
captures left waiting first, as every command that reads a tag does) and returns what the command shows; the
CLI renders it. Errors keep the CLI's words (the public Kdb methods rename options as arguments: _core.api_errors)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdb import __version__ as VERSION  # noqa: F401  (the CLI's --version)
from kdb.api._core import kernel_details
from kdb.api._session import Progress, Session
from kdb.errors import TagError, UsageError

if TYPE_CHECKING:
    from kdb.ingest.snapshot import IngestSummary
    from kdb.store.maintenance import ExportResult, GcResult, VerifyReport

# the CLI's ingest display: entered once the request is checked, it yields the (progress, phase) callbacks
IngestDisplay = Callable[[], AbstractContextManager[tuple[Progress | None, Callable[[str], None] | None]]]


@dataclass(frozen=True)
class IngestCall:
    """What `kdb ingest DIR --tag TAG` (and Kdb.ingest) is asked: `labels` as {key: value} or ["key=value"]
    (one string is one label, not a sequence of one-letter labels); `workers` None: all cores."""

    directory: Path
    tag: str
    labels: Mapping[str, str] | Iterable[str] | None = None
    replace: bool = False
    workers: int | None = None
    max_file_bytes: int = 1 << 30  # kdb/ingest/snapshot.py DEFAULT_MAX_FILE_BYTES
    sass: bool = True
    rehash: bool = False


def _labels(labels: Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    from kdb.ingest.snapshot import parse_labels

    if labels is None:
        return {}
    if isinstance(labels, Mapping):
        return {str(k): str(v) for k, v in labels.items()}
    return parse_labels([labels] if isinstance(labels, str) else list(labels))


def ingest(session: Session, call: IngestCall, display: IngestDisplay | None = None) -> IngestSummary:
    """Snapshot a cache directory; `display` shows its progress (the CLI's bar on a terminal)."""
    from kdb.analysis.model import AnalysisOptions
    from kdb.ingest.snapshot import IngestRequest
    from kdb.ingest.snapshot import ingest as run_ingest

    labels = _labels(call.labels)
    with ExitStack() as stack:
        progress, phase = stack.enter_context(display()) if display is not None else (None, None)
        request = IngestRequest(
            call.directory,
            call.tag,
            labels=labels,
            replace=call.replace,
            workers=call.workers,
            max_file_bytes=call.max_file_bytes,
            lock_wait_s=session.wait_s,
            options=AnalysisOptions(sass=call.sass),
            rehash=call.rehash,
        )
        return run_ingest(session.home, request, progress=progress, phase=phase)


def snapshots(session: Session) -> list[dict[str, Any]]:
    """`kdb tags`: every snapshot's record, oldest first; empty on a home without a catalog."""
    session.record_captures()
    if not session.home.has_catalog():
        return []
    with session.reader() as catalog:
        return catalog.queries.list_snapshots()


@dataclass(frozen=True)
class SnapshotShown:
    """`kdb show TAG`: the snapshot's record, its file kinds with counts, and its problems."""

    snapshot: dict[str, Any]
    kinds: list[dict[str, Any]]
    problems: list[dict[str, Any]]


def _read_snapshot(session: Session, tag: str) -> None:
    session.record_captures(tag)
    if not session.home.has_catalog():
        raise TagError(f"unknown snapshot {tag!r}: the home {session.home.root} has no snapshot yet")


def show_snapshot(session: Session, tag: str) -> SnapshotShown:
    _read_snapshot(session, tag)
    with session.reader() as catalog:
        return SnapshotShown(
            catalog.queries.get_snapshot(tag), catalog.queries.kind_counts(tag), catalog.queries.snapshot_problems(tag)
        )


def show_kernels(session: Session, tag: str, pattern: str) -> list[dict[str, Any]]:
    """`kdb show TAG --kernel PATTERN`: the matching kernels' facts, mix, hot lines, problems and times (the
    Python API's Kdb.kernel runs the same lookup)."""
    _read_snapshot(session, tag)
    with session.reader() as catalog:
        return kernel_details(catalog, tag, pattern)


def reindex(session: Session, tags: list[str] | None, *, sass: bool = True) -> dict[str, int]:
    """`kdb reindex [TAG…]`: each snapshot reanalysed from its blobs → its kernel count."""
    from kdb.analysis.model import AnalysisOptions
    from kdb.ingest.reindex import reindex as run_reindex

    session.record_captures(*(tags or []))
    return run_reindex(session.home, tags or None, lock_wait_s=session.wait_s, options=AnalysisOptions(sass=sass))


def remove(session: Session, tag: str) -> None:
    """`kdb rm TAG` (its blobs stay until `kdb gc`)."""
    from kdb.capture.keyparts import forget_keys
    from kdb.store.maintenance import remove_snapshot
    from kdb.store.spool import capture_root

    session.record_captures(tag)  # what waits for the tag goes with it, instead of making the tag again later
    remove_snapshot(session.home, tag, session.wait_s)
    forget_keys(capture_root(session.home), tag)  # its compiles' key parts (`kdb capture misses`) go with it


def collect_garbage(session: Session, *, compact: bool = False, grace_s: float = 3600.0) -> GcResult:
    from kdb.capture.keyparts import prune_keys
    from kdb.store.maintenance import collect_garbage as run_gc
    from kdb.store.spool import capture_root

    result = run_gc(session.home, session.wait_s, compact=compact, grace_s=grace_s)
    if session.home.has_catalog():  # the key parts of a tag that no longer exists (none without a catalog)
        with session.reader() as catalog:
            live = {row["tag"] for row in catalog.queries.list_snapshots()}
        prune_keys(capture_root(session.home), live, grace_s)
    return result


def verify(session: Session) -> VerifyReport:
    from kdb.store.maintenance import verify as run_verify

    return run_verify(session.home, session.wait_s)


def export(session: Session, tag: str, dest: Path, *, verbatim: bool = False) -> ExportResult:
    from kdb.store.maintenance import export_snapshot

    session.record_captures(tag)
    return export_snapshot(session.home, tag, dest, session.wait_s, verbatim=verbatim)


def read_file(session: Session, tag: str, path: str) -> bytes:
    """`kdb cat TAG PATH`: a stored file of the snapshot, or an imported profile's file as imported."""
    from kdb.profile.importer import stored_profile
    from kdb.store.maintenance import read_file as read_stored

    session.record_captures(tag)
    profile = stored_profile(session.home, tag, path, session.wait_s)
    return read_stored(session.home, tag, path, session.wait_s) if profile is None else profile


def run_sql(session: Session, query: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """`kdb sql QUERY`: a read-only query over the catalog → (column names, rows)."""
    from kdb.store.catalog.user_sql import UserSql

    session.record_captures()
    home = session.home
    where = home.location if home.location is not None else home.catalog_path
    with UserSql.open(where, wait_s=session.wait_s) as user_sql:
        return user_sql.run(query)


@dataclass(frozen=True)
class ShellPlan:
    """What `kdb shell` does: print `text` (the statements attaching a shared catalog, or how to install the
    shell), or exec `argv` (the DuckDB shell, read-only)."""

    text: str | None = None
    argv: tuple[str, ...] = ()


def shell(session: Session, *, print_sql: bool = False) -> ShellPlan:
    import shlex

    from kdb.store.catalog.user_sql import shell_args

    location = session.home.location
    if location is not None:
        from kdb.store.catalog.lake import shell_sql

        if not print_sql:
            raise UsageError(
                "kdb shell opens only a local catalog read-only: DuckDB cannot read a shared catalog's Parquet "
                "files without being able to overwrite them; query it with `kdb sql`, or attach it in your own "
                "DuckDB with the statements of `kdb shell --print`"
            )
        return ShellPlan(text=shell_sql(location.url, location.data_path))
    path = session.home.catalog_path
    if not path.exists():
        raise UsageError(f"no catalog at {path} yet: run `kdb ingest` first")
    args = shell_args(path)
    exe = shutil.which("duckdb")
    if exe is None:
        return ShellPlan(
            text=f"the DuckDB shell is not installed (pip install duckdb-cli); then run: {shlex.join(['duckdb', *args])}\n"
        )
    return ShellPlan(argv=(exe, *args))
