"""The DuckDB catalog: every SQL statement kdb runs outside schema/ lives in this module."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from kdb.errors import CatalogBusy, KdbError, TagError, UsageError

# Users open the catalog with the DuckDB shell they have (duckdb-cli 1.5.x on PyPI today); a newer
# library must not upgrade the file's storage format past what that shell reads.
STORAGE_VERSION = "v1.5.0"
# DuckDB's default 256 KiB block gives every table at least one block: a 6 MB floor for a small
# catalog, larger than the compressed store of a few hundred kernels. 16 KiB blocks (the smallest
# DuckDB allows; readable by the 1.5 shell) cut that floor to a few hundred KB.
BLOCK_SIZE = 16384
BUSY_POLL_S = 0.2
STAGING_MEMORY = "64MB"
WRITE_MEMORY = "160MB"  # DuckDB buffer limit while a snapshot is written into the catalog

MIGRATIONS_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       VARCHAR NOT NULL,
    applied_at TIMESTAMP NOT NULL DEFAULT (now()::TIMESTAMP)
)
"""


def schema_files() -> list[tuple[int, str, str]]:
    """(version, file name, SQL) for every numbered schema file, in order."""
    out = []
    for entry in resources.files("kdb.schema").iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:3].isdigit():
            out.append((int(name[:3]), name, entry.read_text()))
    return sorted(out)


def _is_lock_conflict(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() and ("Conflicting" in text or "Could not set lock" in text)


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


def _bulk_insert(con: duckdb.DuckDBPyConnection, table: Table, types: dict[str, str]) -> None:
    """Insert a column-wise Table in one statement (parameters only: no value ever enters the SQL text)."""
    if not len(table):
        return
    selects = ", ".join(f"unnest(${i + 1}::{types[c]}[]) AS {c}" for i, c in enumerate(table.columns))
    cols = ", ".join(table.columns)
    con.execute(f"INSERT INTO {table.name} ({cols}) SELECT {cols} FROM (SELECT {selects})",
                [table.data[c] for c in table.columns])


class Staging:
    """One ingest's rows, spilled in batches to a scratch DuckDB file so that memory stays flat whatever
    the size of the cache; Catalog.write_snapshot then moves them into the catalog in one transaction."""

    def __init__(self, path: Path, schema: dict[str, dict[str, str]]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        Path(str(path) + ".wal").unlink(missing_ok=True)
        self.path = path
        self.schema = schema
        # DuckDB keeps written pages cached up to its memory limit (80% of RAM by default); a small limit
        # makes it write them out instead, which is what keeps an ingest's memory flat.
        self.con = duckdb.connect(str(path), config={"memory_limit": STAGING_MEMORY})
        for name, columns in schema.items():
            self.con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in columns.items())})")

    def add(self, table: Table) -> None:
        staged = Table(table.name, [c for c in table.columns if c != "snapshot_id"])
        staged.data = {c: table.data[c] for c in staged.columns}
        _bulk_insert(self.con, staged, self.schema[table.name])

    def close(self) -> None:
        self.con.execute("CHECKPOINT")
        self.con.close()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        Path(str(self.path) + ".wal").unlink(missing_ok=True)


