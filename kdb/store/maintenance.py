"""Operations on stored snapshots: remove, garbage-collect, verify, export, read one file."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from kdb.errors import IntegrityError, UsageError
from kdb.store.blobs import TEMP_PREFIX, BlobStore, create_file, is_blob_name
from kdb.store.catalog import Catalog
from kdb.store.dictionary_index import Dictionary
from kdb.store.home import Home
from kdb.store.spool import capture_root
from kdb.store.spool_index import index_entries
from kdb.store.spool_upkeep import Recorded, SpoolCheck, SpoolGc, check_spool, collect_spool


def remove_snapshot(home: Home, tag: str, lock_wait_s: float) -> None:
    with home.writer(lock_wait_s), Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
        catalog.writer.delete_snapshot(tag)


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
    capture_folders_removed: int = 0  # spooled by a capture whose writer died mid-compile (kdb/store/spool.py)
    capture_index_removed: int = 0  # capture index entries damaged or naming blobs no snapshot references


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
        if not home.catalog_path.exists() and any(True for _ in home.store.iter_blobs()):
            # Without a catalog every blob looks unreferenced: a lost or moved catalog must not cost the store.
            raise IntegrityError(
                f"{home.catalog_path}: no catalog beside a store that holds blobs; gc deleted nothing "
                "(`kdb verify` lists what the store holds)"
            )
        catalog_before = home.catalog_path.stat().st_size if home.catalog_path.exists() else 0
        with Catalog.open(home.catalog_path, wait_s=lock_wait_s) as catalog:
            catalog.writer.drop_unreferenced()
            keep = catalog.queries.all_blob_hashes() | home.store.dictionaries.hashes()
            free, total = catalog.upkeep.space()
            copied = compact or free >= COMPACT_FREE_SHARE * total
            if copied:
                catalog.upkeep.copy_into(home.compact_path)
        compacted = copied and _replace_catalog(home)
        catalog_after = home.catalog_path.stat().st_size
        store = home.store
        deleted, freed, temps = _sweep_store(store, keep, None)
        # the staging database of a killed ingest, the catalog copy of a killed gc (no other writer
        # runs: we hold the write lock)
        for path in home.scratch_files():
            if path.exists():
                freed += store.remove(path)
                temps += 1
        capture = collect_capture(home, keep, grace_s)  # kdb/capture: dead writers' folders, stale index entries
        return GcResult(
            deleted,
            freed,
            temps + capture.leftovers,
            compacted,
            catalog_before,
            catalog_after,
            len(capture.died_folders),
            capture.index_entries,
        )


def _collect_shared(home: Home, lock_wait_s: float, grace_s: float) -> GcResult:
    """gc on a shared home, safe while other machines ingest (no lock is taken).

    A blob file is deleted only when no catalog row names it and nobody has written or touched it for
    `grace_s` seconds: every ingest touches each blob it stores or reuses, and again (inside its
    serialised commit, failing and retrying if one vanished) each blob the catalog does not know yet.
    So an ingest whose store phase takes less than the grace period never references a deleted blob,
    whether it ran before, during or after this gc. Catalog rows go first, in one serialised
    transaction; then the old Parquet files DuckLake no longer needs (also after the grace period)."""
    with Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
        catalog.writer.drop_unreferenced()
        keep = catalog.queries.all_blob_hashes() | home.store.dictionaries.hashes()
        catalog.upkeep.compact_lake(grace_s)
    deleted, freed, temps = _sweep_store(home.store, keep, time.time() - grace_s)
    capture = collect_capture(home, keep, grace_s)  # kdb/capture: dead writers' folders, stale index entries
    return GcResult(
        deleted,
        freed,
        temps + capture.leftovers,
        capture_folders_removed=len(capture.died_folders),
        capture_index_removed=capture.index_entries,
    )


def _sweep_store(store: BlobStore, keep: set[str], cutoff: float | None) -> tuple[int, int, int]:
    """Delete the store's blobs not in KEEP and its leftover temporaries; CUTOFF (a shared home): only files
    written or touched before it. Return (blobs deleted, bytes freed, temporaries deleted)."""
    deleted = freed = temps = 0
    for name, path in store.iter_blobs():
        if cutoff is not None:
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
    return deleted, freed, temps


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
    notes: list[str] = field(default_factory=list)  # not problems: what waits to be recorded, what `kdb gc` removes
    catalog: bool = True  # False: the home has no catalog (yet, or any more): every blob is unreferenced

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(home: Home, lock_wait_s: float) -> VerifyReport:
    """Re-hash every blob in the store and check that every catalog reference resolves to an intact blob;
    a problem with a referenced blob names every snapshot that uses it. A home without a catalog (blobs
    only) is checked too: its blobs re-hashed and counted as unreferenced."""
    report = VerifyReport()
    refs: list[dict] = []
    if home.has_catalog():
        with Catalog.open(home.catalog, read_only=True, wait_s=lock_wait_s) as catalog:
            refs = catalog.queries.referenced_blobs()
            report.problems.extend(catalog.queries.dangling_rows())
            capture = verify_capture(home, catalog)  # kdb/capture: its index against the catalog, what waits
    else:
        report.catalog = False
        capture = verify_capture(home, None)
    report.problems.extend(capture.problems)
    report.notes.extend(capture.notes)
    store = home.store
    referenced = {}
    for ref in refs:
        referenced[ref["hash"]] = ref
        if ref["sizes"] != 1:
            report.problems.append(f"blob {ref['hash']}: files record {ref['sizes']} different sizes; {_used_by(ref)}")
        if ref["unrecorded"]:
            report.problems.append(f"blob {ref['hash']}: missing from the blobs table; {_used_by(ref)}")
        check = store.check(ref["hash"], ref["size"])
        report.blobs_checked += 1
        if check.problem:
            report.problems.append(
                f"{check.problem}; {_used_by(ref)}; ingesting a cache that holds the file replaces it "
                "(`--rehash` for a directory ingested before)"
            )
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


def _used_by(ref: dict) -> str:
    """Every snapshot that uses a referenced blob, and one of its files."""
    tags = ref["tags"]
    return f"used by {len(tags)} snapshot{'s' if len(tags) != 1 else ''}: {', '.join(tags)} (e.g. {ref['example']})"


def _verify_dictionaries(store: BlobStore, report: VerifyReport) -> set[str]:
    """Check every entry of the store's dictionary index (its blob intact, its id the one it claims);
    return the dictionaries' hashes (blobs that no catalog row names but that are not garbage)."""
    if store.dictionaries.directory.exists():
        for path in sorted(store.dictionaries.directory.iterdir()):
            if Dictionary.parse(path.name) is None:
                report.problems.append(f"unexpected file in the store: {path}")
    hashes = set()
    for entry in store.dictionaries.entries(reload=True):
        hashes.add(entry.digest)
        report.blobs_checked += 1
        try:
            store.dictionaries.read(entry)
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
    groups_relocated: int = 0  # Triton group files rewritten to point into the destination


