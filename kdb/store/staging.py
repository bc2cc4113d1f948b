"""The scratch DuckDB file an ingest spills its rows into before the snapshot is written in one transaction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import BinaryIO

import duckdb

from kdb.store.catalog.connection import Table, bulk_insert, load_ndjson

STAGING_MEMORY = "64MB"
CLOSE_MEMORY = "256MB"
# Rows ingest workers encoded as newline-delimited JSON are appended to a spool file per table beside the
# staging file and loaded by DuckDB's JSON reader once this many bytes wait (and at the end).
SPOOL_LOAD_BYTES = 8 << 20  # the last load is serial (10k kernels: ~3 s with 32 MB)


class Staging:
    """One ingest's rows, spilled in batches to a scratch DuckDB file so that memory stays flat whatever
    the size of the cache; SnapshotWriter.write_snapshot then moves them into the catalog in one transaction."""

    def __init__(self, path: Path, schema: dict[str, dict[str, str]]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        Path(str(path) + ".wal").unlink(missing_ok=True)
        for spool in path.parent.glob(f"{path.name}.*.ndjson"):  # a killed ingest's
            spool.unlink(missing_ok=True)
        self.path = path
        self.schema = schema
        # DuckDB keeps written pages cached up to its memory limit (80% of RAM by default); a small limit
        # makes it write them out instead, which is what keeps an ingest's memory flat. One thread: with
        # one per core, DuckDB's JSON reader needed more than 64 MB for a 3 MB load (2 to 16 threads
        # measured), so loads ran under 128 MB and the parent grew by up to 70 MB for each; with one it
        # needs 40 MB (connection.JSON_LOAD_MEMORY). The staging file is written by one Python thread anyway.
        self.con = duckdb.connect(str(path), config={"memory_limit": STAGING_MEMORY, "threads": 1})
        self._spools: dict[str, tuple[BinaryIO, int]] = {}  # table -> (open spool file, bytes waiting)
        for name, columns in schema.items():
            self.con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in columns.items())})")

    def add(self, table: Table) -> None:
        staged = Table(table.name, [c for c in table.columns if c != "snapshot_id"])
        staged.data = {c: table.data[c] for c in staged.columns}
        bulk_insert(self.con, staged, self.schema[table.name], via_json=True)

    def add_encoded(self, name: str, data: bytes) -> None:
        """Rows of table NAME as newline-delimited JSON (kdb.store.ndjson, encoded by a worker):
        appended to the table's spool, loaded once SPOOL_LOAD_BYTES wait."""
        if not data:
            return
        fh, waiting = self._spools.get(name) or (self._spool_path(name).open("wb"), 0)
        fh.write(data)
        self._spools[name] = (fh, waiting + len(data))
        if waiting + len(data) >= SPOOL_LOAD_BYTES:
            self._load_spool(name)

    def _spool_path(self, name: str) -> Path:
        return Path(f"{self.path}.{name}.ndjson")

    def _load_spool(self, name: str) -> None:
        fh, waiting = self._spools.pop(name)
        fh.close()
        path = self._spool_path(name)
        if waiting and not load_ndjson(self.con, name, self.schema[name], path):
            # DuckDB's reader refused a value (a lone surrogate): the same rows through bound parameters
            table = Table(name, list(self.schema[name]))
            with path.open("rb") as lines:
                for line in lines:
                    table.add(**json.loads(line))
            bulk_insert(self.con, table, self.schema[name])
        path.unlink(missing_ok=True)

    def close(self) -> None:
        for name in list(self._spools):
            self._load_spool(name)
        # the last checkpoint writes every table's final row groups at once: under the staging limit it failed
        # to pin a block on a real Inductor cache (resnet18, 391 folders, once loop rows were staged too)
        self.con.execute(f"SET memory_limit = '{CLOSE_MEMORY}'")
        self.con.execute("CHECKPOINT")
        self.con.close()

    def remove(self) -> None:
        for name, (fh, _) in list(self._spools.items()):
            fh.close()
            self._spool_path(name).unlink(missing_ok=True)
        self._spools.clear()
        self.path.unlink(missing_ok=True)
        Path(str(self.path) + ".wal").unlink(missing_ok=True)
