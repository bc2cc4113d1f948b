"""Writing the catalog: a whole snapshot in one transaction, removal, re-analysed rows, garbage and compaction."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdb.errors import CollectedMeanwhile, NotAppendable, TagError
from kdb.store.catalog.connection import (
    WRITE_MEMORY,
    WRITE_THREADS,
    literal,
)
from kdb.store.catalog.role import CatalogRole


@dataclass(frozen=True)
class RowSet:
    """Rows a snapshot names by digest and the catalog stores once per distinct content (schema/003, 008, 009)."""

    table: str  # the set table: set_digest + `columns`
    snapshot_column: str  # the snapshots column naming the set
    staged: str  # the staged table an ingest (or a transfer) fills with one snapshot's rows
    columns: str
    row_text: str  # each row as the text the digest is taken over (the migration's definition)
    order: str


# The Inductor rows' text: every value as text, so JSON staged as VARCHAR and JSON read back from a catalog
# hash alike (schema/008_inductor_module_sets.sql and 009_link_sets.sql compute the same).
ROW_SETS = (
    RowSet(
        "folder_sets",
        "folder_set",
        "folder_sets",
        "cache_key, folder_digest",
        "cache_key || ' ' || folder_digest",
        "cache_key",
    ),
    RowSet(
        "inductor_module_sets",
        "inductor_module_set",
        "inductor_modules",
        "path, kernel_name, heuristic, def_line, size_hints, triton_meta, inductor_meta, configs, kernel_perf_ms",
        "to_json([path, kernel_name, heuristic, def_line::VARCHAR, size_hints::VARCHAR, triton_meta::VARCHAR, "
        "inductor_meta::VARCHAR, configs::VARCHAR, kernel_perf_ms::VARCHAR])::VARCHAR",
        "path, kernel_name",
    ),
    RowSet(
        "kernel_module_sets",
        "kernel_module_set",
        "kernel_modules",
        "cache_key, module_path, kernel_name, link, detail",
        "to_json([cache_key, module_path, kernel_name, link, detail])::VARCHAR",
        "cache_key",
    ),
    RowSet(
        "autotune_result_sets",
        "autotune_result_set",
        "autotune_results",
        "source, path, entry, kernel_name, module_path, key, config, time_ms, timings, tuning_ms, is_best, "
        "found_by_coordesc, triton_cache_hash, cache_key, link, link_detail",
        "to_json([source, path, entry::VARCHAR, kernel_name, module_path, key::VARCHAR, config::VARCHAR, "
        "time_ms::VARCHAR, timings::VARCHAR, tuning_ms::VARCHAR, is_best::VARCHAR, found_by_coordesc::VARCHAR, "
        "triton_cache_hash, cache_key, link, link_detail])::VARCHAR",
        "path, entry",
    ),
)


class SnapshotSets(CatalogRole):
    """A snapshot's row sets (ROW_SETS): stored once per distinct set, named from the snapshot by digest."""

    def _record_set(self, rows: RowSet, source: str | None = None) -> str | None:
        """Digest of the staged snapshot's rows of ROWS (or of the relation `source`); they are added only
        when no snapshot recorded the same set before. None when the snapshot has none."""
        source = source or f"staged.{rows.staged}"
        digest = self._one(f"SELECT sha256(string_agg({rows.row_text}, chr(10) ORDER BY {rows.order})) FROM {source}")[
            0
        ]
        if (
            digest is not None
            and not self.con.execute(f"SELECT 1 FROM {rows.table} WHERE set_digest = ? LIMIT 1", [digest]).fetchone()
        ):
            self.con.execute(
                f"INSERT INTO {rows.table} (set_digest, {rows.columns}) SELECT ?, {rows.columns} FROM {source}",
                [digest],
            )
        return digest

    def _drop_unused_sets(self) -> None:
        """Forget the sets no snapshot names."""
        for rows in ROW_SETS:
            self.con.execute(
                f"DELETE FROM {rows.table} WHERE set_digest NOT IN "
                f"(SELECT {rows.snapshot_column} FROM snapshots WHERE {rows.snapshot_column} IS NOT NULL)"
            )


