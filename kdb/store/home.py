"""Where kdb keeps its data: --home, else $KDB_HOME, else the platform's user data directory."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

if TYPE_CHECKING:
    from kdb.store.blobs import BlobStore

CATALOG_NAME = "catalog.duckdb"
OBJECTS_DIR = "objects"
LOCK_NAME = "write.lock"


def resolve_home(explicit: str | os.PathLike[str] | None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("KDB_HOME")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("kdb", appauthor=False))


class Home:
    """A kdb home directory: `catalog.duckdb`, the blob store under `objects/`, and the writer lock."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_NAME

    @property
    def staging_path(self) -> Path:
        """Scratch database of the running ingest (one at a time: ingest holds the write lock)."""
        return self.root / "tmp" / "ingest-staging.duckdb"

    @property
    def compact_path(self) -> Path:
        """Where `kdb gc` writes the compacted copy of the catalog before renaming it over the catalog
        (under the home, so the rename stays on one file system)."""
        return self.root / "tmp" / "catalog-compacting.duckdb"

    def scratch_files(self) -> list[Path]:
        """Files a running ingest or gc writes beside the catalog and removes when done; any of them
        present while no writer runs was left by a killed one (`kdb gc` deletes them)."""
        return [p for base in (self.staging_path, self.compact_path) for p in (base, Path(str(base) + ".wal"))]

    @property
    def lock_path(self) -> Path:
        return self.root / LOCK_NAME

    @cached_property
    def store(self) -> BlobStore:
        """One BlobStore per Home (the diff's normalised-text cache is keyed by it)."""
        from kdb.store.blobs import BlobStore

        return BlobStore(self.root / OBJECTS_DIR)
