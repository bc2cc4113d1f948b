"""Read queries for `kdb diff` (kdb/diff/sides.py): kernel facts, documents, instruction mixes, stage files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kdb.store.catalog.role import CatalogRole


class DiffQueries(CatalogRole):
    def diff_kernels(self, tag: str) -> list[dict[str, Any]]:
        """Every kernel of a snapshot with its analysis facts, identity, digests and measured time (migration 011:
        NULL where no imported profile ran it). The JSON documents
        come only where the diff needs them to fill a gap (catalogs written before identities, options
        and metadata digests were recorded); `kernel_documents` fetches them for a deep view."""
        sid = self.require_snapshot(tag)
        # identity_parts (~1.4 KB of JSON a kernel) parsed once for the three parts the autotune groups read, not
        # once each (10k kernels: 0.60 -> 0.49 s a side)
        return self._dicts(
            """
            SELECT * EXCLUDE (ids), ids[1] AS identity_args, ids[2] AS identity_num_ctas,
                   ids[3]::VARCHAR[] AS identity_problem_constants
            FROM (
            SELECT k.*, kf.triton_version_source, kf.metadata_digest,
                   CASE WHEN k.identity IS NULL OR kf.metadata_digest IS NULL THEN kf.metadata END AS triton_metadata,
                   CASE WHEN a.identity_options IS NULL THEN a.identity_parts END AS identity_parts,
                   json_extract(a.identity_parts, ['$.args', '$.num_ctas', '$.problem_constants']) AS ids,
                   a.identity_options, a.ttir_digest, a.ttgir_digest, a.llir_digest, a.isa_digest,
                   a.instr_mix_digest, a.instr_groups, a.instr_note, p.problems,
                   t.launches AS measured_launches, t.total_ns AS measured_ns, t.share AS measured_share
            FROM kernels k
            JOIN kernel_folders kf USING (folder_digest)
            LEFT JOIN kernel_analysis a USING (folder_digest)
            LEFT JOIN (
                SELECT folder_digest, string_agg(stage || ': ' || reason, ' | ' ORDER BY stage, reason) AS problems
                FROM analysis_problems
                WHERE folder_digest IN (SELECT folder_digest FROM snapshot_folders WHERE snapshot_id = ?)
                GROUP BY folder_digest
            ) p USING (folder_digest)
            LEFT JOIN kernel_times t ON t.snapshot_id = k.snapshot_id AND t.cache_key = k.cache_key
            WHERE k.snapshot_id = ?
            )
            """,
            [sid, sid],
        )

    def autotune_configs(self, tag: str) -> list[dict[str, Any]]:
        """Every autotune row of a snapshot (`.best_config` winners and each timed config of Triton's
        `*.autotune.json`, schema/005_inductor.sql) with the `kernels` row of the folder linked to it (its
        columns NULL when none is), in file order."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            """
            SELECT r.* EXCLUDE (snapshot_id), k.* EXCLUDE (tag, cache_key, snapshot_id)
            FROM autotune_results r
            LEFT JOIN kernels k ON k.snapshot_id = r.snapshot_id AND k.cache_key = r.cache_key
            WHERE r.snapshot_id = ?
            ORDER BY r.source, r.path, r.entry
            """,
            [sid],
        )

    def diff_winners(self, tag: str) -> list[dict[str, Any]]:
        """The autotune winners of a snapshot (`.best_config` files, and the best entries of Triton's
        `*.autotune.json`), with the kernel folder each is linked to."""
        return [row for row in self.autotune_configs(tag) if row["is_best"]]

    def kernel_documents(self, folder_digests: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Triton JSON, code-object metadata, descriptor and `; Kernel info` of some kernel folders."""
        rows = self._dicts(
            """
            SELECT kf.folder_digest, kf.metadata AS triton_metadata, a.identity_parts, a.co_metadata,
                   a.descriptor, a.kernel_info
            FROM kernel_folders kf LEFT JOIN kernel_analysis a USING (folder_digest)
            WHERE kf.folder_digest IN (SELECT unnest(?::VARCHAR[]))
            """,
            [list(folder_digests)],
        )
        return {r.pop("folder_digest"): r for r in rows}

    def diff_instr_mix(self, tag: str, cache_keys: Sequence[str]) -> dict[str, list[tuple[str, str, int]]]:
        """Instruction mix of some kernels of a snapshot (from the source its analysis chose), as
        cache_key -> [(mnemonic, group, count)] (a deep view's side-by-side table)."""
        self.require_snapshot(tag)
        rows = self.con.execute(
            "SELECT cache_key, mnemonic, grp, count FROM instr_mix WHERE tag = ? "
            "AND cache_key IN (SELECT unnest(?::VARCHAR[])) ORDER BY cache_key, mnemonic, grp",
            [tag, list(cache_keys)],
        ).fetchall()
        out: dict[str, list[tuple[str, str, int]]] = {}
        for key, mnemonic, grp, count in rows:
            out.setdefault(key, []).append((mnemonic, grp, count))
        return out

    def diff_instr_mix_of_source(
        self, tag: str, cache_keys: Sequence[str], source: str
    ) -> dict[str, list[tuple[str, str, int]]]:
        """The mix one source gave (instr_mix_counts.source: sass, ptx, amdgcn, llvm-objdump) of some kernels of a
        snapshot, whichever source their analysis chose, as cache_key -> [(mnemonic, group, count)]; a kernel
        without that source has no rows. A diff whose sides chose different sources compares this one."""
        sid = self.require_snapshot(tag)
        rows = self.con.execute(
            "SELECT sf.cache_key, m.mnemonic, m.grp, m.count FROM snapshot_folders sf "
            "JOIN instr_mix_counts m USING (folder_digest) WHERE sf.snapshot_id = ? AND m.source = ? "
            "AND sf.cache_key IN (SELECT unnest(?::VARCHAR[])) ORDER BY 1, 2, 3",
            [sid, source, list(cache_keys)],
        ).fetchall()
        out: dict[str, list[tuple[str, str, int]]] = {}
        for key, mnemonic, grp, count in rows:
            out.setdefault(key, []).append((mnemonic, grp, count))
        return out

    def diff_instr_mix_by_loop(self, tag: str, cache_keys: Sequence[str]) -> dict[str, list[tuple[int, str, str, int]]]:
        """The same mix per loop depth (view instr_mix_by_loop, migration 010), as cache_key -> [(loop depth,
        mnemonic, group, count)]; a kernel whose loop nest is unknown has no rows."""
        self.require_snapshot(tag)
        rows = self.con.execute(
            "SELECT cache_key, loop_depth, mnemonic, grp, count FROM instr_mix_by_loop WHERE tag = ? "
            "AND cache_key IN (SELECT unnest(?::VARCHAR[])) ORDER BY cache_key, loop_depth, mnemonic, 4",
            [tag, list(cache_keys)],
        ).fetchall()
        out: dict[str, list[tuple[int, str, str, int]]] = {}
        for key, depth, mnemonic, grp, count in rows:
            out.setdefault(key, []).append((depth, mnemonic, grp, count))
        return out

    def source_lines_of(self, tag: str, cache_keys: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """cache_key -> the ISA's source-line rows (file, line, grp, count) of some kernels of a snapshot, in one
        query (a report's hot lines; kernel_detail gives the same rows for one kernel)."""
        self.require_snapshot(tag)
        rows = self._dicts(
            "SELECT cache_key, file, line, grp, count FROM source_lines WHERE tag = ? "
            "AND cache_key IN (SELECT unnest(?::VARCHAR[])) AND source IN ('amdgcn', 'ptx') "
            "ORDER BY cache_key, file, line, grp",
            [tag, list(cache_keys)],
        )
        out: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            out.setdefault(r.pop("cache_key"), []).append(r)
        return out

    def diff_mnemonic_counts(self, tag: str, cache_keys: Sequence[str]) -> dict[str, dict[str, int]]:
        """cache_key -> {mnemonic: count} (groups summed) of some kernels of a snapshot: what a diff
        compares when two mixes' digests differ. One "mnemonic count ..." string per kernel: at 10k
        kernels, 3x cheaper to bring into Python than 600k rows (mnemonics never hold a space)."""
        self.require_snapshot(tag)
        rows = self.con.execute(
            "SELECT cache_key, string_agg(mnemonic || ' ' || count, ' ') FROM instr_mix "
            "WHERE tag = ? AND cache_key IN (SELECT unnest(?::VARCHAR[])) GROUP BY cache_key",
            [tag, list(cache_keys)],
        ).fetchall()
        out: dict[str, dict[str, int]] = {}
        for key, joined in rows:
            parts = joined.split(" ")
            counts = dict(zip(parts[::2], map(int, parts[1::2]), strict=False))
            if 2 * len(counts) != len(parts):  # a mnemonic in two groups (MUBUF scratch and global): sum
                counts = {}
                for mnemonic, count in zip(parts[::2], map(int, parts[1::2]), strict=False):
                    counts[mnemonic] = counts.get(mnemonic, 0) + count
            out[key] = counts
        return out

    def diff_stage_blobs(self, tag: str, kind: str) -> dict[str, tuple[str, int]]:
        """cache_key -> (hash, size) of each kernel folder's first file (by path) of one kind: the one blob the
        autotune groups read of every kernel (its TTIR), without the snapshot's other files."""
        sid = self.require_snapshot(tag)
        rows = self.con.execute(
            "SELECT cache_key, arg_min(hash, path), arg_min(size, path) FROM files "
            "WHERE snapshot_id = ? AND cache_key IS NOT NULL AND kind = ? GROUP BY cache_key",
            [sid, kind],
        ).fetchall()
        return {key: (digest, size) for key, digest, size in rows}

    def diff_kernel_files(self, tag: str) -> list[dict[str, Any]]:
        """The files of every kernel folder of a snapshot (to read stage texts from the blob store)."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            "SELECT cache_key, path, kind, hash, size FROM files WHERE snapshot_id = ? AND cache_key IS NOT NULL ORDER BY path",
            [sid],
        )
