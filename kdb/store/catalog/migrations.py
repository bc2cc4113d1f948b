"""The catalog's schema: the numbered migrations (tables and their data, append-only), applied in order, then
every view of views.sql created afresh whenever the catalog records another copy of that file (or none).

Views live in one file so that changing one is an edit there, never a copy of its whole body in a new
migration; a migration never sees a view (they are dropped before pending migrations run), so it reads and
writes tables only. Each function runs within its caller's transaction."""

from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources

import duckdb

from kdb.store.catalog import lake

MIGRATIONS_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       VARCHAR NOT NULL,
    applied_at TIMESTAMP NOT NULL DEFAULT (now()::TIMESTAMP)
)
"""
# One row: the digest of the views.sql a writer last created the views from.
VIEWS_TABLE_DDL = "CREATE TABLE IF NOT EXISTS schema_views (digest VARCHAR NOT NULL)"
VIEWS_FILE = "views.sql"
# views.sql as first written, when it took over the views migrations 001-013 had created one copy at a time. A
# catalog migrated by a kdb before views.sql (no schema_views table) holds exactly these views, so a reader takes
# it as it is while views.sql is unchanged (tests/test_views.py builds one with that kdb and compares).
MIGRATED_VIEWS_DIGEST = "2429fb44262948c3c4038c9beb5d57a6eb12fc362364eef44a387ffe852001ea"


def schema_files() -> list[tuple[int, str, str]]:
    """(version, file name, SQL) for every numbered schema file, in order."""
    out = []
    for entry in resources.files("kdb.schema").iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:3].isdigit():
            out.append((int(name[:3]), name, entry.read_text()))
    return sorted(out)


@functools.cache
def views_file() -> tuple[str, str]:
    """(SQL, SHA-256 of it) of schema/views.sql: every view of the catalog, in the order they are created."""
    sql = resources.files("kdb.schema").joinpath(VIEWS_FILE).read_text()
    return sql, hashlib.sha256(sql.encode()).hexdigest()


def view_names() -> list[str]:
    """The views views.sql creates, in its order."""
    return re.findall(r"^CREATE VIEW (\w+) AS$", views_file()[0], flags=re.MULTILINE)


def applied_migrations(con: duckdb.DuckDBPyConnection) -> list[tuple[int, str]]:
    return con.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()


def apply_migrations(con: duckdb.DuckDBPyConnection, *, shared: bool, limit: int | None = None) -> list[str]:
    """The schema files not applied yet (at most `limit`), in order (a DuckLake catalog takes them without
    PRIMARY KEY / UNIQUE: see lake.lake_sql); the names of those applied."""
    done = {v for v, _ in applied_migrations(con)}
    pending = [(version, name, sql) for version, name, sql in schema_files() if version not in done]
    if pending:
        drop_views(con)  # back from views.sql after the migrations (create_views)
    applied: list[str] = []
    for version, name, sql in pending[:limit]:
        con.execute(lake.lake_sql(sql) if shared else sql)
        con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [version, name])
        applied.append(name)
    return applied


def unapplied(con: duckdb.DuckDBPyConnection) -> list[str]:
    """What a writer would apply to the catalog: the schema files not applied yet, else views.sql when the
    catalog's views came from another copy of it, else nothing. Reads only."""
    try:
        done = {v for v, _ in applied_migrations(con)}
    except duckdb.CatalogException:
        done = set()
    missing = [name for version, name, _ in schema_files() if version not in done]
    if missing:
        return missing
    views = recorded_views(con) if _records_views(con) else MIGRATED_VIEWS_DIGEST
    return [] if views == views_file()[1] else [VIEWS_FILE]


def create_views(con: duckdb.DuckDBPyConnection, *, stale_only: bool) -> None:
    """Create every view of views.sql afresh and record its digest; `stale_only`: only when the catalog
    records another views.sql, or none."""
    sql, digest = views_file()
    if stale_only and recorded_views(con) == digest:
        return
    drop_views(con)
    con.execute(sql)
    con.execute(VIEWS_TABLE_DDL)
    con.execute("DELETE FROM schema_views")
    con.execute("INSERT INTO schema_views (digest) VALUES (?)", [digest])


def recorded_views(con: duckdb.DuckDBPyConnection) -> str | None:
    """The digest of the views.sql the catalog's views were created from (None: none recorded)."""
    if not _records_views(con):
        return None
    row = con.execute("SELECT digest FROM schema_views").fetchone()
    return row[0] if row else None


def _records_views(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_views' "
        "AND table_catalog = current_database()"
    ).fetchone()
    return bool(row and row[0])


def drop_views(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the views views.sql declares (a name that is still a table, before the migration that turns it
    into a view, stays)."""
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_type = 'VIEW' AND table_catalog = current_database()"
    ).fetchall()
    present = {row[0] for row in rows}
    for name in reversed(view_names()):
        if name in present:
            con.execute(f"DROP VIEW {name}")
