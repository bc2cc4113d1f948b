"""The shared catalog: a DuckLake whose metadata lives in PostgreSQL and whose tables are Parquet files
under the shared store (`kdb --catalog ducklake:postgres:… --store PATH`).

The same schema files and queries serve both homes. DuckLake has no PRIMARY KEY or UNIQUE constraint,
so the schema is applied without them (`lake_sql`), and what they guaranteed locally is kept by
serialising every writing transaction instead: each one updates the single row of `kdb_commits`
first; DuckLake's optimistic concurrency lets exactly one of two overlapping writers commit, and the
other retries from the start (`CommitConflict`), seeing the first one's rows. Readers are never
blocked: they read the last committed DuckLake snapshot.

The DuckDB extensions come from the package index's wheels (`kdb[fleet]`), pinned to the DuckDB
version they were built for; nothing is downloaded at run time.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb
import platformdirs

from kdb.errors import KdbError, UsageError

LAKE_ALIAS = "kdb"
COMMITS_DDL = "CREATE TABLE IF NOT EXISTS kdb_commits (commits BIGINT NOT NULL)"
CLAIM_SQL = "UPDATE kdb_commits SET commits = commits + 1"
MAX_ATTEMPTS = 200
INIT_ATTEMPTS = 20
BACKOFF_S = (0.05, 1.0)

T = TypeVar("T")


class CommitConflict(Exception):
    """Another writer committed first; the transaction was rolled back and may be run again."""


def lake_sql(sql: str) -> str:
    """A schema file as DuckLake takes it: without PRIMARY KEY / UNIQUE constraints (the writers keep
    those properties themselves: see the module docstring)."""
    sql = re.sub(r",\s*\n\s*PRIMARY KEY \([^)]*\)", "", sql)
    return re.sub(r"\s+(PRIMARY KEY|UNIQUE)\b", "", sql)


def _extension_file(package: str, name: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(
            f"the shared catalog needs the DuckDB extension package {package.replace('_', '-')}: pip install 'kdb[fleet]'"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "extensions"
    wanted = root / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not wanted.exists():
        found = sorted(p.name for p in root.iterdir()) if root.exists() else []
        raise UsageError(
            f"{package.replace('_', '-')} ships extensions for {', '.join(found) or 'no version'}, but DuckDB is "
            f"v{duckdb.__version__}: an extension loads only into the version it was built for (pip install 'kdb[fleet]')"
        )
    return wanted


def extension_files() -> list[Path]:
    """The DuckLake and PostgreSQL extension files, ready for LOAD. The postgres wheel's file must be
    loaded under the name `postgres_scanner.duckdb_extension` (its entry point is `postgres_scanner_…`),
    so it is copied once under that name into kdb's cache directory."""
    ducklake = _extension_file("duckdb_extension_ducklake", "ducklake")
    postgres = _extension_file("duckdb_extension_postgres", "postgres")
    cache = Path(platformdirs.user_cache_dir("kdb", appauthor=False)) / "extensions" / f"v{duckdb.__version__}"
    scanner = cache / "postgres_scanner.duckdb_extension"
    if not scanner.exists() or scanner.stat().st_size != postgres.stat().st_size:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".copy-")
        os.close(fd)
        shutil.copyfile(postgres, tmp)
        os.replace(tmp, scanner)
    return [ducklake, scanner]


def load_extensions(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    for path in extension_files():
        con.execute(f"LOAD '{_quote(str(path))}'")


def _quote(text: str) -> str:
    return text.replace("'", "''")


def attach_sql(url: str, data_path: Path, *, read_only: bool, alias: str = LAKE_ALIAS) -> str:
    """The ATTACH statement kdb runs (and README documents) for a shared catalog."""
    options = [f"DATA_PATH '{_quote(str(data_path).rstrip('/') + '/')}'"]
    if read_only:
        options.append("READ_ONLY")
    return f"ATTACH '{_quote(url)}' AS {alias} ({', '.join(options)})"


def shell_sql(url: str, data_path: Path) -> str:
    """Statements that attach the shared catalog, read-only, in a DuckDB shell of the same version."""
    loads = "".join(f"LOAD '{_quote(str(p))}';\n" for p in extension_files())
    return f"{loads}{attach_sql(url, data_path, read_only=True)};\nUSE {LAKE_ALIAS};\n"


def connect_lake(url: str, data_path: Path, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    if not url.startswith("ducklake:"):
        raise UsageError(f"--catalog {url!r}: expected a DuckLake URL such as 'ducklake:postgres:dbname=kdb host=…'")
    con = duckdb.connect()
    try:
        load_extensions(con)
        if not read_only:
            data_path.mkdir(parents=True, exist_ok=True)
        for attempt in range(INIT_ATTEMPTS):
            try:
                con.execute(attach_sql(url, data_path, read_only=read_only))
                break
            except duckdb.Error as exc:
                # The first writers to reach an empty database race to create DuckLake's metadata tables;
                # the losers' transactions roll back and they find the winner's tables on the next try.
                if "initialize DuckLake" not in str(exc) or attempt == INIT_ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0.1, 0.5))
        con.execute(f"USE {LAKE_ALIAS}")
    except duckdb.Error as exc:
        con.close()
        raise KdbError(f"cannot attach the shared catalog {url!r}: {str(exc).splitlines()[0]}") from None
    return con


def is_conflict(exc: duckdb.Error) -> bool:
    text = str(exc)
    return isinstance(exc, duckdb.TransactionException) or "conflict" in text.lower()


def run_serialised(con: duckdb.DuckDBPyConnection, body: Callable[[], T], *, claim: bool = True) -> T:
    """Run body in one DuckLake transaction that first claims the commit row, retrying (with jittered
    backoff) when another writer commits first. body must be safe to run again from the start."""
    for attempt in range(MAX_ATTEMPTS):
        con.execute("BEGIN TRANSACTION")
        try:
            if claim:
                con.execute(CLAIM_SQL)
            result = body()
            con.execute("COMMIT")
            return result
        except duckdb.Error as exc:
            _rollback(con)
            if not is_conflict(exc):
                raise
        except BaseException:
            _rollback(con)
            raise
        time.sleep(min(BACKOFF_S[1], BACKOFF_S[0] * (1.5**attempt)) * random.uniform(0.5, 1.5))
    raise KdbError(f"shared catalog: gave up after {MAX_ATTEMPTS} conflicting commits")


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    with contextlib.suppress(duckdb.Error):  # a failed COMMIT has ended the transaction already
        con.execute("ROLLBACK")
