"""The catalog connection: opening (waiting while another process holds the file), creating, migrating,
transactions, bulk inserts and the helpers every catalog query shares."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

import duckdb

# DuckDB 1.5's Python client tries `import pandas` for every parameter value it converts (to recognise
# pandas objects). Where pandas is not installed each try searches sys.path again: 4 failed imports per
# value made a 50,000-row insert take 7.1 s instead of 0.6 s. A None entry makes the import fail at once,
# which is what it would do anyway.
if importlib.util.find_spec("pandas") is None:
    sys.modules.setdefault("pandas", None)  # type: ignore[arg-type]

from kdb.errors import CatalogBusy, KdbError, TagError, UsageError
from kdb.store import ndjson
from kdb.store.catalog import lake, migrations
from kdb.store.catalog.migrations import MIGRATIONS_TABLE_DDL
from kdb.store.catalog.migrations import schema_files as schema_files  # where kdb.store.catalog takes it from
from kdb.store.home import SharedLocation

# Users open the catalog with the DuckDB shell they have (duckdb-cli 1.5.x on PyPI today); a newer
# library must not upgrade the file's storage format past what that shell reads.
STORAGE_VERSION = "v1.5.0"
# DuckDB's default 256 KiB block gives every table at least one block: a 6 MB floor for a small
# catalog, larger than the compressed store of a few hundred kernels. 16 KiB blocks (the smallest
# DuckDB allows; readable by the 1.5 shell) cut that floor to a few hundred KB.
BLOCK_SIZE = 16384
BUSY_POLL_S = 0.2
T = TypeVar("T")
WRITE_MEMORY = "160MB"  # DuckDB buffer limit while a snapshot is written into the catalog
WRITE_THREADS = 4  # DuckDB threads while it is written (memory per thread: see SnapshotWriter.write_snapshot)
# Below this many values (list elements counted one by one), binding parameters is as fast as writing and
# reading a file: every bound value, list elements included, is converted one by one in DuckDB's Python
# client (its `import pandas` tries are cut short by the None entry above, the conversion is not).
JSON_LOAD_MIN_VALUES = 10000
# DuckDB's limit while its JSON reader loads one table's rows (the staging file's one thread needs 40 MB;
# the 128 MB a thread per core needed let the loads make the ingest's parent up to 70 MB larger at 10k kernels)
JSON_LOAD_MEMORY = "64MB"
# DuckDB's limit while the CHECKPOINT after such a load writes the table's row groups: a checkpoint pins a
# block per column segment it compresses, and under 64 MB it failed to pin one on the real H100 mlp Inductor
# cache (372 kernels, once loop rows were staged). The pages it writes are evictable once it ends.
CHECKPOINT_MEMORY = "256MB"


def literal(text: str) -> str:
    """A SQL string literal, for the few statements that take no parameters (ATTACH in DuckDB 1.5)."""
    return "'" + text.replace("'", "''") + "'"


def _is_lock_conflict(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() and ("Conflicting" in text or "Could not set lock" in text)


def connect_file(
    path: Path, *, read_only: bool, wait_s: float, config: dict[str, str | bool | int | float | list[str]] | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to the catalog file, retrying while another process holds it (up to wait_s)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=config or {})
        except duckdb.IOException as exc:
            if not _is_lock_conflict(exc):
                raise KdbError(f"cannot open catalog {path}: {str(exc).splitlines()[0]}") from None
            if time.monotonic() >= deadline:
                raise CatalogBusy(f"catalog busy: {path} is held by another process (waited {wait_s:g} s)") from None
            time.sleep(BUSY_POLL_S)
        except duckdb.Error as exc:
            raise KdbError(f"cannot open catalog {path}: {str(exc).splitlines()[0]}") from None


@dataclass
class Table:
    """Rows for one table, column-wise, ready for a single bulk insert."""

    name: str
    columns: list[str]
    data: dict[str, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data = {c: [] for c in self.columns}

    def add(self, **row: Any) -> None:
        for c in self.columns:
            self.data[c].append(row.get(c))

    def __len__(self) -> int:
        return len(self.data[self.columns[0]]) if self.columns else 0

    def clear(self) -> None:
        self.data = {c: [] for c in self.columns}


def bulk_insert(con: duckdb.DuckDBPyConnection, table: Table, types: dict[str, str], *, via_json: bool = False) -> None:
    """Insert a column-wise Table in one statement (no value ever enters the SQL text). Large tables go
    through a newline-delimited JSON file that DuckDB's own reader parses: binding Python values as
    parameters costs DuckDB 1.5 three failed `import pandas` per value (a third of a first ingest's
    catalog time); the parameter path stays for small tables and for values JSON cannot carry. `via_json`
    only on a connection outside any transaction (an ingest's staging file): the load ends with a CHECKPOINT."""
    if not len(table):
        return
    if via_json and value_count(table) >= JSON_LOAD_MIN_VALUES and _insert_via_json(con, table, types):
        return
    selects = ", ".join(f"unnest(${i + 1}::{types[c]}[]) AS {c}" for i, c in enumerate(table.columns))
    cols = ", ".join(table.columns)
    con.execute(
        f"INSERT INTO {table.name} ({cols}) SELECT {cols} FROM (SELECT {selects})",
        [table.data[c] for c in table.columns],
    )


def value_count(table: Table) -> int:
    """Values a parameter binding would convert: one per cell, one per element of a list cell."""
    count = 0
    for column in table.data.values():
        count += len(column)
        if any(isinstance(v, list) for v in column[:1]):
            count += sum(len(v) for v in column if v)
    return count


def _insert_via_json(con: duckdb.DuckDBPyConnection, table: Table, types: dict[str, str]) -> bool:
    """False (nothing inserted) when a value has no faithful JSON form (NaN, a lone surrogate…)."""
    columns = table.columns
    with tempfile.NamedTemporaryFile("w", suffix=".ndjson", encoding="ascii", delete=False) as fh:
        path = Path(fh.name)
        try:
            rows = zip(*(table.data[c] for c in columns), strict=True)
            fh.writelines(ndjson.encode(dict(zip(columns, row, strict=True))) + "\n" for row in rows)
        except (ValueError, UnicodeEncodeError):
            path.unlink(missing_ok=True)
            return False
    try:
        return load_ndjson(con, table.name, types, path)
    finally:
        path.unlink(missing_ok=True)


def load_ndjson(con: duckdb.DuckDBPyConnection, name: str, types: dict[str, str], path: Path) -> bool:
    """Insert the rows of a newline-delimited JSON file (ndjson_rows) into table NAME, whose columns and types
    are TYPES, through DuckDB's JSON reader, then CHECKPOINT; False (nothing inserted) when DuckDB cannot read
    a value (a lone surrogate). On a connection outside any transaction (an ingest's staging file)."""
    columns = list(types)
    # JSON-typed columns hold JSON text: read as text, then cast (a JSON value would be read as itself)
    read_as = {c: ("VARCHAR" if types[c] == "JSON" else types[c]) for c in columns}
    spec = "{" + ", ".join(f"{literal(c)}: {literal(t)}" for c, t in read_as.items()) + "}"
    selects = ", ".join(f'CAST("{c}" AS JSON) AS "{c}"' if types[c] == "JSON" else f'"{c}"' for c in columns)
    # DuckDB's JSON reader needs its 32 MiB buffer within the limit, whatever the connection's own is
    limit = con.execute("SELECT current_setting('memory_limit')").fetchone()
    con.execute(f"SET memory_limit = '{JSON_LOAD_MEMORY}'")
    try:
        con.execute(
            f"INSERT INTO {name} ({', '.join(columns)}) SELECT {selects} FROM read_json({literal(str(path))}, "
            f"format = 'newline_delimited', columns = {spec}, maximum_object_size = 1048576)"
        )
        return True
    except duckdb.Error:
        return False
    finally:
        # written out while the higher limit holds: back under the low one, DuckDB must be able to evict
        # what the load cached, or its next automatic checkpoint fails to pin a block (seen at 10k kernels)
        con.execute(f"SET memory_limit = '{CHECKPOINT_MEMORY}'")
        con.execute("CHECKPOINT")
        if limit is not None:
            con.execute(f"SET memory_limit = {literal(str(limit[0]))}")


class CatalogConnection:
    """One DuckDB connection to the catalog; the query classes of this package build on it."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, path: Path | str, read_only: bool, *, shared: bool = False
    ) -> None:
        self.con = con
        self.path = path
        self.read_only = read_only
        self.shared = shared  # a DuckLake catalog (kdb/store/catalog/lake.py): many writers, no lock

    @classmethod
    def open(cls, path: Path | SharedLocation, *, read_only: bool = False, wait_s: float = 10.0) -> Self:
        """Open (creating and migrating when writable) the catalog, retrying while another process holds it."""
        if isinstance(path, SharedLocation):
            return cls._open_shared(path, read_only)
        if not path.exists():
            if read_only:
                raise UsageError(f"no catalog at {path} yet: run `kdb ingest` first")
            cls._create(path)
        con = connect_file(path, read_only=read_only, wait_s=wait_s)
        catalog = cls(con, path, read_only)
        try:
            if not read_only:
                catalog.migrate()
            else:
                catalog._check_migrated()
        except BaseException:
            con.close()  # the file stays open in this process otherwise, to the next open's confusion
            raise
        return catalog

    @classmethod
    def _open_shared(cls, where: SharedLocation, read_only: bool) -> Self:
        con = lake.connect_lake(where.url, where.data_path, read_only=read_only)
        catalog = cls(con, where.url, read_only, shared=True)
        try:
            if read_only:
                catalog._check_migrated()
            else:
                lake.run_serialised(con, catalog._migrate_shared, claim=False)
        except BaseException:
            con.close()
            raise
        return catalog

    def _migrate_shared(self) -> list[str]:
        """Create (first writer) or upgrade the shared catalog in one transaction; concurrent first
        writers conflict on CREATE TABLE and the losers retry, finding the tables made."""
        self.con.execute(lake.lake_sql(MIGRATIONS_TABLE_DDL))
        self.con.execute(lake.COMMITS_DDL)
        if self._one("SELECT count(*) FROM kdb_commits")[0] == 0:
            self.con.execute("INSERT INTO kdb_commits VALUES (0)")
        applied = self._apply_migrations()
        migrations.create_views(self.con, stale_only=not applied)
        return applied

    @classmethod
    def _create(cls, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".creating")
        tmp.unlink(missing_ok=True)
        con = duckdb.connect()
        try:
            con.execute(
                f"ATTACH {literal(str(tmp))} AS fresh (STORAGE_VERSION '{STORAGE_VERSION}', BLOCK_SIZE {BLOCK_SIZE})"
            )
            con.execute("DETACH fresh")
        finally:
            con.close()
        # Fully migrated under a temporary name, then renamed: a kill never leaves a half-made catalog
        # under the real name (a reader would otherwise find it "needing migration").
        con = duckdb.connect(str(tmp))
        try:
            cls(con, tmp, read_only=False).migrate()
            con.execute("CHECKPOINT")
        finally:
            con.close()
        tmp.replace(path)
        Path(str(tmp) + ".wal").unlink(missing_ok=True)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def applied_migrations(self) -> list[tuple[int, str]]:
        return migrations.applied_migrations(self.con)

    def migrate(self) -> list[str]:
        if self.shared:
            return lake.run_serialised(self.con, self._migrate_shared, claim=False)
        self.con.execute(MIGRATIONS_TABLE_DDL)
        applied: list[str] = []
        while True:  # locally, one transaction per schema file
            with self.transaction():
                step = self._apply_migrations(limit=1)
            if not step:
                break
            applied += step
        with self.transaction():
            migrations.create_views(self.con, stale_only=not applied)
        return applied

    def _apply_migrations(self, limit: int | None = None) -> list[str]:
        """The schema files not applied yet, in order, within the caller's transaction (kdb/store/catalog/migrations.py)."""
        return migrations.apply_migrations(self.con, shared=self.shared, limit=limit)

    def _check_migrated(self) -> None:
        missing = migrations.unapplied(self.con)
        if missing:
            raise UsageError(
                f"catalog {self.path} needs migration ({', '.join(missing)}): run a writing kdb command (`kdb ingest`, `kdb gc`) to upgrade it"
            )

    def write(self, body: Callable[[], T]) -> T:
        """Run a writing body in one transaction. On a shared catalog the transaction first claims the
        commit row (serialising writers across hosts) and is run again from the start when another writer
        committed first, so body must only read and write the catalog."""
        if self.shared:
            return lake.run_serialised(self.con, body)
        with self.transaction():
            return body()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def _column_types(self, table: str) -> dict[str, str]:
        rows = self.con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = ? AND table_catalog = current_database() ORDER BY ordinal_position",
            [table],
        ).fetchall()
        return dict(rows)

    def insert(self, table: Table) -> None:
        bulk_insert(self.con, table, self._column_types(table.name))

    def staging_schema(self, tables: dict[str, list[str]]) -> dict[str, dict[str, str]]:
        """Column types, from the catalog, of the columns an ingest stages for each table."""
        out = {}
        for name, columns in tables.items():
            types = self._column_types(name)
            out[name] = {c: types[c] for c in columns if c != "snapshot_id"}
        return out

    def snapshot_id(self, tag: str) -> int | None:
        row = self.con.execute("SELECT snapshot_id FROM snapshots WHERE tag = ?", [tag]).fetchone()
        return row[0] if row else None

    def require_snapshot(self, tag: str) -> int:
        sid = self.snapshot_id(tag)
        if sid is None:
            raise TagError(f"no snapshot tagged {tag!r} (see `kdb tags`)")
        return sid

    def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
        """The one row a query always returns (an aggregate, a pragma)."""
        row = self.con.execute(sql, list(params)).fetchone()
        assert row is not None, sql
        return row

    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=False)) for row in cur.fetchall()]

    def _tables_with(self, column: str, *besides: str) -> list[str]:
        """Base tables holding `column` (other than `besides`): how rm and gc find every row to drop."""
        rows = self.con.execute(
            "SELECT DISTINCT table_name FROM information_schema.columns "
            "WHERE column_name = ? AND table_name <> ALL(?::VARCHAR[]) AND table_catalog = current_database() "
            "AND table_name IN (SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "AND table_catalog = current_database())",  # not a staged table of the same name as a view here
            [column, list(besides)],
        ).fetchall()
        return sorted(r[0] for r in rows)

    def _snapshot_tables(self) -> list[str]:
        return self._tables_with("snapshot_id", "snapshots")

    def _folder_tables(self) -> list[str]:
        """Tables keyed by folder content (everything with a folder_digest column except the folder sets)."""
        return self._tables_with("folder_digest", "folder_sets")
