"""Moving a snapshot between catalogs (`kdb push` / `kdb pull`): its rows are staged from the source
catalog into a scratch DuckDB file of the same shape an ingest stages, and SnapshotWriter.write_snapshot
records them in the destination in one transaction, exactly as an ingest's rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from kdb.errors import KdbError
from kdb.store.catalog.connection import literal
from kdb.store.catalog.role import CatalogRole
from kdb.store.catalog.writer import ROW_SETS

# Tables that are not a snapshot's rows: the snapshot row itself (the writer makes it), the migrations and
# views applied, the shared catalog's commit counter and the ingested directories' metadata index (of one host).
NOT_STAGED = ("snapshots", "schema_migrations", "schema_views", "kdb_commits", "file_stats")
# The blobs a snapshot references ($1: its id): its files' and its imported profile files' (schema/011).
SNAPSHOT_HASHES = (
    "SELECT hash FROM files WHERE snapshot_id = $1 UNION SELECT profile_hash FROM profile_files WHERE snapshot_id = $1"
)


class SnapshotTransfer(CatalogRole):
    def snapshot_content(self, tag: str) -> str:
        """What a snapshot holds, as one digest: its kernel-folder set and its top-level files. Two snapshots
        with the same digest have the same files and the same analysis rows."""
        sid = self.require_snapshot(tag)
        folder_set, top = self._one(
            "SELECT folder_set, (SELECT sha256(coalesce(string_agg(path || ' ' || hash, chr(10) ORDER BY path), '')) "
            "FROM top_files WHERE snapshot_id = $1) FROM snapshots WHERE snapshot_id = $1",
            [sid],
        )
        return f"{folder_set or '-'}:{top}"

    def snapshot_blobs(self, tag: str) -> list[tuple[str, int]]:
        """(hash, raw size) of every distinct blob a snapshot references."""
        sid = self.require_snapshot(tag)
        return [
            (h, s)
            for h, s in self.con.execute(
                f"SELECT b.hash, b.size FROM blobs b WHERE b.hash IN ({SNAPSHOT_HASHES}) ORDER BY b.hash",
                [sid],
            ).fetchall()
        ]

    def stage_snapshot(self, tag: str, staging: Path) -> dict[str, Any]:
        """Write every row of the snapshot (its own rows, and the rows of its folders and blobs) into a new
        DuckDB file `staging`, without snapshot ids; return the snapshot's row as write_snapshot takes it."""
        sid = self.require_snapshot(tag)
        snapshot = self._dicts(
            "SELECT tag, created_at, source_path, host, kdb_version, file_count, raw_bytes, new_bytes, labels, "
            f"{', '.join(rows.snapshot_column for rows in ROW_SETS)} FROM snapshots WHERE snapshot_id = ?",
            [sid],
        )[0]
        sets = {rows.table: snapshot.pop(rows.snapshot_column) for rows in ROW_SETS}
        snapshot["labels"] = dict(snapshot["labels"] or {})
        # The source may be open read-only (no ATTACH of a new file then): each table's rows go through a
        # Parquet file, which keeps every column type (JSON, MAP, lists), into the new staging file.
        tables = self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "AND table_catalog = current_database() AND table_name <> ALL(?::VARCHAR[]) ORDER BY 1",
            [list(NOT_STAGED)],
        ).fetchall()
        parts: list[tuple[str, Path]] = []
        for (table,) in tables:
            select, params = self._snapshot_rows(table, sid, sets)
            # a set's rows are staged under the name an ingest stages them with (the writer records the set)
            name = next((rows.staged for rows in ROW_SETS if rows.table == table), table)
            part = staging.with_name(f"{name}.parquet")
            self.con.execute(f"COPY ({select}) TO {literal(str(part))} (FORMAT parquet)", params)
            parts.append((name, part))
        out = duckdb.connect(str(staging))
        try:
            for table, part in parts:
                out.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet({literal(str(part))})")
                part.unlink()
            out.execute("CHECKPOINT")
        finally:
            out.close()
        return snapshot

    def _snapshot_rows(self, table: str, sid: int, sets: dict[str, str | None]) -> tuple[str, list[Any]]:
        """The SELECT of one table's rows that belong to a snapshot (without its snapshot id); SETS: the
        digests of the snapshot's folder set and Inductor module set."""
        columns = self._column_types(table)
        folder_set = sets["folder_sets"]
        if "snapshot_id" in columns:
            return f"SELECT * EXCLUDE (snapshot_id) FROM {table} WHERE snapshot_id = ?", [sid]
        rows = next((rows for rows in ROW_SETS if rows.table == table), None)
        if rows is not None:
            return f"SELECT {rows.columns} FROM {table} WHERE set_digest = ?", [sets[table]]
        if "folder_digest" in columns:
            return (
                f"SELECT * FROM {table} WHERE folder_digest IN "
                "(SELECT folder_digest FROM folder_sets WHERE set_digest = ?)",
                [folder_set],
            )
        if table == "blobs":
            return f"SELECT * FROM blobs WHERE hash IN ({SNAPSHOT_HASHES})", [sid]
        # a table added by a later migration must say how a snapshot's rows are found
        raise KdbError(f"catalog table {table} has no rule for moving a snapshot")