class SnapshotRows(SnapshotSets):
    """A staged snapshot's rows outside the row sets, its totals, and the capture's append (kdb/capture/)."""

    def _recount_files(self, sid: int) -> None:
        self.con.execute(
            "UPDATE snapshots SET file_count = (SELECT count(*) FROM files WHERE snapshot_id = $1), "
            "raw_bytes = (SELECT coalesce(sum(size), 0) FROM files WHERE snapshot_id = $1) WHERE snapshot_id = $1",
            [sid],
        )

    def _insert_staged(
        self, sid: int, staged: list[tuple[str, list[str]]], ensure_blobs: Callable[[list[str]], None] | None
    ) -> None:
        """The staged rows outside the row sets: per-snapshot rows under `sid`, folder-keyed rows of folders the
        catalog lacks, blobs it lacks."""
        present = self._check_staged_folders()
        if ensure_blobs is not None:
            ensure_blobs(
                [
                    r[0]
                    for r in self.con.execute(
                        "SELECT DISTINCT hash FROM staged.blobs WHERE hash NOT IN (SELECT hash FROM blobs)"
                    ).fetchall()
                ]
            )
        for name, columns in staged:
            cols = ", ".join(columns)
            if name in {rows.staged for rows in ROW_SETS} | {"file_stats"}:
                continue  # recorded above: once per distinct set / the directory's metadata index
            if present and "folder_digest" in columns:  # recorded by another writer meanwhile
                self.con.execute(
                    f"INSERT INTO {name} ({cols}) SELECT {cols} FROM staged.{name} "
                    "WHERE folder_digest NOT IN (SELECT unnest(?::VARCHAR[]))",
                    [present],
                )
            elif "snapshot_id" in self._column_types(name):
                self.con.execute(f"INSERT INTO {name} (snapshot_id, {cols}) SELECT ?, {cols} FROM staged.{name}", [sid])
            elif name == "blobs":
                self.con.execute(
                    "INSERT INTO blobs (hash, size, stored_size) SELECT hash, any_value(size), any_value(stored_size) "
                    "FROM staged.blobs WHERE hash NOT IN (SELECT hash FROM blobs) GROUP BY hash"
                )
            else:
                self.con.execute(f"INSERT INTO {name} ({cols}) SELECT {cols} FROM staged.{name}")

    def _check_appendable(self, sid: int, snapshot: dict[str, Any]) -> None:
        """An append joins only a snapshot made the same way: every label the appending snapshot carries
        (the capture's `captured_by`) must be the existing one's. Checked inside the writing transaction, so a
        `kdb ingest` that made the tag after the capture last looked is never appended to."""
        labels = dict(self._one("SELECT labels FROM snapshots WHERE snapshot_id = ?", [sid])[0] or {})
        for name, value in (snapshot.get("labels") or {}).items():
            if labels.get(name) != value:
                raise NotAppendable(
                    f"snapshot {snapshot['tag']!r} was not made with {name}={value}: nothing is added to it "
                    "(set another tag)"
                )

    def _append_snapshot(
        self, sid: int, snapshot: dict[str, Any], ensure_blobs: Callable[[list[str]], None] | None
    ) -> int:
        """Add the staged folders to snapshot `sid`: its folder set becomes the old set plus every staged
        cache key it lacked (a new set, stored once like any other); the other row sets gain the staged rows
        they lack. Counts and sizes are computed again from what the snapshot now holds."""
        staged = self.con.execute(
            "SELECT table_name, list(column_name ORDER BY ordinal_position) FROM information_schema.columns "
            "WHERE table_catalog = 'staged' GROUP BY table_name ORDER BY table_name"
        ).fetchall()
        names = {name for name, _ in staged}
        updates: dict[str, str | None] = {}
        for rows in ROW_SETS:
            if rows.staged not in names:
                continue
            old = self._one(f"SELECT {rows.snapshot_column} FROM snapshots WHERE snapshot_id = ?", [sid])[0]
            held = f"(SELECT {rows.columns} FROM {rows.table} WHERE set_digest = {literal(old or '')})"
            if rows.table == "folder_sets":  # a cache key names one folder: the first one recorded stays
                added = f"(SELECT {rows.columns} FROM staged.{rows.staged} WHERE cache_key NOT IN (SELECT cache_key FROM {held}))"
                union = f"(SELECT * FROM {held} UNION ALL SELECT * FROM {added})"
            else:
                union = f"(SELECT * FROM {held} UNION SELECT {rows.columns} FROM staged.{rows.staged})"
            updates[rows.snapshot_column] = self._record_set(rows, union)
        for column, digest in updates.items():
            self.con.execute(f"UPDATE snapshots SET {column} = ? WHERE snapshot_id = ?", [digest, sid])
        self._insert_staged(sid, [(n, c) for n, c in staged if n != "file_stats"], ensure_blobs)
        self.con.execute(
            "UPDATE snapshots SET new_bytes = new_bytes + ? WHERE snapshot_id = ?", [snapshot["new_bytes"], sid]
        )
        self._recount_files(sid)
        self._drop_unused_sets()
        self._update_snapshot_totals(sid)
        return sid

    def _check_staged_folders(self) -> list[str]:
        """Staged folders the catalog holds already (another writer recorded them since this ingest
        looked: shared home); raise CollectedMeanwhile when a folder the ingest skipped as known is gone."""
        gone = self._one(
            "SELECT count(DISTINCT folder_digest) FROM staged.folder_sets WHERE folder_digest NOT IN "
            "(SELECT folder_digest FROM folders UNION ALL SELECT folder_digest FROM staged.folders)"
        )[0]
        if gone:
            raise CollectedMeanwhile(f"{gone} known kernel folders were garbage-collected during the ingest")
        return [
            r[0]
            for r in self.con.execute(
                "SELECT folder_digest FROM folders WHERE folder_digest IN (SELECT folder_digest FROM staged.folders)"
            ).fetchall()
        ]

    def _update_snapshot_totals(self, sid: int) -> None:
        self.con.execute(
            """
            UPDATE snapshots SET
                kernel_count = (SELECT count(*) FROM kernels WHERE snapshot_id = $1),
                triton_versions = coalesce((SELECT list(DISTINCT triton_version ORDER BY triton_version)
                                   FROM kernels WHERE snapshot_id = $1 AND triton_version IS NOT NULL), []),
                targets = coalesce((SELECT list(DISTINCT backend || ':' || arch || ':' || warp_size ORDER BY 1)
                           FROM kernels WHERE snapshot_id = $1 AND backend IS NOT NULL), []),
                problem_count = (SELECT count(*) FROM problems WHERE tag = (SELECT tag FROM snapshots WHERE snapshot_id = $1)),
                stored_bytes = (SELECT coalesce(sum(stored_size), 0) FROM blobs
                                WHERE hash IN (SELECT hash FROM files WHERE snapshot_id = $1))
            WHERE snapshot_id = $1
            """,
            [sid],
        )


