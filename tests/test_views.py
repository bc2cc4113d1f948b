"""The catalog's views, declared once (schema/views.sql) and created by writers after the numbered migrations:
a catalog the kdb before views.sql made reads and writes through every view exactly as one made afresh, and a
reader of a catalog whose views are older than views.sql is sent to a writing command, which renews them."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import corpus_cache
import duckdb
import pytest
from conftest import ROOT, archive_of
from helpers import kdb
from pgserver import PgServer

from kdb.errors import UsageError
from kdb.store.catalog import Catalog, schema_files
from kdb.store.catalog.migrations import MIGRATED_VIEWS_DIGEST, view_names, views_file
from kdb.store.home import LAKE_DIR, SharedLocation

# The last commit whose migrations created the views (one whole copy of a view per change).
BEFORE_VIEWS_SQL = "9a1da6e"
SNAPSHOT = "t3.4.0-sm90"  # small (41 kernels), and NVIDIA: PTX mix, SASS, source lines and loop rows all filled
# The views views.sql changed since the first views.sql (MIGRATED_VIEWS_DIGEST): each renamed column, old name
# -> new, which keeps its place, its old name a copy of it appended last; every other view, column and row reads
# as the kdb before views.sql made it. Issue 40: instr_mix_by_loop's group is grp, as in every other view.
CHANGED_SINCE_MIGRATED = {"instr_mix_by_loop": {"group": "grp"}}


def views_of(catalog: Path) -> dict[str, tuple[str, list[tuple[str, str]], list[tuple]]]:
    """Every view of a catalog file: its SQL as DuckDB keeps it, its columns and types, and its rows."""
    con = duckdb.connect(str(catalog), read_only=True)
    try:
        return views_on(con)
    finally:
        con.close()


def views_on(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, list[tuple[str, str]], list[tuple]]]:
    out = {}
    for name, sql in con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND database_name = current_database()"
    ).fetchall():
        columns = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
            "AND table_catalog = current_database() ORDER BY ordinal_position",
            [name],
        ).fetchall()
        out[name] = (sql, columns, con.execute(f"SELECT * FROM {name} ORDER BY ALL").fetchall())
    return out


def renamed_as(view: tuple[str, list[tuple[str, str]], list[tuple]], names: dict[str, str | None]) -> tuple:
    """A view's columns and rows (views_on's, its SQL left out) with the columns of `names` renamed (None:
    left out), the rows sorted."""
    _, columns, rows = view
    keep = [i for i, (column, _) in enumerate(columns) if names.get(column, column) is not None]
    named = [(names.get(columns[i][0], columns[i][0]), columns[i][1]) for i in keep]
    return named, sorted((tuple(row[i] for i in keep) for row in rows), key=repr)


def test_instr_mix_by_loop_names_its_group_grp_and_keeps_the_old_name(ingested_copy):
    """instr_mix_by_loop's group is grp, as in instr_mix (issue 40); "group" is the same value under the old
    name, last; per kernel and group the loop depths add up to instr_mix's counts."""
    home = ingested_copy([(SNAPSHOT, SNAPSHOT)])
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    try:
        columns = [r[0] for r in con.execute("DESCRIBE instr_mix_by_loop").fetchall()]
        rows, differing = con.execute(
            'SELECT count(*), count(*) FILTER (WHERE grp IS DISTINCT FROM "group") FROM instr_mix_by_loop'
        ).fetchone()
        by_group = "SELECT tag, cache_key, grp, sum(count) FROM {} WHERE cache_key IN "
        by_group += "(SELECT cache_key FROM instr_mix_by_loop) GROUP BY ALL ORDER BY ALL"
        loop_sums, mix_sums = (con.execute(by_group.format(v)).fetchall() for v in ("instr_mix_by_loop", "instr_mix"))
    finally:
        con.close()
    assert columns == ["tag", "cache_key", "loop_depth", "grp", "mnemonic", "count", "group"]
    assert rows > 0 and differing == 0
    assert loop_sums and loop_sums == mix_sums