class Catalog:
    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> None:
        self.con = con
        self.path = path
        self.read_only = read_only

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, *, read_only: bool = False, wait_s: float = 10.0) -> Catalog:
        """Open (creating and migrating when writable) the catalog, retrying while another process holds it."""
        if not path.exists():
            if read_only:
                raise UsageError(f"no catalog at {path} yet: run `kdb ingest` first")
            cls._create(path)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                con = duckdb.connect(str(path), read_only=read_only)
                break
            except duckdb.IOException as exc:
                if not _is_lock_conflict(exc):
                    raise KdbError(f"cannot open catalog {path}: {str(exc).splitlines()[0]}") from None
                if time.monotonic() >= deadline:
                    raise CatalogBusy(f"catalog busy: {path} is held by another process (waited {wait_s:g} s)") from None
                time.sleep(BUSY_POLL_S)
            except duckdb.Error as exc:
                raise KdbError(f"cannot open catalog {path}: {str(exc).splitlines()[0]}") from None
        catalog = cls(con, path, read_only)
        if not read_only:
            catalog.migrate()
        else:
            catalog._check_migrated()
        return catalog

    @staticmethod
    def _create(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".creating")
        tmp.unlink(missing_ok=True)
        con = duckdb.connect()
        try:
            con.execute("ATTACH ? AS fresh (STORAGE_VERSION ?, BLOCK_SIZE ?)", [str(tmp), STORAGE_VERSION, BLOCK_SIZE])
            con.execute("DETACH fresh")
        finally:
            con.close()
        # Fully migrated under a temporary name, then renamed: a kill never leaves a half-made catalog
        # under the real name (a reader would otherwise find it "needing migration").
        con = duckdb.connect(str(tmp))
        try:
            Catalog(con, tmp, read_only=False).migrate()
            con.execute("CHECKPOINT")
        finally:
            con.close()
        tmp.replace(path)
        Path(str(tmp) + ".wal").unlink(missing_ok=True)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- migrations ------------------------------------------------------------------------------
    def applied_migrations(self) -> list[tuple[int, str]]:
        return self.con.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()

    def migrate(self) -> list[str]:
        self.con.execute(MIGRATIONS_TABLE_DDL)
        done = {v for v, _ in self.applied_migrations()}
        applied = []
        for version, name, sql in schema_files():
            if version in done:
                continue
            with self.transaction():
                self.con.execute(sql)
                self.con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [version, name])
            applied.append(name)
        return applied

    def _check_migrated(self) -> None:
        try:
            done = {v for v, _ in self.applied_migrations()}
        except duckdb.CatalogException:
            done = set()
        missing = [name for version, name, _ in schema_files() if version not in done]
        if missing:
            raise UsageError(f"catalog {self.path} needs migration ({', '.join(missing)}): run a writing kdb command (`kdb ingest`, `kdb gc`) to upgrade it")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    # -- generic bulk insert ---------------------------------------------------------------------
    def _column_types(self, table: str) -> dict[str, str]:
        rows = self.con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = ? AND table_catalog = current_database() ORDER BY ordinal_position", [table]
        ).fetchall()
        return dict(rows)

    def insert(self, table: Table) -> None:
        _bulk_insert(self.con, table, self._column_types(table.name))

    def staging_schema(self, tables: dict[str, list[str]]) -> dict[str, dict[str, str]]:
        """Column types, from the catalog, of the columns an ingest stages for each table."""
        out = {}
        for name, columns in tables.items():
            types = self._column_types(name)
            out[name] = {c: types[c] for c in columns if c != "snapshot_id"}
        return out

    # -- snapshots -------------------------------------------------------------------------------
    def snapshot_id(self, tag: str) -> int | None:
        row = self.con.execute("SELECT snapshot_id FROM snapshots WHERE tag = ?", [tag]).fetchone()
        return row[0] if row else None

    def require_snapshot(self, tag: str) -> int:
        sid = self.snapshot_id(tag)
        if sid is None:
            raise TagError(f"no snapshot tagged {tag!r} (see `kdb tags`)")
        return sid

    def known_folders(self, cache_keys: Sequence[str]) -> dict[str, frozenset[str]]:
        """Folder digests the catalog already holds, per cache key (a re-ingest skips those folders)."""
        rows = self.con.execute(
            "SELECT cache_key, list(folder_digest) FROM folders WHERE cache_key IN (SELECT unnest(?::VARCHAR[])) "
            "GROUP BY cache_key", [list(cache_keys)]).fetchall()
        return {key: frozenset(digests) for key, digests in rows}

    def write_snapshot(self, snapshot: dict[str, Any], staging: Path, *, replace: bool) -> int:
        """Record a whole snapshot, staged by the ingest in `staging`, in one transaction: it appears
        completely or not at all.

        Tables with a snapshot_id column get the new id; blobs add only hashes the catalog lacks;
        folder-keyed rows arrive only for folders the catalog lacked. Counts and sizes are then
        computed from what was recorded."""
        # Without a limit DuckDB keeps every page the transaction writes cached (up to 80% of RAM): at
        # 10k kernels that made the commit the ingest's memory peak. Insertion order is irrelevant here.
        self.con.execute(f"SET memory_limit = '{WRITE_MEMORY}'")
        self.con.execute("SET preserve_insertion_order = false")
        self.con.execute("ATTACH ? AS staged (READ_ONLY)", [str(staging)])
        try:
            return self._write_snapshot(snapshot, replace)
        finally:
            self.con.execute("DETACH staged")

    def _write_snapshot(self, snapshot: dict[str, Any], replace: bool) -> int:
        with self.transaction():
            old = self.snapshot_id(snapshot["tag"])
            if old is not None:
                if not replace:
                    raise TagError(f"tag {snapshot['tag']!r} exists already (use --replace to overwrite it)")
                self._delete_snapshot_rows(old)
            sid = self.con.execute("SELECT coalesce(max(snapshot_id), 0) + 1 FROM snapshots").fetchone()[0]
            folder_set = self._record_folder_set()
            labels = snapshot.get("labels") or {}
            self.con.execute(
                """
                INSERT INTO snapshots (snapshot_id, tag, created_at, source_path, host, kdb_version,
                    triton_versions, targets, kernel_count, file_count, problem_count, raw_bytes,
                    stored_bytes, new_bytes, labels, folder_set)
                VALUES (?, ?, ?, ?, ?, ?, [], [], 0, ?, 0, ?, 0, ?, MAP(?::VARCHAR[], ?::VARCHAR[]), ?)
                """,
                [
                    sid, snapshot["tag"], snapshot["created_at"], snapshot["source_path"], snapshot["host"],
                    snapshot["kdb_version"], snapshot["file_count"], snapshot["raw_bytes"], snapshot["new_bytes"],
                    list(labels.keys()), list(labels.values()), folder_set,
                ],
            )
            staged = self.con.execute(
                "SELECT table_name, list(column_name ORDER BY ordinal_position) FROM information_schema.columns "
                "WHERE table_catalog = 'staged' GROUP BY table_name ORDER BY table_name").fetchall()
            for name, columns in staged:
                cols = ", ".join(columns)
                if name == "folder_sets":
                    continue  # recorded above, once per distinct set
                if "snapshot_id" in self._column_types(name):
                    self.con.execute(f"INSERT INTO {name} (snapshot_id, {cols}) SELECT ?, {cols} FROM staged.{name}", [sid])
                elif name == "blobs":
                    self.con.execute(
                        "INSERT INTO blobs (hash, size, stored_size) SELECT hash, any_value(size), any_value(stored_size) "
                        "FROM staged.blobs WHERE hash NOT IN (SELECT hash FROM blobs) GROUP BY hash")
                else:
                    self.con.execute(f"INSERT INTO {name} ({cols}) SELECT {cols} FROM staged.{name}")
            self._update_snapshot_totals(sid)
        return sid

    def _record_folder_set(self) -> str | None:
        """Digest of the staged snapshot's (cache_key, folder_digest) set; its rows are added only when
        no snapshot recorded the same set before. None when the snapshot has no kernel folder."""
        digest = self.con.execute(
            "SELECT sha256(string_agg(cache_key || ' ' || folder_digest, chr(10) ORDER BY cache_key)) "
            "FROM staged.folder_sets").fetchone()[0]
        if digest is not None and not self.con.execute(
                "SELECT 1 FROM folder_sets WHERE set_digest = ? LIMIT 1", [digest]).fetchone():
            self.con.execute("INSERT INTO folder_sets (set_digest, cache_key, folder_digest) "
                             "SELECT ?, cache_key, folder_digest FROM staged.folder_sets", [digest])
        return digest

    def _drop_unused_folder_sets(self) -> None:
        self.con.execute("DELETE FROM folder_sets WHERE set_digest NOT IN "
                         "(SELECT folder_set FROM snapshots WHERE folder_set IS NOT NULL)")

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

    def _tables_with(self, column: str, *besides: str) -> list[str]:
        """Base tables holding `column` (other than `besides`): how rm and gc find every row to drop."""
        rows = self.con.execute(
            "SELECT DISTINCT table_name FROM information_schema.columns "
            "WHERE column_name = ? AND table_name <> ALL(?::VARCHAR[]) AND table_catalog = current_database() "
            "AND table_name IN (SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE')",
            [column, list(besides)],
        ).fetchall()
        return sorted(r[0] for r in rows)

    def _snapshot_tables(self) -> list[str]:
        return self._tables_with("snapshot_id", "snapshots")

    def _delete_snapshot_rows(self, sid: int) -> None:
        for table in self._snapshot_tables():
            self.con.execute(f"DELETE FROM {table} WHERE snapshot_id = ?", [sid])
        self.con.execute("DELETE FROM snapshots WHERE snapshot_id = ?", [sid])
        self._drop_unused_folder_sets()

    def delete_snapshot(self, tag: str) -> None:
        with self.transaction():
            self._delete_snapshot_rows(self.require_snapshot(tag))

    def _folder_tables(self) -> list[str]:
        """Tables keyed by folder content (everything with a folder_digest column except the folder sets)."""
        return self._tables_with("folder_digest", "folder_sets")

    def replace_folder_rows(self, digests: Sequence[str], tables: Sequence[Table]) -> None:
        """Swap the derived rows of these folders (kernel JSON rows and analysis) in one transaction."""
        with self.transaction():
            for table in tables:
                self.con.execute(f"DELETE FROM {table.name} WHERE folder_digest IN (SELECT unnest(?::VARCHAR[]))",
                                 [list(digests)])
                self.insert(table)
            for (sid,) in self.con.execute("SELECT snapshot_id FROM snapshots").fetchall():
                self._update_snapshot_totals(sid)

    def kernel_folders_of(self, tag: str) -> list[tuple[str, str]]:
        """(cache_key, folder_digest) of every kernel folder of a snapshot."""
        sid = self.require_snapshot(tag)
        return self.con.execute(
            "SELECT cache_key, folder_digest FROM kernels WHERE snapshot_id = ? ORDER BY cache_key", [sid]).fetchall()

    def folder_files(self, digest: str) -> list[dict[str, Any]]:
        return self._dicts("SELECT name, hash, size, kind FROM folder_files WHERE folder_digest = ? ORDER BY name",
                           [digest])

    def kernel_rows(self, tag: str, pattern: str) -> list[dict[str, Any]]:
        """Rows of the `kernels` view for kernels whose name or cache key matches (glob or exact)."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            "SELECT * EXCLUDE (snapshot_id, folder_digest) FROM kernels WHERE snapshot_id = ? AND (name = ? OR cache_key = ? "
            "OR name GLOB ?) ORDER BY name, cache_key",
            [sid, pattern, pattern, pattern],
        )

    def kernel_detail(self, tag: str, cache_key: str) -> dict[str, Any]:
        sid = self.require_snapshot(tag)
        analysis = self._dicts(
            "SELECT a.* EXCLUDE (folder_digest) FROM kernel_analysis a JOIN snapshot_folders sf USING (folder_digest) "
            "WHERE sf.snapshot_id = ? AND sf.cache_key = ?", [sid, cache_key])
        mix = self._dicts("SELECT grp, mnemonic, count FROM instr_mix WHERE tag = ? AND cache_key = ? "
                          "ORDER BY grp, count DESC, mnemonic", [tag, cache_key])
        lines = self._dicts("SELECT file, line, grp, count FROM source_lines WHERE tag = ? AND cache_key = ? "
                            "AND source IN ('amdgcn', 'ptx') ORDER BY file, line, grp", [tag, cache_key])
        problems = self._dicts("SELECT path, stage, reason FROM problems WHERE tag = ? AND cache_key = ? "
                               "ORDER BY path", [tag, cache_key])
        return {"analysis": analysis[0] if analysis else {}, "mix": mix, "lines": lines, "problems": problems}

    # -- reading ---------------------------------------------------------------------------------
    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

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
        return self._dicts("SELECT path, hash, size, kind, cache_key FROM files WHERE snapshot_id = ? ORDER BY path", [sid])

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
        return self._dicts("SELECT path, cache_key, stage, reason FROM problems WHERE tag = ? ORDER BY path, stage", [tag])

    def referenced_blobs(self) -> list[dict[str, Any]]:
        """Every blob the catalog refers to, with the size files say it has and how many files use it."""
        return self._dicts(
            """
            SELECT f.hash, any_value(f.size) AS size, count(DISTINCT f.size) AS sizes, count(*) AS refs,
                   any_value(s.tag || ':' || f.path) AS example, (b.hash IS NULL) AS unrecorded
            FROM files f JOIN snapshots s USING (snapshot_id) LEFT JOIN blobs b ON b.hash = f.hash
            GROUP BY f.hash, b.hash ORDER BY f.hash
            """
        )

    def dangling_rows(self) -> list[str]:
        """Rows that name a snapshot that does not exist: a sign of a catalog damaged outside kdb."""
        out = []
        for table in self._snapshot_tables():
            n = self.con.execute(
                f"SELECT count(*) FROM {table} WHERE snapshot_id NOT IN (SELECT snapshot_id FROM snapshots)"
            ).fetchone()[0]
            if n:
                out.append(f"{table}: {n} rows name no snapshot")
        return out

    def all_blob_hashes(self) -> set[str]:
        return {r[0] for r in self.con.execute("SELECT hash FROM blobs").fetchall()}

    def drop_unreferenced(self) -> int:
        """Forget folders no snapshot holds, then blobs no file uses; return how many blob rows went."""
        with self.transaction():
            self._drop_unused_folder_sets()
            for table in self._folder_tables():
                self.con.execute(f"DELETE FROM {table} WHERE folder_digest NOT IN "
                                 "(SELECT DISTINCT folder_digest FROM snapshot_folders)")
            unused = "hash NOT IN (SELECT hash FROM folder_files UNION SELECT hash FROM top_files)"
            n = self.con.execute(f"SELECT count(*) FROM blobs WHERE {unused}").fetchone()[0]
            self.con.execute(f"DELETE FROM blobs WHERE {unused}")
        return n

    # -- compaction (`kdb gc`) ---------------------------------------------------------------------
    def space(self) -> tuple[int, int]:
        """(free bytes, total bytes) of the catalog file: DuckDB keeps the blocks a large commit or a
        delete left free and reuses them for later writes, but never gives them back to the file system."""
        block, total, free = self.con.execute(
            "SELECT block_size, total_blocks, free_blocks FROM pragma_database_size() "
            "WHERE database_name = current_database()").fetchone()
        return free * block, total * block

    def copy_into(self, dest: Path) -> None:
        """Write every table, view and row of this catalog into a new file `dest` (same storage version
        and block size), leaving the free blocks behind. Checked: each table has as many rows in the copy."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        for leftover in (dest, Path(str(dest) + ".wal")):
            leftover.unlink(missing_ok=True)
        source = self.con.execute("SELECT current_database()").fetchone()[0]
        tables = [r[0] for r in self.con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY 1").fetchall()]
        self.con.execute(f"SET memory_limit = '{WRITE_MEMORY}'")  # as for an ingest's commit: else DuckDB caches the copy
        self.con.execute("ATTACH ? AS compacted (STORAGE_VERSION ?, BLOCK_SIZE ?)", [str(dest), STORAGE_VERSION, BLOCK_SIZE])
        try:
            self.con.execute(f'COPY FROM DATABASE "{source}" TO compacted')
            for table in tables:
                a, b = self.con.execute(f'SELECT (SELECT count(*) FROM "{source}".main."{table}"), '
                                        f'(SELECT count(*) FROM compacted.main."{table}")').fetchone()
                if a != b:
                    raise KdbError(f"catalog copy is incomplete: table {table} has {b} of {a} rows")
            self.con.execute("CHECKPOINT compacted")
        finally:
            self.con.execute("DETACH compacted")

    def query(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run a user's SQL (the user's own text by design: `kdb sql`), on a read-only connection."""
        try:
            cur = self.con.execute(sql)
        except duckdb.Error as exc:
            raise UsageError(f"SQL error: {str(exc).splitlines()[0]}") from None
        if cur.description is None:
            return [], []
        return [d[0] for d in cur.description], cur.fetchall()

    # -- reading for `kdb diff` (kdb/diff.py) ------------------------------------------------------
    def diff_kernels(self, tag: str) -> list[dict[str, Any]]:
        """Every kernel of a snapshot with its analysis facts, identity and digests. The JSON documents
        come only where the diff needs them to fill a gap (catalogs written before identities, options
        and metadata digests were recorded); `kernel_documents` fetches them for a deep view."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            """
            SELECT k.*, kf.triton_version_source, kf.metadata_digest,
                   CASE WHEN k.identity IS NULL OR kf.metadata_digest IS NULL THEN kf.metadata END AS triton_metadata,
                   CASE WHEN a.identity_options IS NULL THEN a.identity_parts END AS identity_parts,
                   a.identity_options, a.ttir_digest, a.ttgir_digest, a.llir_digest, a.isa_digest,
                   a.instr_mix_digest, a.instr_groups
            FROM kernels k
            JOIN kernel_folders kf USING (folder_digest)
            LEFT JOIN kernel_analysis a USING (folder_digest)
            WHERE k.snapshot_id = ?
            """,
            [sid],
        )

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
            [tag, list(cache_keys)]).fetchall()
        out: dict[str, list[tuple[str, str, int]]] = {}
        for key, mnemonic, grp, count in rows:
            out.setdefault(key, []).append((mnemonic, grp, count))
        return out

    def diff_mnemonic_counts(self, tag: str, cache_keys: Sequence[str]) -> dict[str, dict[str, int]]:
        """cache_key -> {mnemonic: count} (groups summed) of some kernels of a snapshot: what a diff
        compares when two mixes' digests differ. One "mnemonic count ..." string per kernel: at 10k
        kernels, 3x cheaper to bring into Python than 600k rows (mnemonics never hold a space)."""
        self.require_snapshot(tag)
        rows = self.con.execute(
            "SELECT cache_key, string_agg(mnemonic || ' ' || count, ' ') FROM instr_mix "
            "WHERE tag = ? AND cache_key IN (SELECT unnest(?::VARCHAR[])) GROUP BY cache_key",
            [tag, list(cache_keys)]).fetchall()
        out: dict[str, dict[str, int]] = {}
        for key, joined in rows:
            parts = joined.split(" ")
            counts = dict(zip(parts[::2], map(int, parts[1::2])))
            if 2 * len(counts) != len(parts):  # a mnemonic in two groups (MUBUF scratch and global): sum
                counts = {}
                for mnemonic, count in zip(parts[::2], map(int, parts[1::2])):
                    counts[mnemonic] = counts.get(mnemonic, 0) + count
            out[key] = counts
        return out

    def diff_kernel_files(self, tag: str) -> list[dict[str, Any]]:
        """The files of every kernel folder of a snapshot (to read stage texts from the blob store)."""
        sid = self.require_snapshot(tag)
        return self._dicts(
            "SELECT cache_key, path, kind, hash, size FROM files WHERE snapshot_id = ? AND cache_key IS NOT NULL ORDER BY path",
            [sid],
        )
