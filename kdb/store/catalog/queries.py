"""Read queries over the catalog: snapshots, files, kernels, integrity checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kdb.store.catalog.role import CatalogRole


class CatalogQueries(CatalogRole):
    def known_folders(self, cache_keys: Sequence[str]) -> dict[str, frozenset[str]]:
        """Folder digests the catalog already holds, per cache key (a re-ingest skips those folders)."""
        rows = self.con.execute(
            "SELECT cache_key, list(folder_digest) FROM folders WHERE cache_key IN (SELECT unnest(?::VARCHAR[])) "
            "GROUP BY cache_key",
            [list(cache_keys)],
        ).fetchall()
        return {key: frozenset(digests) for key, digests in rows}

    def file_stats(self, host: str, source_path: str) -> dict[str, tuple[int, int, int, str, int]]:
        """path -> (size, mtime_ns, inode, hash, stored size) of the files the last ingest of this directory on
        this host read (schema/007_file_stats.sql), for blobs the catalog still holds."""
        rows = self.con.execute(
            "SELECT f.path, f.size, f.mtime_ns, f.ino, f.hash, b.stored_size FROM file_stats f "
            "JOIN blobs b USING (hash) WHERE f.host = ? AND f.source_path = ?",
            [host, source_path],
        ).fetchall()
        return {path: (size, mtime, ino, digest, stored) for path, size, mtime, ino, digest, stored in rows}

    def link_facts(self, digests: Sequence[str]) -> list[dict[str, Any]]:
        """What an ingest links Inductor files by, for kernel folders the catalog holds already."""
        return self._dicts(
            "SELECT k.folder_digest, k.name, k.num_warps, k.num_stages, k.num_ctas, s.source_file, s.tensor_shapes "
            "FROM kernel_folders k LEFT JOIN kernel_sources s USING (folder_digest) "
            "WHERE k.folder_digest IN (SELECT unnest(?::VARCHAR[]))",
            [list(digests)],
        )

    def kernel_folders_of(self, tag: str) -> list[tuple[str, str]]:
        """(cache_key, folder_digest) of every kernel folder of a snapshot."""
        sid = self.require_snapshot(tag)
        return self.con.execute(
            "SELECT cache_key, folder_digest FROM kernels WHERE snapshot_id = ? ORDER BY cache_key", [sid]
        ).fetchall()

    def capture_index(self, tag: str, cache_keys: Sequence[str]) -> list[tuple[str, str, str, str, int]]:
        """(cache_key, folder_digest, file name, hash, size) of these folders of a snapshot: what kdb's Triton
        cache manager serves later reads of them from (kdb/capture/)."""
        sid = self.require_snapshot(tag)
        return self.con.execute(
            "SELECT sf.cache_key, sf.folder_digest, ff.name, ff.hash, ff.size FROM snapshot_folders sf "
            "JOIN folder_files ff USING (folder_digest) WHERE sf.snapshot_id = ? "
            "AND sf.cache_key IN (SELECT unnest(?::VARCHAR[])) ORDER BY 1, 3",
            [sid, list(cache_keys)],
        ).fetchall()

    def replay_sources(self, tag: str) -> list[dict[str, Any]]:
        """What a replay compiles each kernel of a snapshot from (kdb/replay/): the kernel's row, Triton's JSON, and
        the stored files of its folder (name, hash, size)."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            "SELECT sf.cache_key, k.name, k.backend, k.arch, k.warp_size, k.triton_version, k.metadata, "
            "list({'name': ff.name, 'hash': ff.hash, 'size': ff.size} ORDER BY ff.name) AS files "
            "FROM snapshot_folders sf JOIN kernel_folders k USING (folder_digest) "
            "JOIN folder_files ff USING (folder_digest) WHERE sf.snapshot_id = ? GROUP BY ALL ORDER BY sf.cache_key",
            [sid],
        )

    def snapshot_releases(self, tag: str) -> list[tuple[str | None, int]]:
        """(triton_version, kernels) of a snapshot, most kernels first."""
        sid = self.require_snapshot(tag)
        return self.con.execute(
            "SELECT triton_version, count(*) FROM kernels WHERE snapshot_id = ? GROUP BY 1 ORDER BY 2 DESC, 1",
            [sid],
        ).fetchall()

    def kernel_figures(self, tag: str, columns: Sequence[str]) -> dict[str, dict[str, Any]]:
        """cache_key -> {column: value} for these `kernels` view columns (figure names: identifiers only)."""
        if not all(c.isidentifier() for c in columns):
            raise ValueError(f"not column names: {columns}")
        sid = self.require_snapshot(tag)
        rows = self._dicts(
            f"SELECT cache_key, {', '.join(columns)} FROM kernels WHERE snapshot_id = ? ORDER BY cache_key", [sid]
        )
        return {r.pop("cache_key"): r for r in rows}

    def folder_files(self, digest: str) -> list[dict[str, Any]]:
        return self._dicts(
            "SELECT name, hash, size, kind FROM folder_files WHERE folder_digest = ? ORDER BY name", [digest]
        )

    def kernel_rows(self, tag: str, pattern: str) -> list[dict[str, Any]]:
        """Rows of the `kernels` view for kernels whose name matches (exact or glob, as `kdb diff --kernel`) or
        whose cache key, or its folder name (the last part of a nested key), starts with `pattern` (4 characters
        or more, any case)."""
        sid = self.require_snapshot(tag)
        prefix = pattern.upper() if len(pattern) >= 4 else "\x00"
        return self._dicts(
            "SELECT * EXCLUDE (snapshot_id, folder_digest) FROM kernels WHERE snapshot_id = ? AND (name = ? "
            "OR starts_with(upper(cache_key), ?) OR starts_with(upper(regexp_extract(cache_key, '[^/]*$')), ?) "
            "OR name GLOB ?) ORDER BY name, cache_key",
            [sid, pattern, prefix, prefix, pattern],
        )

    def kernel_detail(self, tag: str, cache_key: str) -> dict[str, Any]:
        sid = self.require_snapshot(tag)
        analysis = self._dicts(
            "SELECT a.* EXCLUDE (folder_digest) FROM kernel_analysis a JOIN snapshot_folders sf USING (folder_digest) "
            "WHERE sf.snapshot_id = ? AND sf.cache_key = ?",
            [sid, cache_key],
        )
        mix = self._dicts(
            "SELECT grp, mnemonic, count FROM instr_mix WHERE tag = ? AND cache_key = ? "
            "ORDER BY grp, count DESC, mnemonic",
            [tag, cache_key],
        )
        lines = self._dicts(
            "SELECT file, line, grp, count FROM source_lines WHERE tag = ? AND cache_key = ? "
            "AND source IN ('amdgcn', 'ptx') ORDER BY file, line, grp",
            [tag, cache_key],
        )
        problems = self._dicts(
            "SELECT path, stage, reason FROM problems WHERE tag = ? AND cache_key = ? ORDER BY path", [tag, cache_key]
        )
        return {"analysis": analysis[0] if analysis else {}, "mix": mix, "lines": lines, "problems": problems}

    SNAPSHOT_COLUMNS = """
        tag, created_at, source_path, host, kdb_version, triton_versions, targets, kernel_count,
        file_count, problem_count, raw_bytes, stored_bytes, new_bytes, labels
    """

    def list_snapshots(self) -> list[dict[str, Any]]:
        return self._dicts(f"SELECT {self.SNAPSHOT_COLUMNS} FROM snapshots ORDER BY created_at, tag")

    def get_snapshot(self, tag: str) -> dict[str, Any]:
        self.require_snapshot(tag)
        return self._dicts(f"SELECT {self.SNAPSHOT_COLUMNS} FROM snapshots WHERE tag = ?", [tag])[0]

    def snapshot_files(self, tag: str) -> list[dict[str, Any]]:
        sid = self.require_snapshot(tag)
        return self._dicts(
            "SELECT path, hash, size, kind, cache_key FROM files WHERE snapshot_id = ? ORDER BY path", [sid]
        )

    def snapshot_file(self, tag: str, path: str) -> dict[str, Any] | None:
        sid = self.require_snapshot(tag)
        rows = self._dicts("SELECT path, hash, size, kind FROM files WHERE snapshot_id = ? AND path = ?", [sid, path])
        return rows[0] if rows else None

    def kind_counts(self, tag: str) -> list[dict[str, Any]]:
        sid = self.require_snapshot(tag)
        return self._dicts(
            "SELECT kind, count(*) AS files, sum(size) AS bytes FROM files WHERE snapshot_id = ? GROUP BY kind ORDER BY kind",
            [sid],
        )

    def snapshot_problems(self, tag: str) -> list[dict[str, Any]]:
        self.require_snapshot(tag)
        return self._dicts(
            "SELECT path, cache_key, stage, reason FROM problems WHERE tag = ? ORDER BY path, stage", [tag]
        )

    def referenced_blobs(self) -> list[dict[str, Any]]:
        """Every blob the catalog refers to (snapshot files and imported profile files), with the size its rows say
        it has, how many rows use it, one of them (`example`) and every snapshot that holds it (`tags`)."""
        return self._dicts(
            """
            WITH refs AS (
                SELECT f.hash, f.size, s.tag, s.tag || ':' || f.path AS example
                FROM files f JOIN snapshots s USING (snapshot_id)
                UNION ALL  -- imported profile files (schema/011_profiles.sql)
                SELECT p.profile_hash, p.size, s.tag, s.tag || ': profile ' || p.name
                FROM profile_files p JOIN snapshots s USING (snapshot_id)
            )
            SELECT r.hash, any_value(r.size) AS size, count(DISTINCT r.size) AS sizes, count(*) AS refs,
                   min(r.example) AS example, list(DISTINCT r.tag ORDER BY r.tag) AS tags,
                   (b.hash IS NULL) AS unrecorded
            FROM refs r LEFT JOIN blobs b ON b.hash = r.hash
            GROUP BY r.hash, b.hash ORDER BY r.hash
            """
        )

    def dangling_rows(self) -> list[str]:
        """Rows that name a snapshot that does not exist: a sign of a catalog damaged outside kdb."""
        out = []
        for table in self._snapshot_tables():
            n = self._one(f"SELECT count(*) FROM {table} WHERE snapshot_id NOT IN (SELECT snapshot_id FROM snapshots)")[
                0
            ]
            if n:
                out.append(f"{table}: {n} rows name no snapshot")
        return out

    def all_blob_hashes(self) -> set[str]:
        return {r[0] for r in self.con.execute("SELECT hash FROM blobs").fetchall()}
