"""Measured time (schema/011_profiles.sql, 013_profile_identity.sql): the facts a profile import links launches by,
its one writing transaction, the rows `kdb ingest --replace` carries to the new snapshot, finding and removing one
profile, and the times `kdb show --kernel` prints."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kdb.store.catalog.connection import Table
from kdb.store.catalog.role import CatalogRole

PROFILE_TABLES = ("profile_kernel_times", "profile_unlinked", "profile_files")
PROFILE_FILE_COLUMNS = (
    "profile_hash, name, format, gzipped, size, launches, total_ns, imported_at, content_hash, device"
)


@dataclass(frozen=True)
class ProfileRows:
    """What one `kdb profile import` records for snapshot `tag`: the blobs of its files, a row per profile file,
    the measured times of linked launches, the launches no kernel folder was found for, and the profile_hashes of
    profiles it replaces (imported before, the same profile)."""

    tag: str
    blobs: list[dict[str, Any]]
    files: list[dict[str, Any]]
    times: list[dict[str, Any]]
    unlinked: list[dict[str, Any]]
    replaced: Sequence[str] = ()


class ProfileCatalog(CatalogRole):
    def profile_folders(self, tag: str, names: Sequence[str]) -> list[dict[str, Any]]:
        """Every kernel folder of the snapshot whose kernel has one of `names`, with what a launch is linked by:
        launch facts, its backend (Triton's JSON, else its code object's kind: Triton 2.3's JSON names none), its
        Inductor module and autotune winner's config, its code object's blob, the module's blob."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            """
            SELECT k.cache_key, k.name, k.num_warps, k.warp_size, k.registers, k.shared,
                   k.is_autotune_best AS is_best, k.inductor_module AS module,
                   (SELECT min(ff.hash) FROM folder_files ff
                    WHERE ff.folder_digest = k.folder_digest AND ff.kind IN ('cubin', 'hsaco')) AS code_hash,
                   coalesce(k.backend,
                            (SELECT CASE min(ff.kind) WHEN 'cubin' THEN 'cuda' WHEN 'hsaco' THEN 'hip' END
                             FROM folder_files ff
                             WHERE ff.folder_digest = k.folder_digest AND ff.kind IN ('cubin', 'hsaco'))) AS backend,
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

    def snapshot_targets(self, tag: str) -> list[str]:
        """The snapshot's targets, 'backend:arch:warp_size' (snapshots.targets: every kernel's)."""
        sid = self.require_snapshot(tag)
        return list(self._one("SELECT targets FROM snapshots WHERE snapshot_id = ?", [sid])[0] or [])

    def record_profiles(self, rows: ProfileRows, ensure_blobs: Callable[[list[str]], None] | None = None) -> None:
        """Record imported profile files of a snapshot in one transaction: a profile imported before under the tag
        (the same content: `files`' content_hash, or a profile_hash of `replaced`) has its rows replaced; blobs the
        catalog lacks are added, after `ensure_blobs` confirmed them (a shared home: refreshed against a concurrent
        gc, as an ingest's)."""
        blobs = rows.blobs

        def body() -> None:
            sid = self.require_snapshot(rows.tag)  # inside the transaction: a concurrent `kdb rm` is seen
            hashes = [f["profile_hash"] for f in rows.files] + list(rows.replaced)
            contents = [f["content_hash"] for f in rows.files]
            gone = [
                r[0]
                for r in self.con.execute(
                    "SELECT profile_hash FROM profile_files WHERE snapshot_id = ? AND (profile_hash IN "
                    "(SELECT unnest(?::VARCHAR[])) OR content_hash IN (SELECT unnest(?::VARCHAR[])))",
                    [sid, hashes, contents],
                ).fetchall()
            ]
            self._delete_profiles(sid, gone)
            known = {
                r[0]
                for r in self.con.execute(
                    "SELECT hash FROM blobs WHERE hash IN (SELECT unnest(?::VARCHAR[]))", [[b["hash"] for b in blobs]]
                ).fetchall()
            }
            if ensure_blobs is not None:
                ensure_blobs([b["hash"] for b in blobs if b["hash"] not in known])
            new_blobs = [b for b in blobs if b["hash"] not in known]
            if new_blobs:
                table = Table("blobs", list(new_blobs[0]))
                for row in new_blobs:
                    table.add(**row)
                self.insert(table)
            self.insert_profile_rows(sid, rows.files, rows.times, rows.unlinked)

        self.write(body)

    def insert_profile_rows(
        self, sid: int, files: list[dict[str, Any]], times: list[dict[str, Any]], unlinked: list[dict[str, Any]]
    ) -> None:
        """A snapshot's rows of profile files whose blobs the catalog holds, within the caller's transaction."""
        for name, rows in (("profile_files", files), ("profile_kernel_times", times), ("profile_unlinked", unlinked)):
            if not rows:
                continue
            table = Table(name, [*rows[0], "snapshot_id"])
            for row in rows:
                table.add(**row, snapshot_id=sid)
            self.insert(table)

    def _delete_profiles(self, sid: int, hashes: Sequence[str]) -> None:
        for name in PROFILE_TABLES:
            self.con.execute(
                f"DELETE FROM {name} WHERE snapshot_id = ? AND profile_hash IN (SELECT unnest(?::VARCHAR[]))",
                [sid, list(hashes)],
            )

    def profile_files_of(self, tag: str) -> list[dict[str, Any]]:
        """The profile files imported under a snapshot, oldest first."""
        return self.profile_files_by_id(self.require_snapshot(tag))

    def profile_files_by_id(self, sid: int) -> list[dict[str, Any]]:
        return self._dicts(
            f"SELECT {PROFILE_FILE_COLUMNS} FROM profile_files WHERE snapshot_id = ? ORDER BY imported_at, name",
            [sid],
        )

    def set_content_hashes(self, tag: str, hashes: dict[str, str]) -> None:
        """Fill content_hash (profile_hash -> the sha256 of its JSON) where migration 013 could not: files imported
        gzipped before it."""
        if not hashes:
            return

        def body() -> None:
            sid = self.require_snapshot(tag)
            for profile_hash, content_hash in hashes.items():
                self.con.execute(
                    "UPDATE profile_files SET content_hash = ? WHERE snapshot_id = ? AND profile_hash = ? "
                    "AND content_hash IS NULL",
                    [content_hash, sid, profile_hash],
                )

        self.write(body)

    def find_profiles(self, tag: str, key: str) -> list[dict[str, Any]]:
        """The snapshot's profile files that `key` names: by file name, or by the sha256 of the file as given or of
        its JSON (a prefix of 8 or more hex digits)."""
        sid = self.require_snapshot(tag)
        lowered = key.lower()
        by_hash = len(lowered) >= 8 and all(c in "0123456789abcdef" for c in lowered)
        return self._dicts(
            f"SELECT {PROFILE_FILE_COLUMNS} FROM profile_files WHERE snapshot_id = ? AND (name = ? OR (? AND "
            "(starts_with(profile_hash, ?) OR starts_with(coalesce(content_hash, ''), ?)))) ORDER BY imported_at, name",
            [sid, key, by_hash, lowered, lowered],
        )

    def remove_profile(self, tag: str, profile_hash: str) -> None:
        """Forget one profile file of a snapshot (its blob stays until `kdb gc`)."""
        self.write(lambda: self._delete_profiles(self.require_snapshot(tag), [profile_hash]))

    def profile_times(self, tag: str, cache_key: str) -> list[dict[str, Any]]:
        """The kernel folder's measured time per imported profile file, with its share of that file's GPU time."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            "SELECT p.name AS profile, p.format, t.launches, t.total_ns, t.total_ns / t.launches AS mean_ns, "
            "t.total_ns / p.total_ns AS share, t.link FROM profile_kernel_times t JOIN profile_files p "
            "USING (snapshot_id, profile_hash) WHERE t.snapshot_id = ? AND t.cache_key = ? ORDER BY p.name, p.profile_hash",
            [sid, cache_key],
        )
