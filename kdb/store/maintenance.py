"""Operations on stored snapshots: remove, garbage-collect, verify, export, read one file."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kdb.errors import IntegrityError, UsageError
from kdb.store.blobs import TEMP_PREFIX, BlobStore, Dictionary, is_blob_name
from kdb.store.catalog import Catalog
from kdb.store.home import Home


def remove_snapshot(home: Home, tag: str, lock_wait_s: float) -> None:
    with home.writer(lock_wait_s), Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
        catalog.delete_snapshot(tag)


# DuckDB never shrinks its file: a 5%-changed ingest or a removed snapshot can leave a third of the
# catalog as free blocks. Copying it is cheap (seconds at 10k kernels) but not free, so gc copies only
# when at least this share of the file is free, or when asked to (`kdb gc --compact`).
COMPACT_FREE_SHARE = 0.25
# On a shared home, gc leaves alone every blob written or touched this recently (see _collect_shared).
DEFAULT_GRACE_S = 3600.0


@dataclass(frozen=True)
class GcResult:
    blobs_deleted: int
    bytes_freed: int  # store bytes: blobs and temporaries (the catalog's own change is reported apart)
    temporaries_deleted: int
    catalog_compacted: bool = False
    catalog_bytes_before: int = 0
    catalog_bytes_after: int = 0


def collect_garbage(
    home: Home, lock_wait_s: float, *, compact: bool = False, grace_s: float = DEFAULT_GRACE_S
) -> GcResult:
    """Delete blobs no snapshot references: catalog rows first, then files, so the catalog never names a missing blob.

    Then compact the catalog (see COMPACT_FREE_SHARE): a full copy is written beside it and renamed over
    it, so a kill leaves either the old file or the copy, each complete; readers that opened the old
    file keep reading it (its content equals the copy's)."""
    if home.is_shared:
        return _collect_shared(home, lock_wait_s, grace_s)
    with home.writer(lock_wait_s):
        catalog_before = home.catalog_path.stat().st_size if home.catalog_path.exists() else 0
        with Catalog.open(home.catalog_path, wait_s=lock_wait_s) as catalog:
            catalog.drop_unreferenced()
            keep = catalog.all_blob_hashes() | home.store.dictionary_hashes()
            free, total = catalog.space()
            copied = compact or free >= COMPACT_FREE_SHARE * total
            if copied:
                catalog.copy_into(home.compact_path)
        compacted = copied and _replace_catalog(home)
        catalog_after = home.catalog_path.stat().st_size
        store = home.store
        deleted = freed = temps = 0
        for name, path in store.iter_blobs():
            if path.name.startswith(TEMP_PREFIX):
                freed += store.remove(path)
                temps += 1
            elif name not in keep:
                freed += store.remove(path)
                deleted += 1
        # the staging database of a killed ingest, the catalog copy of a killed gc (no other writer
        # runs: we hold the write lock)
        for path in home.scratch_files():
            if path.exists():
                freed += store.remove(path)
                temps += 1
        return GcResult(deleted, freed, temps, compacted, catalog_before, catalog_after)


def _collect_shared(home: Home, lock_wait_s: float, grace_s: float) -> GcResult:
    """gc on a shared home, safe while other machines ingest (no lock is taken).

    A blob file is deleted only when no catalog row names it and nobody has written or touched it for
    `grace_s` seconds: every ingest touches each blob it stores or reuses, and again (inside its
    serialised commit, failing and retrying if one vanished) each blob the catalog does not know yet.
    So an ingest whose store phase takes less than the grace period never references a deleted blob,
    whether it ran before, during or after this gc. Catalog rows go first, in one serialised
    transaction; then the old Parquet files DuckLake no longer needs (also after the grace period)."""
    with Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
        catalog.drop_unreferenced()
        keep = catalog.all_blob_hashes() | home.store.dictionary_hashes()
        catalog.compact_lake(grace_s)
    cutoff = time.time() - grace_s
    store = home.store
    deleted = freed = temps = 0
    for name, path in store.iter_blobs():
        try:
            if path.stat().st_mtime > cutoff:
                continue  # written or touched by an ingest that may not have committed yet
        except FileNotFoundError:
            continue
        if path.name.startswith(TEMP_PREFIX):
            freed += store.remove(path)
            temps += 1
        elif name not in keep:
            freed += store.remove(path)
            deleted += 1
    return GcResult(deleted, freed, temps)


def _replace_catalog(home: Home) -> bool:
    """Rename the compacted copy over the catalog; False (nothing renamed) when either closed database
    left a write-ahead log: the catalog's would be replayed onto the copy it was not written for, and
    the copy's would stay behind, holding rows its file lacks. Both are checkpointed when closed, so
    this is a guard, not an expected path."""
    if any(Path(str(p) + ".wal").exists() for p in (home.catalog_path, home.compact_path)):
        return False  # the copy goes with the other scratch files
    home.compact_path.replace(home.catalog_path)
    fd = os.open(home.catalog_path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a power cut
    finally:
        os.close(fd)
    return True


@dataclass
class VerifyReport:
    blobs_checked: int = 0
    problems: list[str] = field(default_factory=list)
    unreferenced: int = 0
    unreferenced_bytes: int = 0
    temporaries: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(home: Home, lock_wait_s: float) -> VerifyReport:
    """Re-hash every blob in the store and check that every catalog reference resolves to an intact blob."""
    report = VerifyReport()
    with Catalog.open(home.catalog, read_only=True, wait_s=lock_wait_s) as catalog:
        refs = catalog.referenced_blobs()
        report.problems.extend(catalog.dangling_rows())
    store = home.store
    referenced = {}
    for ref in refs:
        referenced[ref["hash"]] = ref
        if ref["sizes"] != 1:
            report.problems.append(f"blob {ref['hash']}: files record {ref['sizes']} different sizes")
        if ref["unrecorded"]:
            report.problems.append(
                f"blob {ref['hash']}: referenced by {ref['example']} but missing from the blobs table"
            )
        check = store.check(ref["hash"], ref["size"])
        report.blobs_checked += 1
        if check.problem:
            report.problems.append(f"{check.problem} (used by {ref['example']})")
    dictionaries = _verify_dictionaries(store, report)
    for name, path in store.iter_blobs():
        if path.name.startswith(TEMP_PREFIX):
            report.temporaries += 1
            continue
        if name in referenced or name in dictionaries:
            continue
        if not is_blob_name(name):
            report.problems.append(f"unexpected file in the store: {path}")
            continue
        problem = store.check_orphan(name, path)
        report.blobs_checked += 1
        if problem:
            report.problems.append(problem)
        else:
            report.unreferenced += 1
            report.unreferenced_bytes += path.stat().st_size
    report.temporaries += sum(1 for path in home.scratch_files() if path.exists())
    return report


def _verify_dictionaries(store: BlobStore, report: VerifyReport) -> set[str]:
    """Check every entry of the store's dictionary index (its blob intact, its id the one it claims);
    return the dictionaries' hashes (blobs that no catalog row names but that are not garbage)."""
    if store.dictionary_dir.exists():
        for path in sorted(store.dictionary_dir.iterdir()):
            if Dictionary.parse(path.name) is None:
                report.problems.append(f"unexpected file in the store: {path}")
    hashes = set()
    for entry in store.dictionaries(reload=True):
        hashes.add(entry.digest)
        report.blobs_checked += 1
        try:
            store.dictionary_bytes(entry)
        except IntegrityError as exc:
            report.problems.append(f"{exc} (dictionary for {entry.kind} files)")
    return hashes


def safe_relative(path: str) -> PurePosixPath:
    """A catalog path as a relative path that cannot climb out of the directory it is joined to."""
    p = PurePosixPath(path)
    if (
        not path
        or p.is_absolute()
        or "\\" in path
        or "\0" in path
        or any(part in ("..", "") for part in path.split("/"))
    ):
        raise IntegrityError(f"refusing unsafe path in catalog: {path!r}")
    return p


@dataclass(frozen=True)
class ExportResult:
    files: int
    bytes: int


def export_snapshot(home: Home, tag: str, dest: Path, lock_wait_s: float) -> ExportResult:
    with Catalog.open(home.catalog, read_only=True, wait_s=lock_wait_s) as catalog:
        rows = catalog.snapshot_files(tag)
    if dest.is_symlink():
        raise UsageError(f"{dest}: destination is a symbolic link")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest}: destination exists and is not an empty directory")
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    store = home.store
    total = 0
    for row in rows:
        rel = safe_relative(row["path"])
        data = store.get(row["hash"], row["size"])  # raises on any corruption before a byte is written
        target = root.joinpath(*rel.parts)
        _make_parents(root, target.parent)
        fd, tmp = tempfile.mkstemp(prefix=".kdb-export-", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
        total += len(data)
    return ExportResult(len(rows), total)


def _make_parents(root: Path, directory: Path) -> None:
    """Create directories under root one by one, refusing any that is (or becomes) a symlink."""
    rel = directory.relative_to(root)
    current = root
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            raise IntegrityError(f"refusing to write through symbolic link {current}")
        current.mkdir(exist_ok=True)


def read_file(home: Home, tag: str, path: str, lock_wait_s: float) -> bytes:
    with Catalog.open(home.catalog, read_only=True, wait_s=lock_wait_s) as catalog:
        row = catalog.snapshot_file(tag, path)
    if row is None:
        raise UsageError(f"no file {path!r} in snapshot {tag!r}")
    return home.store.get(row["hash"], row["size"])
