"""The scratch DuckDB file an ingest spills its rows into before the snapshot is written in one transaction."""

from __future__ import annotations

from pathlib import Path

import duckdb

from kdb.store.catalog.connection import Table, bulk_insert

STAGING_MEMORY = "64MB"
CLOSE_MEMORY = "256MB"


class Staging:
    """One ingest's rows, spilled in batches to a scratch DuckDB file so that memory stays flat whatever
    the size of the cache; SnapshotWriter.write_snapshot then moves them into the catalog in one transaction."""

    def __init__(self, path: Path, schema: dict[str, dict[str, str]]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        Path(str(path) + ".wal").unlink(missing_ok=True)
        self.path = path
        self.schema = schema
        # DuckDB keeps written pages cached up to its memory limit (80% of RAM by default); a small limit
        # makes it write them out instead, which is what keeps an ingest's memory flat. One thread: with
        # one per core, DuckDB's JSON reader needed more than 64 MB for a 3 MB load (2 to 16 threads
        # measured), so loads ran under 128 MB and the parent grew by up to 70 MB for each; with one it
        # needs 40 MB (connection.JSON_LOAD_MEMORY). The staging file is written by one Python thread anyway.
        self.con = duckdb.connect(str(path), config={"memory_limit": STAGING_MEMORY, "threads": 1})
        for name, columns in schema.items():
            self.con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in columns.items())})")

    def add(self, table: Table) -> None:
        staged = Table(table.name, [c for c in table.columns if c != "snapshot_id"])
        staged.data = {c: table.data[c] for c in staged.columns}
        bulk_insert(self.con, staged, self.schema[table.name], via_json=True)

    def close(self) -> None:
        # the last checkpoint writes every table's final row groups at once: under the staging limit it failed
        # to pin a block on a real Inductor cache (resnet18, 391 folders, once loop rows were staged too)
        self.con.execute(f"SET memory_limit = '{CLOSE_MEMORY}'")
        self.con.execute("CHECKPOINT")
        self.con.close()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        Path(str(self.path) + ".wal").unlink(missing_ok=True)