class SnapshotWriter(SnapshotRows):
    def write_snapshot(
        self,
        snapshot: dict[str, Any],
        staging: Path,
        *,
        replace: bool,
        ensure_blobs: Callable[[list[str]], None] | None = None,
        append: bool = False,
        relink: Callable[[int], Callable[[int], None]] | None = None,
    ) -> int:
        """Record a whole snapshot, staged by the ingest in `staging`, in one transaction: it appears
        completely or not at all.

        Tables with a snapshot_id column get the new id; blobs add only hashes the catalog lacks;
        folder-keyed rows arrive only for folders the catalog lacked. Counts and sizes are then
        computed from what was recorded.

        On a shared catalog the transaction is serialised with every other writer's and may run more than
        once; folders another writer recorded meanwhile are not recorded twice, and `ensure_blobs` is
        called (inside the transaction) with the hashes the catalog does not know yet, so that the store
        can confirm (and refresh, against a concurrent gc) the blobs before they are first named.

        `append` (kdb's Triton cache manager, kdb/capture/): when the tag exists, the staged folders join its
        snapshot instead (a cache key it holds already keeps its folder), in the same one transaction.

        `relink` (`kdb ingest --replace`, kdb/profile/importer.py): called with the replaced snapshot's id before its
        rows go; what it returns is called with the new snapshot's id at the end, in the same transaction (the
        replaced snapshot's profiles are linked to the new kernels, not dropped)."""
        # Without a limit DuckDB keeps every page the transaction writes cached (up to 80% of RAM): at
        # 10k kernels that made the commit the ingest's memory peak. Insertion order is irrelevant here.
        self.con.execute(f"SET memory_limit = '{WRITE_MEMORY}'")
        # DuckDB's joins and aggregates take buffers per thread: with a thread per core on 16 cores the commit
        # of a 10k-kernel re-ingest ran out of the 160 MB in 7 of 24 runs (Out of Memory, exit 7)
        self.con.execute(f"SET threads = {min(WRITE_THREADS, os.cpu_count() or 1)}")
        self.con.execute("SET preserve_insertion_order = false")
        self.con.execute(f"ATTACH {literal(str(staging))} AS staged (READ_ONLY)")
        try:
            return self.write(lambda: self._write_snapshot(snapshot, replace, ensure_blobs, append, relink))
        finally:
            self.con.execute("DETACH staged")

    def _write_snapshot(
        self,
        snapshot: dict[str, Any],
        replace: bool,
        ensure_blobs: Callable[[list[str]], None] | None,
        append: bool = False,
        relink: Callable[[int], Callable[[int], None]] | None = None,
    ) -> int:
        old = self.snapshot_id(snapshot["tag"])
        if old is not None and append:
            self._check_appendable(old, snapshot)
            return self._append_snapshot(old, snapshot, ensure_blobs)
        relinked = None
        if old is not None:
            if not replace:
                raise TagError(f"tag {snapshot['tag']!r} exists already (use --replace to overwrite it)")
            relinked = relink(old) if relink is not None else None
            self._delete_snapshot_rows(old)
        sid = self._one("SELECT coalesce(max(snapshot_id), 0) + 1 FROM snapshots")[0]
        staged = self.con.execute(
            "SELECT table_name, list(column_name ORDER BY ordinal_position) FROM information_schema.columns "
            "WHERE table_catalog = 'staged' GROUP BY table_name ORDER BY table_name"
        ).fetchall()
        names = {name for name, _ in staged}
        sets = [self._record_set(rows) if rows.staged in names else None for rows in ROW_SETS]
        labels = snapshot.get("labels") or {}
        self.con.execute(
            """
            INSERT INTO snapshots (snapshot_id, tag, created_at, source_path, host, kdb_version,
                triton_versions, targets, kernel_count, file_count, problem_count, raw_bytes,
                stored_bytes, new_bytes, labels, folder_set, inductor_module_set, kernel_module_set,
                autotune_result_set)
            VALUES (?, ?, ?, ?, ?, ?, [], [], 0, ?, 0, ?, 0, ?, MAP(?::VARCHAR[], ?::VARCHAR[]), ?, ?, ?, ?)
            """,
            [
                sid,
                snapshot["tag"],
                snapshot["created_at"],
                snapshot["source_path"],
                snapshot["host"],
                snapshot["kdb_version"],
                snapshot["file_count"],
                snapshot["raw_bytes"],
                snapshot["new_bytes"],
                list(labels.keys()),
                list(labels.values()),
                *sets,  # folder_set, inductor_module_set, kernel_module_set, autotune_result_set (ROW_SETS' order)
            ],
        )
        if "file_stats" in names:  # an ingest's (a transfer stages none)
            self._record_file_stats(snapshot["host"], snapshot["source_path"])
        self._insert_staged(sid, staged, ensure_blobs)
        if append:  # folders named without their files (adopted by the capture): count what the snapshot holds
            self._recount_files(sid)
        self._update_snapshot_totals(sid)
        if relinked is not None:
            relinked(sid)
        return sid

    def _record_file_stats(self, host: str, source_path: str) -> None:
        """The ingested directory's metadata index (schema/007_file_stats.sql): rows that changed are
        replaced, unchanged ones left alone (rewriting them grew the catalog at every re-ingest)."""
        where = [host, source_path]
        self.con.execute(
            "DELETE FROM file_stats f WHERE host = ? AND source_path = ? AND NOT EXISTS (SELECT 1 FROM "
            "staged.file_stats s WHERE s.path = f.path AND s.size = f.size AND s.mtime_ns = f.mtime_ns "
            "AND s.ino = f.ino AND s.hash = f.hash)",
            where,
        )
        self.con.execute(
            "INSERT INTO file_stats (host, source_path, path, size, mtime_ns, ino, hash) "
            "SELECT ?, ?, path, size, mtime_ns, ino, hash FROM staged.file_stats s "
            "WHERE NOT EXISTS (SELECT 1 FROM file_stats f WHERE f.host = ? AND f.source_path = ? AND f.path = s.path)",
            where + where,
        )

    def _delete_snapshot_rows(self, sid: int) -> None:
        for table in self._snapshot_tables():
            self.con.execute(f"DELETE FROM {table} WHERE snapshot_id = ?", [sid])
        self.con.execute("DELETE FROM snapshots WHERE snapshot_id = ?", [sid])
        self._drop_unused_sets()

    def delete_snapshot(self, tag: str) -> None:
        self.write(lambda: self._delete_snapshot_rows(self.require_snapshot(tag)))

    def replace_folder_rows(self, digests: Sequence[str], staging: Path, tables: Sequence[str]) -> None:
        """Swap the derived rows of these folders (kernel JSON rows and analysis) for the rows staged in
        `staging` (`kdb reindex`), in one transaction."""
        self.con.execute(f"SET memory_limit = '{WRITE_MEMORY}'")
        self.con.execute(f"ATTACH {literal(str(staging))} AS staged (READ_ONLY)")
        try:

            def body() -> None:
                for name in tables:
                    self.con.execute(
                        f"DELETE FROM {name} WHERE folder_digest IN (SELECT unnest(?::VARCHAR[]))", [list(digests)]
                    )
                    cols = ", ".join(c for c in self._column_types(name) if c in self._staged_columns(name))
                    self.con.execute(f"INSERT INTO {name} ({cols}) SELECT {cols} FROM staged.{name}")
                for (sid,) in self.con.execute("SELECT snapshot_id FROM snapshots").fetchall():
                    self._update_snapshot_totals(sid)

            self.write(body)
        finally:
            self.con.execute("DETACH staged")

    def _staged_columns(self, table: str) -> list[str]:
        rows = self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_catalog = 'staged' AND table_name = ? "
            "ORDER BY ordinal_position",
            [table],
        ).fetchall()
        return [r[0] for r in rows]

    def drop_unreferenced(self) -> int:
        """Forget folders no snapshot holds, then blobs no file uses; return how many blob rows went."""
        return self.write(self._drop_unreferenced)

    def _drop_unreferenced(self) -> int:
        self._drop_unused_sets()
        for table in self._folder_tables():
            self.con.execute(
                f"DELETE FROM {table} WHERE folder_digest NOT IN (SELECT DISTINCT folder_digest FROM snapshot_folders)"
            )
        unused = (
            "hash NOT IN (SELECT hash FROM folder_files UNION SELECT hash FROM top_files "
            "UNION SELECT profile_hash FROM profile_files)"
        )
        n = self._one(f"SELECT count(*) FROM blobs WHERE {unused}")[0]
        self.con.execute(f"DELETE FROM blobs WHERE {unused}")
        return n
