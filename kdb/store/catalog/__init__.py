"""The DuckDB catalog: every SQL statement kdb runs outside schema/ lives in this package.

Owns duckdb (with kdb/store/staging.py). `Catalog` joins the connection (opening, migrations,
transactions), the snapshot writer and the read queries, each in its own module. Imports only
kdb.errors and the schema files (package data `kdb.schema`).
"""

from __future__ import annotations

from kdb.store.catalog.connection import (
    JSON_LOAD_MIN_VALUES,
    CatalogConnection,
    Table,
    load_ndjson,
    schema_files,
    value_count,
)
from kdb.store.catalog.diff_queries import DiffQueries
from kdb.store.catalog.profiles import ProfileCatalog
from kdb.store.catalog.queries import CatalogQueries
from kdb.store.catalog.transfer import SnapshotTransfer
from kdb.store.catalog.writer import CatalogUpkeep, SnapshotWriter


class Catalog(SnapshotWriter, SnapshotTransfer, CatalogUpkeep, CatalogQueries, DiffQueries, ProfileCatalog):
    """The catalog, opened with `Catalog.open(path, read_only=…)`: writer and readers over one connection."""


__all__ = [
    "JSON_LOAD_MIN_VALUES",
    "Catalog",
    "CatalogConnection",
    "Table",
    "load_ndjson",
    "schema_files",
    "value_count",
]