def export_snapshot(home: Home, tag: str, dest: Path, lock_wait_s: float, *, verbatim: bool = False) -> ExportResult:
    """Write a snapshot's files under DEST (a new or empty directory) as a working Triton cache there.

    Every file is restored byte for byte but Triton's group files (`__grp__NAME.json`): their
    `child_paths` name the folder the cache was compiled into, and Triton's FileCacheManager.get_group
    returns nothing when a child path is missing, so they are written as Triton writes them when it
    compiles into DEST (relocate_group); VERBATIM keeps the stored bytes. Files and folders get the modes
    Triton gives them (0666 and 0777 less the umask). The tree is written into a temporary folder beside
    DEST and renamed to DEST once whole: a failure (a damaged blob, a full disk) leaves nothing behind."""
    with Catalog.open(home.catalog, read_only=True, wait_s=lock_wait_s) as catalog:
        rows = catalog.queries.snapshot_files(tag)
    if dest.is_symlink():
        raise UsageError(f"{dest}: destination is a symbolic link")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest}: destination exists and is not an empty directory")
    # Absolute, symbolic links kept: what TRITON_CACHE_DIR would name and Triton would write.
    target = Path(os.path.abspath(dest))
    made = _make_missing(target.parent)
    staging = _new_folder(target.parent, ".kdb-export-")
    try:
        result = _write_tree(home.store, rows, staging, None if verbatim else str(target))
        if target.exists():  # an empty directory the user made: the export takes its mode
            os.chmod(staging, stat.S_IMODE(target.stat().st_mode))
        os.replace(staging, target)  # replaces an empty directory; refused if one appeared meanwhile
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(exc, IntegrityError):
            raise IntegrityError(f"{exc}; nothing was written to {dest}") from None
        raise
    return result


