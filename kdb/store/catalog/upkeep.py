"""Space: DuckDB's free blocks (local catalog) and DuckLake's small and expired files (shared catalog), and the
copy of a catalog without its free space (`kdb gc`)."""

from __future__ import annotations

from pathlib import Path

from kdb.errors import KdbError
from kdb.store.catalog.connection import BLOCK_SIZE, STORAGE_VERSION, WRITE_MEMORY, literal
from kdb.store.catalog.role import CatalogRole


class CatalogUpkeep(CatalogRole):
    """Space: DuckDB's free blocks (local catalog) and DuckLake's small and expired files (shared catalog)."""

    def compact_lake(self, grace_s: float) -> None:
        """Shared catalog: merge the small Parquet files many ingests leave, and delete the files of
        DuckLake snapshots older than the grace period (readers older than that are not expected)."""
        older = f"now() - INTERVAL '{int(grace_s)} seconds'"
        self.con.execute("CALL ducklake_merge_adjacent_files(current_database())")
        self.con.execute(f"CALL ducklake_expire_snapshots(current_database(), older_than => {older})")
        self.con.execute(f"CALL ducklake_cleanup_old_files(current_database(), older_than => {older})")

    def space(self) -> tuple[int, int]:
        """(free bytes, total bytes) of the catalog file: DuckDB keeps the blocks a large commit or a
        delete left free and reuses them for later writes, but never gives them back to the file system."""
        block, total, free = self._one(
            "SELECT block_size, total_blocks, free_blocks FROM pragma_database_size() "
            "WHERE database_name = current_database()"
        )
        return free * block, total * block

    def copy_into(self, dest: Path) -> None:
        """Write every table, view and row of this catalog into a new file `dest` (same storage version
        and block size), leaving the free blocks behind. Checked: each table has as many rows in the copy."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        for leftover in (dest, Path(str(dest) + ".wal")):
            leftover.unlink(missing_ok=True)
        source = self._one("SELECT current_database()")[0]
        tables = [
            r[0]
            for r in self.con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY 1"
            ).fetchall()
        ]
        self.con.execute(
            f"SET memory_limit = '{WRITE_MEMORY}'"
        )  # as for an ingest's commit: else DuckDB caches the copy
        self.con.execute(
            f"ATTACH {literal(str(dest))} AS compacted (STORAGE_VERSION '{STORAGE_VERSION}', BLOCK_SIZE {BLOCK_SIZE})"
        )
        try:
            self.con.execute(f'COPY FROM DATABASE "{source}" TO compacted')
            for table in tables:
                a, b = self._one(
                    f'SELECT (SELECT count(*) FROM "{source}".main."{table}"), '
                    f'(SELECT count(*) FROM compacted.main."{table}")'
                )
                if a != b:
                    raise KdbError(f"catalog copy is incomplete: table {table} has {b} of {a} rows")
            self.con.execute("CHECKPOINT compacted")
        finally:
            self.con.execute("DETACH compacted")