def old_kdb() -> dict[str, str]:
    """The environment that runs the kdb of BEFORE_VIEWS_SQL as `python -m kdb` (its own code, from git,
    extracted once per commit and shared read-only)."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", f"{BEFORE_VIEWS_SQL}^{{commit}}"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not commit:
        pytest.skip(f"commit {BEFORE_VIEWS_SQL} (the kdb before views.sql) is not in this clone's history")

    def build(tree: Path) -> None:
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "kdb", "schema"], capture_output=True)
        assert tar.returncode == 0, tar.stderr
        with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as members:
            members.extractall(tree, filter="data")
        (tree / "schema").rename(tree / "kdb" / "schema")  # where its package data installs

    code = corpus_cache.cached("code-before-views-sql", {"commit": commit}, build)
    return os.environ | {"PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}


def old_kdb_ingest(env: dict[str, str], tag: str, *home: str) -> None:
    """`kdb [--home HOME] ingest SNAPSHOT --tag TAG -q` by the kdb of BEFORE_VIEWS_SQL (env: old_kdb's)."""
    cache = corpus_cache.unpacked(archive_of(tag))
    cmd = [sys.executable, "-m", "kdb", *home, "ingest", str(cache), "--tag", tag, "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def old_kdb_home(tag: str) -> Path:
    """A kdb home in which the kdb of BEFORE_VIEWS_SQL ingested snapshot `tag`, built once per commit and
    archive and shared read-only."""
    env = old_kdb()
    parts = {
        "code": env["PYTHONPATH"],
        "archive": corpus_cache.file_sha256(archive_of(tag)),
        "duckdb": duckdb.__version__,
    }
    return corpus_cache.cached(
        "homes-before-views-sql", parts, lambda tree: old_kdb_ingest(env, tag, "--home", str(tree))
    )


def test_views_sql_declares_every_view_and_no_migration_does(tmp_path):
    """A view's only definition is views.sql: no numbered migration creates or drops one, and views.sql's
    views are the fresh catalog's."""
    assert [name for _, name, sql in schema_files() if re.search(r"\b(CREATE|DROP) VIEW\b", sql)] == []
    with Catalog.open(tmp_path / "catalog.duckdb") as catalog:
        made = {r[0] for r in catalog.con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        recorded = catalog.con.execute("SELECT digest FROM schema_views").fetchall()
    assert sorted(view_names()) == sorted(made) and len(made) == 19
    assert recorded == [(views_file()[1],)]


@pytest.mark.slow  # outside the inner loop: 3 s on 2 cores (the old kdb ingests twice)
def test_a_catalog_of_the_kdb_before_views_sql_reads_and_writes_as_a_fresh_one(capsys, ingested_copy, tmp_path):
    """Views, columns, types, view SQL and every view's rows are the same in a catalog made afresh and in one
    the kdb before views.sql made, read as it is, opened by a writer, and written (a second ingest)."""
    fresh_home = ingested_copy([(SNAPSHOT, SNAPSHOT)])
    old_home = corpus_cache.clone(old_kdb_home(SNAPSHOT), tmp_path / "old-home")
    fresh = views_of(fresh_home / "catalog.duckdb")
    assert {name: len(rows) for name, (_, _, rows) in fresh.items() if rows}.keys() >= {
        "kernels",
        "instr_mix",
        "ptx_mix",
        "source_lines",
        "instr_mix_by_loop",
        "snapshot_files",
    }
    old = views_of(old_home / "catalog.duckdb")
    assert old.keys() == fresh.keys()
    assert {k: v for k, v in old.items() if k not in CHANGED_SINCE_MIGRATED} == {
        k: v for k, v in fresh.items() if k not in CHANGED_SINCE_MIGRATED
    }
    for name, renamed in CHANGED_SINCE_MIGRATED.items():
        assert renamed_as(fresh[name], {old: None for old in renamed}) == renamed_as(old[name], renamed)
    # as the old kdb left it: a reader takes it while views.sql is still the file that replaced the migrations'
    if views_file()[1] == MIGRATED_VIEWS_DIGEST:
        with Catalog.open(old_home / "catalog.duckdb", read_only=True) as catalog:
            assert catalog.snapshot_id(SNAPSHOT) == 1
        assert kdb(capsys, old_home, "sql", "SELECT count(*) AS n FROM kernels", "--format", "json").json() == [
            {"n": len(fresh["kernels"][2])}
        ]
    else:
        with pytest.raises(UsageError, match=r"needs migration \(views\.sql\)"):
            Catalog.open(old_home / "catalog.duckdb", read_only=True)
    with Catalog.open(old_home / "catalog.duckdb") as catalog:  # a writer records the views it created
        assert catalog.con.execute("SELECT digest FROM schema_views").fetchall() == [(views_file()[1],)]
    assert views_of(old_home / "catalog.duckdb") == fresh
    cache = corpus_cache.unpacked(archive_of(SNAPSHOT))
    for home in (old_home, fresh_home):
        assert kdb(capsys, home, "ingest", str(cache), "--tag", "again", "-q").code == 0
    again = views_of(fresh_home / "catalog.duckdb")
    assert sum(len(rows) for _, _, rows in again.values()) > sum(len(rows) for _, _, rows in fresh.values())
    assert views_of(old_home / "catalog.duckdb") == again


def test_older_views_send_a_reader_to_a_writing_command_and_a_writer_renews_them(capsys, ingested_copy):
    """A catalog whose views came from another views.sql (a view edited since) is refused to readers with the
    line that names the writing commands, read by nothing stale; the next writer creates every view afresh."""
    home = ingested_copy([(SNAPSHOT, SNAPSHOT)])
    path = home / "catalog.duckdb"
    fresh = views_of(path)
    con = duckdb.connect(str(path))
    con.execute("DROP VIEW instr_mix_by_loop")  # reads kernels; DuckDB checks a view's columns when it is made
    con.execute("DROP VIEW kernels")
    con.execute(
        "CREATE VIEW kernels AS SELECT s.tag, sf.cache_key FROM snapshot_folders sf JOIN snapshots s USING (snapshot_id)"
    )
    con.execute("DROP VIEW ptx_mix")
    con.execute("UPDATE schema_views SET digest = ?", ["0" * 64])
    con.close()
    stale = views_of(path)
    assert stale.keys() == fresh.keys() - {"ptx_mix", "instr_mix_by_loop"}
    with pytest.raises(UsageError) as refused:
        Catalog.open(path, read_only=True)
    assert str(refused.value) == (
        f"catalog {path} needs migration (views.sql): run a writing kdb command (`kdb ingest`, `kdb gc`) to upgrade it"
    )
    result = kdb(capsys, home, "sql", "SELECT count(*) FROM kernels")
    assert result.code == refused.value.exit_code and "needs migration (views.sql)" in result.err
    assert views_of(path) == stale  # the reader wrote nothing
    assert kdb(capsys, home, "gc").code == 0  # a writing command
    assert views_of(path) == fresh
    with Catalog.open(path, read_only=True) as catalog:
        assert catalog.con.execute("SELECT digest FROM schema_views").fetchall() == [(views_file()[1],)]


@pytest.mark.postgres
def test_the_shared_catalog_of_the_kdb_before_views_sql_is_read_and_renewed_alike(ingested_copy, tmp_path):
    """The same on a DuckLake catalog: the old kdb's views read as a fresh local catalog's; a writer records
    them, renews them once they are older than views.sql, and a reader meanwhile is sent to a writer."""
    server = PgServer().start()
    try:
        shared_catalog_views(server.catalog_url(server.new_database()), tmp_path / "store", ingested_copy)
    finally:
        server.stop()


def shared_catalog_views(url: str, store: Path, ingested_copy) -> None:
    old_kdb_ingest(old_kdb() | {"KDB_CATALOG": url, "KDB_STORE": str(store)}, SNAPSHOT)
    where = SharedLocation(url, store / LAKE_DIR)
    fresh = views_of(ingested_copy([(SNAPSHOT, SNAPSHOT)]) / "catalog.duckdb")
    if views_file()[1] == MIGRATED_VIEWS_DIGEST:
        with Catalog.open(where, read_only=True) as catalog:
            assert views_on(catalog.con) == fresh
    with Catalog.open(where) as catalog:
        assert catalog.con.execute("SELECT digest FROM schema_views").fetchall() == [(views_file()[1],)]
        assert views_on(catalog.con) == fresh

        def make_older() -> None:
            catalog.con.execute("DROP VIEW ptx_mix")
            catalog.con.execute("UPDATE schema_views SET digest = ?", ["0" * 64])

        catalog.write(make_older)
    with pytest.raises(UsageError, match=r"needs migration \(views\.sql\): run a writing kdb command"):
        Catalog.open(where, read_only=True)
    Catalog.open(where).close()
    with Catalog.open(where, read_only=True) as catalog:
        assert views_on(catalog.con) == fresh
