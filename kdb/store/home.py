"""Where kdb keeps its data: --home, else $KDB_HOME, else the platform's user data directory; or a
shared home (--catalog/$KDB_CATALOG, a DuckLake on PostgreSQL, with --store/$KDB_STORE, a shared path)."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from kdb.errors import UsageError

if TYPE_CHECKING:
    from kdb.store.blobs import BlobStore

CATALOG_NAME = "catalog.duckdb"
OBJECTS_DIR = "objects"
LOCK_NAME = "write.lock"
LAKE_DIR = "lake"  # a shared store's Parquet files (the DuckLake's DATA_PATH), beside objects/


@dataclass(frozen=True)
class SharedLocation:
    """A shared catalog: a DuckLake URL (`ducklake:postgres:dbname=… host=…`) and its data path."""

    url: str
    data_path: Path


def resolve_home(explicit: str | os.PathLike[str] | None) -> Path:
    """The local home's directory. UsageError when something other than a directory is there: a home that is a
    regular file would read as a new, empty home (no snapshot) and fail only at the first write."""
    if explicit:
        path = Path(explicit).expanduser()
    elif env := os.environ.get("KDB_HOME"):
        path = Path(env).expanduser()
    else:
        path = Path(platformdirs.user_data_dir("kdb", appauthor=False))
    if path.exists() and not path.is_dir():
        raise UsageError(f"the kdb home {path} is not a directory")
    return path


def resolve_shared(catalog: str | None, store: str | os.PathLike[str] | None) -> tuple[str, Path] | None:
    """(catalog URL, store path) of a shared home from the options, else $KDB_CATALOG/$KDB_STORE; None
    when neither is set (the local home)."""
    url = catalog or os.environ.get("KDB_CATALOG") or None
    where = store or os.environ.get("KDB_STORE") or None
    if url is None and where is None:
        return None
    if url is None or where is None:
        raise UsageError("a shared home needs both --catalog (or KDB_CATALOG) and --store (or KDB_STORE)")
    return url, Path(where).expanduser()


class Home:
    """A kdb home directory: `catalog.duckdb`, the blob store under `objects/`, and the writer lock.

    A shared home (`Home.shared(url, store)`) keeps blobs under `STORE/objects/`, the catalog's Parquet
    files under `STORE/lake/` and its metadata in PostgreSQL; it has no lock (writers are serialised by
    the catalog, see kdb/store/catalog/lake.py) and its scratch files are local to each process."""

    def __init__(self, root: Path, shared: SharedLocation | None = None) -> None:
        self.root = root
        self.location = shared

    @classmethod
    def shared(cls, url: str, store: Path) -> Home:
        return cls(store, SharedLocation(url, store / LAKE_DIR))

    @property
    def is_shared(self) -> bool:
        return self.location is not None

    @property
    def catalog(self) -> Path | SharedLocation:
        """What Catalog.open takes: the catalog file, or the shared catalog's location."""
        return self.location or self.catalog_path

    def has_catalog(self) -> bool:
        return self.location is not None or self.catalog_path.exists()

    def describe(self) -> str:
        return self.location.url if self.location else str(self.catalog_path)

    @contextmanager
    def writer(self, wait_s: float) -> Iterator[None]:
        """The local home's one-writer lock; nothing on a shared home (no lock across hosts)."""
        if self.location is not None:
            yield
            return
        from kdb.store.lock import write_lock

        with write_lock(self.lock_path, wait_s):
            yield

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_NAME

    @cached_property
    def staging_path(self) -> Path:
        """Scratch database of the running ingest (one at a time: ingest holds the write lock). On a
        shared home, one per process in the local temporary directory."""
        if self.location is not None:
            return Path(tempfile.gettempdir()) / f"kdb-staging-{os.getpid()}-{uuid.uuid4().hex[:8]}.duckdb"
        return self.root / "tmp" / "ingest-staging.duckdb"

    @property
    def compact_path(self) -> Path:
        """Where `kdb gc` writes the compacted copy of the catalog before renaming it over the catalog
        (under the home, so the rename stays on one file system)."""
        return self.root / "tmp" / "catalog-compacting.duckdb"

    def scratch_files(self) -> list[Path]:
        """Files a running ingest or gc writes beside the catalog and removes when done; any of them
        present while no writer runs was left by a killed one (`kdb gc` deletes them). A shared home has
        none (each ingest's staging file is local to its machine)."""
        if self.location is not None:
            return []
        return [p for base in (self.staging_path, self.compact_path) for p in (base, Path(str(base) + ".wal"))]

    @property
    def lock_path(self) -> Path:
        return self.root / LOCK_NAME

    @cached_property
    def store(self) -> BlobStore:
        """One BlobStore per Home (the diff's normalised-text cache is keyed by it)."""
        from kdb.store.blobs import BlobStore

        return BlobStore(self.root / OBJECTS_DIR)