def _write_tree(store: BlobStore, rows: list[dict], root: Path, cache_dir: str | None) -> ExportResult:
    """Write the snapshot's files under ROOT (a new folder); group files relocated to CACHE_DIR unless None."""
    total = relocated = 0
    for row in rows:
        rel = safe_relative(row["path"])
        try:
            data = store.get(row["hash"], row["size"])  # raises on any corruption before a byte is written
        except IntegrityError as exc:
            raise IntegrityError(f"{row['path']}: {exc}") from None
        if cache_dir is not None and row["kind"] == "group":
            moved = relocate_group(data, os.path.join(cache_dir, *rel.parent.parts))
            relocated += moved != data
            data = moved
        target = root.joinpath(*rel.parts)
        _make_parents(root, target.parent)
        with os.fdopen(create_file(target), "wb") as fh:
            fh.write(data)
        total += len(data)
    return ExportResult(len(rows), total, relocated)


def relocate_group(data: bytes, folder: str) -> bytes:
    """A Triton group file as Triton writes it for the same children when their cache folder is FOLDER.

    Triton 3.x writes `json.dumps({"child_paths": {name: os.path.join(folder, name), …}})`
    (FileCacheManager.put_group; every corpus release 3.0.0–3.9.0 wrote exactly that); 2.x wrote a list of
    names relative to the folder, which moves with it and is kept, as is anything else (not JSON, other
    shapes, a child name that is not a plain file name)."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return data
    children = document.get("child_paths") if isinstance(document, dict) else None
    if not isinstance(children, dict) or not all(_plain_name(name) for name in children):
        return data
    moved = {name: os.path.join(folder, name) for name in children}
    return json.dumps({**document, "child_paths": moved}).encode()


def _plain_name(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def _make_missing(directory: Path) -> list[Path]:
    """Create DIRECTORY and its missing parents (mode 0777 less the umask); return those made, outermost first."""
    missing = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    made = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        made.append(folder)
    return made


def _new_folder(parent: Path, prefix: str) -> Path:
    """A new folder in PARENT with mode 0777 less the umask (mkdtemp's 0700 would stay on the export)."""
    while True:
        folder = parent / f"{prefix}{secrets.token_hex(8)}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue


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
        row = catalog.queries.snapshot_file(tag, path)
    if row is None:
        raise UsageError(f"no file {path!r} in snapshot {tag!r}")
    return home.store.get(row["hash"], row["size"])


# -- what `kdb gc` and `kdb verify` ask of the capture folder (kdb/store/spool.py) -----------------------


def collect_capture(home: Home, keep: set[str], grace_s: float) -> SpoolGc:
    """`kdb gc`'s part: see kdb/store/spool.py's collect_spool (`keep`: the blobs the catalog references)."""
    return collect_spool(capture_root(home), keep, local=not home.is_shared, grace_s=grace_s)


def verify_capture(home: Home, catalog: Any) -> SpoolCheck:
    """`kdb verify`'s part: the index checked against the folders the catalog recorded (an open catalog, or
    None where there is none yet), and notes on what waits or was left by a writer that died."""
    root = capture_root(home)
    recorded: Recorded = {}
    if not root.is_dir():
        return SpoolCheck()
    keys = [key for key, _ in index_entries(root)]
    if catalog is not None and keys:
        for snapshot in catalog.queries.list_snapshots():
            for key, folder_digest, name, digest, size in catalog.queries.capture_index(snapshot["tag"], keys):
                tags, files = recorded.setdefault((key, folder_digest), (set(), {}))
                tags.add(snapshot["tag"])
                files[name] = (digest, size)
    return check_spool(root, recorded)
