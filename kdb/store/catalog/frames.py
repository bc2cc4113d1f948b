"""Catalog rows handed to Python code as DuckDB relations (the Python API's `Kdb.kernels(tag)`).

The rows are copied, at the call, out of the catalog into an in-memory DuckDB database of their own, and
the catalog is detached again: no relation holds the catalog open (an ingest in another process would wait
for it), and a relation stays valid however the catalog changes afterwards. That database is then closed
to the outside as `kdb sql`'s connection is (no host files, no network, configuration locked).
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from kdb.errors import CatalogBusy, KdbError, TagError
from kdb.store.catalog import lake
from kdb.store.catalog.connection import BUSY_POLL_S, _is_lock_conflict, literal
from kdb.store.home import SharedLocation

Relation = duckdb.DuckDBPyRelation  # what the API's kernels() returns, named for code that may not import duckdb
SOURCE = "kdb_catalog"  # the catalog's name while it is attached


def _attach_file(con: duckdb.DuckDBPyConnection, path: Path, wait_s: float) -> None:
    """ATTACH the catalog file read-only, retrying while another process holds it (as Catalog.open does)."""
    if not path.exists():
        raise TagError(f"no catalog at {path} yet: run `kdb ingest` first")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            con.execute(f"ATTACH {literal(str(path))} AS {SOURCE} (READ_ONLY)")
            return
        except duckdb.IOException as exc:
            if not _is_lock_conflict(exc) or time.monotonic() >= deadline:
                if _is_lock_conflict(exc):
                    raise CatalogBusy(
                        f"catalog busy: {path} is held by another process (waited {wait_s:g} s)"
                    ) from None
                raise KdbError(f"cannot open catalog {path}: {str(exc).splitlines()[0]}") from None
            time.sleep(BUSY_POLL_S)


def kernels_relation(where: Path | SharedLocation, tag: str, *, wait_s: float = 10.0) -> Relation:
    """The `kernels` view's rows of snapshot `tag` (every column), in name and cache-key order, as a relation
    over an in-memory copy (see the module docstring). TagError when the catalog has no such snapshot."""
    if isinstance(where, SharedLocation):
        con = lake.connect_lake(where.url, where.data_path, read_only=True)
        source = lake.LAKE_ALIAS
    else:
        con = duckdb.connect()
        source = SOURCE
    try:
        if not isinstance(where, SharedLocation):
            _attach_file(con, where, wait_s)
        found = con.execute(f"SELECT count(*) FROM {source}.snapshots WHERE tag = ?", [tag]).fetchone()
        if not found or not found[0]:
            raise TagError(f"unknown snapshot {tag!r} (see `kdb tags`)")
        con.execute(
            f"CREATE TABLE memory.main.kernels AS SELECT * FROM {source}.kernels WHERE tag = ? ORDER BY name, cache_key",
            [tag],
        )
        con.execute("USE memory")
        con.execute(f"DETACH {source}")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        return con.table("kernels")
    except BaseException:
        con.close()
        raise
