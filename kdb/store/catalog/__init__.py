"""The DuckDB catalog: every SQL statement kdb runs outside schema/ lives in this package.

Owns duckdb (with kdb/store/staging.py). `Catalog` owns the connection (opening, migrations, transactions) and
hands out its roles, each a small object over that connection in its own module: `writer` (snapshots written and
removed), `transfer` (a snapshot staged for push/pull), `upkeep` (space, compaction), `queries` (snapshots,
files, kernels, integrity), `diffs` (what `kdb diff` reads) and `profiles` (measured time). A consumer takes the
role it uses. Imports only kdb.errors and the schema files (package data `kdb.schema`).
"""

from __future__ import annotations

from functools import cached_property

from kdb.store.catalog.connection import (
    JSON_LOAD_MIN_VALUES,
    CatalogConnection,
    Table,
    load_ndjson,
    schema_files,
    value_count,
)
from kdb.store.catalog.diff_queries import DiffQueries
from kdb.store.catalog.profiles import ProfileCatalog, ProfileRows
from kdb.store.catalog.queries import CatalogQueries
from kdb.store.catalog.transfer import SnapshotTransfer
from kdb.store.catalog.upkeep import CatalogUpkeep
from kdb.store.catalog.writer import SnapshotWriter


class Catalog(CatalogConnection):
    """The catalog, opened with `Catalog.open(path, read_only=…)`: one connection, and its roles over it."""

    @cached_property
    def writer(self) -> SnapshotWriter:
        return SnapshotWriter(self)

    @cached_property
    def transfer(self) -> SnapshotTransfer:
        return SnapshotTransfer(self)

    @cached_property
    def upkeep(self) -> CatalogUpkeep:
        return CatalogUpkeep(self)

    @cached_property
    def queries(self) -> CatalogQueries:
        return CatalogQueries(self)

    @cached_property
    def diffs(self) -> DiffQueries:
        return DiffQueries(self)

    @cached_property
    def profiles(self) -> ProfileCatalog:
        return ProfileCatalog(self)


__all__ = [
    "JSON_LOAD_MIN_VALUES",
    "Catalog",
    "CatalogConnection",
    "CatalogQueries",
    "CatalogUpkeep",
    "DiffQueries",
    "ProfileCatalog",
    "ProfileRows",
    "SnapshotTransfer",
    "SnapshotWriter",
    "Table",
    "load_ndjson",
    "schema_files",
    "value_count",
]
