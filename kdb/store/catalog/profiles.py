"""Measured time (schema/011_profiles.sql): the facts a profile import links launches by, its one writing
transaction, and the times `kdb show --kernel` prints."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kdb.store.catalog.connection import CatalogConnection, Table

PROFILE_TABLES = ("profile_kernel_times", "profile_unlinked", "profile_files")


class ProfileCatalog(CatalogConnection):
    def profile_folders(self, tag: str, names: Sequence[str]) -> list[dict[str, Any]]:
        """Every kernel folder of the snapshot whose kernel has one of `names`, with what a launch is linked by:
        launch facts, its Inductor module and autotune winner's config, its code object's blob, the module's blob."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            """
            SELECT k.cache_key, k.name, k.num_warps, k.warp_size, k.registers, k.shared,
                   k.is_autotune_best AS is_best, k.inductor_module AS module,
                   (SELECT min(ff.hash) FROM folder_files ff
                    WHERE ff.folder_digest = k.folder_digest AND ff.kind IN ('cubin', 'hsaco')) AS code_hash,
                   ik.inductor_meta->>'grid_type' AS grid_type,
                   (SELECT any_value(a.config::VARCHAR) FROM autotune_results a
                    WHERE a.snapshot_id = k.snapshot_id AND a.cache_key = k.cache_key AND a.is_best) AS config,
                   (SELECT any_value(f.hash) FROM files f
                    WHERE f.snapshot_id = k.snapshot_id AND f.path = k.inductor_module) AS module_hash,
                   (SELECT any_value(f.size) FROM files f
                    WHERE f.snapshot_id = k.snapshot_id AND f.path = k.inductor_module) AS module_size
            FROM kernels k
            LEFT JOIN inductor_kernels ik ON ik.snapshot_id = k.snapshot_id AND ik.cache_key = k.cache_key
            WHERE k.snapshot_id = ? AND k.name IN (SELECT unnest(?::VARCHAR[]))
            ORDER BY k.cache_key
            """,
            [sid, list(names)],
        )

    def record_profiles(
        self,
        tag: str,
        blobs: list[dict[str, Any]],
        files: list[dict[str, Any]],
        times: list[dict[str, Any]],
        unlinked: list[dict[str, Any]],
        ensure_blobs: Callable[[list[str]], None] | None = None,
    ) -> None:
        """Record imported profile files of a snapshot in one transaction: a file imported before under the tag
        (same content) has its rows replaced; blobs the catalog lacks are added, after `ensure_blobs` confirmed them
        (a shared home: refreshed against a concurrent gc, as an ingest's)."""

        def body() -> None:
            sid = self.require_snapshot(tag)  # inside the transaction: a concurrent `kdb rm` is seen
            hashes = [f["profile_hash"] for f in files]
            for name in PROFILE_TABLES:
                self.con.execute(
                    f"DELETE FROM {name} WHERE snapshot_id = ? AND profile_hash IN (SELECT unnest(?::VARCHAR[]))",
                    [sid, hashes],
                )
            known = {
                r[0]
                for r in self.con.execute(
                    "SELECT hash FROM blobs WHERE hash IN (SELECT unnest(?::VARCHAR[]))", [[b["hash"] for b in blobs]]
                ).fetchall()
            }
            if ensure_blobs is not None:
                ensure_blobs([b["hash"] for b in blobs if b["hash"] not in known])
            for name, rows in (
                ("blobs", [b for b in blobs if b["hash"] not in known]),
                ("profile_files", files),
                ("profile_kernel_times", times),
                ("profile_unlinked", unlinked),
            ):
                if not rows:
                    continue
                own: dict[str, int] = {} if name == "blobs" else {"snapshot_id": sid}
                table = Table(name, [*rows[0], *own])
                for row in rows:
                    table.add(**row, **own)
                self.insert(table)

        self.write(body)

    def profile_files_of(self, tag: str) -> list[dict[str, Any]]:
        """The profile files imported under a snapshot, oldest first."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            "SELECT profile_hash, name, format, gzipped, size, launches, total_ns, imported_at FROM profile_files "
            "WHERE snapshot_id = ? ORDER BY imported_at, name",
            [sid],
        )

    def profile_times(self, tag: str, cache_key: str) -> list[dict[str, Any]]:
        """The kernel folder's measured time per imported profile file, with its share of that file's GPU time."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            "SELECT p.name AS profile, p.format, t.launches, t.total_ns, t.total_ns / t.launches AS mean_ns, "
            "t.total_ns / p.total_ns AS share, t.link FROM profile_kernel_times t JOIN profile_files p "
            "USING (snapshot_id, profile_hash) WHERE t.snapshot_id = ? AND t.cache_key = ? ORDER BY p.name, p.profile_hash",
            [sid, cache_key],
        )
