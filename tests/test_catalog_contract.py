"""The catalog as a public interface: views and columns that users' saved queries rely on, migrations,
and catalog figures checked against independent sources on the corpus."""

from __future__ import annotations

import json
import re

import duckdb
import pytest
from conftest import ROOT, load_manifest
from helpers import kdb

from kdb.ingest.columns import STAGED_COLUMNS
from kdb.ingest.reindex import REINDEX_COLUMNS
from kdb.store.catalog import Catalog, schema_files

CONTRACT = {
    "kernels": [
        "tag",
        "cache_key",
        "name",
        "backend",
        "arch",
        "triton_version",
        "num_warps",
        "num_stages",
        "shared",
        "vgpr_count",
        "agpr_count",
        "sgpr_count",
        "vgpr_spill_count",
        "sgpr_spill_count",
        "scratch_bytes",
        "occupancy_llvm",
        "occupancy",
        "occupancy_limiter",
        "instr_count",
        "registers",
        "stack_bytes",
        "local_bytes",
        "static_shared",
        "occupancy_unit",
    ],
    "instr_mix": ["tag", "cache_key", "mnemonic", "grp", "count"],
    "source_lines": ["tag", "cache_key", "file", "line", "grp", "count"],
    "problems": ["tag", "cache_key", "path", "stage", "reason"],
}
AMD = sorted(n for n, e in load_manifest()["snapshots"].items() if e["backend"] == "hip")


def test_fresh_catalog_has_every_migration_and_contract_columns(tmp_path):
    path = tmp_path / "catalog.duckdb"
    with Catalog.open(path) as catalog:
        applied = [name for _, name in catalog.applied_migrations()]
        assert applied == [name for _, name, _ in schema_files()]
        for view, columns in CONTRACT.items():
            cur = catalog.con.execute(f"SELECT * FROM {view} LIMIT 0")
            present = [d[0] for d in cur.description]
            assert [c for c in columns if c not in present] == [], view
    # reopening applies nothing twice
    with Catalog.open(path) as catalog:
        assert catalog.migrate() == []


def test_upgrade_from_first_migration_keeps_data(tmp_path):
    path = tmp_path / "catalog.duckdb"
    first = schema_files()[0]
    # a catalog as the first release of kdb left it: only migration 001 applied
    con = duckdb.connect()
    con.execute(f"ATTACH '{path}' AS old (STORAGE_VERSION 'v1.5.0')")
    con.execute("USE old")
    con.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
        "applied_at TIMESTAMP NOT NULL DEFAULT (now()::TIMESTAMP))"
    )
    con.execute(first[2])
    con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [first[0], first[1]])
    con.execute(
        "INSERT INTO snapshots VALUES (1, 'old', now()::TIMESTAMP, '/x', 'h', '0', [], [], 0, 0, 0, 0, 0, 0, MAP {})"
    )
    con.close()
    with Catalog.open(path) as catalog:
        assert [s["tag"] for s in catalog.queries.list_snapshots()] == ["old"]
        assert len(catalog.applied_migrations()) == len(schema_files())


def test_migration_003_moves_snapshot_folders_into_folder_sets(unpack_snapshot, ingested_copy, capsys):
    """A catalog left by the 002-era layout (snapshot_folders a table, one row per snapshot and folder)
    upgrades with every row kept: the kernels view is the same before and after."""
    cache = unpack_snapshot(AMD[0])
    home = ingested_copy([("x", AMD[0]), ("y", AMD[0])])  # `kdb ingest cache --tag x` then `--tag y`, each exit 0
    rows = "SELECT tag, cache_key, vgpr_count FROM kernels ORDER BY ALL"
    before = kdb(capsys, home, "sql", rows, "--format", "json").json()
    con = duckdb.connect(str(home / "catalog.duckdb"))
    per_snapshot = con.execute("SELECT count(*) FROM snapshot_folders WHERE snapshot_id = 1").fetchone()[0]
    con.execute("CREATE TABLE moved AS SELECT * FROM snapshot_folders")
    con.execute("DROP VIEW snapshot_folders")
    con.execute(
        "CREATE TABLE snapshot_folders (snapshot_id INTEGER NOT NULL, cache_key VARCHAR NOT NULL, "
        "folder_digest VARCHAR NOT NULL, PRIMARY KEY (snapshot_id, cache_key))"
    )
    con.execute("INSERT INTO snapshot_folders SELECT * FROM moved")
    con.execute("DROP TABLE moved")
    con.execute("DROP TABLE folder_sets")
    con.execute("ALTER TABLE snapshots DROP COLUMN folder_set")
    con.execute("DELETE FROM schema_migrations WHERE version = 3")
    assert con.execute("SELECT count(*) FROM snapshot_folders").fetchone()[0] == 2 * per_snapshot > 0
    con.close()
    with Catalog.open(home / "catalog.duckdb") as catalog:  # a writing open applies 003
        assert 3 in {v for v, _ in catalog.applied_migrations()}
        # the two snapshots held the same folders: one set
        assert catalog.con.execute("SELECT count(*) FROM folder_sets").fetchone()[0] == per_snapshot
    assert kdb(capsys, home, "sql", rows, "--format", "json").json() == before
    assert kdb(capsys, home, "verify").code == 0
    # the migration's SQL digest and the ingest's digest agree: the same folders again make no new set
    assert kdb(capsys, home, "ingest", str(cache), "--tag", "z", "-q").code == 0
    sets = kdb(capsys, home, "sql", "SELECT count(DISTINCT set_digest) AS n FROM folder_sets", "--format", "json")
    assert sets.json() == [{"n": 1}]


def test_migration_004_fills_mix_digests_as_ingest_computes_them(ingested_copy):
    """Rows written before 004 get their instr_mix_digest and instr_groups from the migration's SQL;
    those must equal what kdb/analysis/folder.py computes at ingest, or a diff across the two would see changes."""
    names = [n for n in ("t3.4.0-gfx942", "t3.4.0-sm90") if n in load_manifest()["snapshots"]]
    home = ingested_copy([(name, name) for name in names])  # `kdb ingest` of each, exit 0
    con = duckdb.connect(str(home / "catalog.duckdb"))
    cols = "SELECT folder_digest, instr_mix_digest, instr_groups::VARCHAR FROM kernel_analysis ORDER BY folder_digest"
    at_ingest = con.execute(cols).fetchall()
    assert at_ingest and all(d is not None for _, d, _ in at_ingest)
    # group totals add up to the instruction count of the same source (whose mnemonic counts the AMD and
    # NVIDIA analysis tests check against llvm-objdump / cuobjdump)
    counts = dict(con.execute("SELECT folder_digest, instr_count FROM kernel_analysis").fetchall())
    assert all(sum(json.loads(g).values()) == counts[f] for f, _, g in at_ingest)
    sql = next(text for version, _, text in schema_files() if version == 4)
    con.execute("UPDATE kernel_analysis SET instr_mix_digest = NULL, instr_groups = NULL")
    con.execute(sql[sql.index("UPDATE kernel_analysis") :])
    migrated = con.execute(cols).fetchall()
    con.close()
    assert [(f, d) for f, d, _ in migrated] == [(f, d) for f, d, _ in at_ingest]
    assert [json.loads(g) for _, _, g in migrated] == [json.loads(g) for _, _, g in at_ingest]


@pytest.mark.parametrize("name", AMD)
def test_catalog_occupancy_and_registers_match_the_compilers_asm_comment(name, corpus_home):
    """`; Kernel info` (Triton 3.2+) and the `.amdgpu_metadata` YAML are the compiler's own account."""
    con = duckdb.connect(str(corpus_home / "catalog.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT k.name, k.occupancy_llvm, k.vgpr_count, k.sgpr_count, k.scratch_bytes, a.kernel_info, "
        "k.instr_source, k.instr_count FROM kernels k JOIN kernel_analysis a USING (folder_digest) WHERE k.tag = ?",
        [name],
    ).fetchall()
    con.close()
    assert len(rows) == load_manifest()["snapshots"][name]["kernel_count"]
    with_info = 0
    for kname, occ, vgpr, sgpr, scratch, info_json, source, count in rows:
        assert source == "amdgcn" and count > 0, kname
        if info_json is None:
            continue
        info = json.loads(info_json)
        with_info += 1
        assert occ == info["Occupancy"], kname
        # TotalNumVgprs exists only where AGPRs do (CDNA); RDNA prints NumVgprs alone
        assert vgpr == info.get("TotalNumVgprs", info["NumVgprs"]), kname
        assert scratch == info["ScratchSize"], kname
        assert sgpr == info["TotalNumSgprs"], kname
    version = load_manifest()["snapshots"][name]["triton_version"]
    if tuple(int(p) for p in version.split(".")[:2]) >= (3, 2):
        assert with_info == len(rows)
    else:
        assert with_info == 0


def test_staged_column_lists_match_the_schema(tmp_path):
    """The column lists ingest and reindex stage (kdb/ingest/columns.py, defined once) name every column
    of their tables, and nothing the schema lacks."""
    with Catalog.open(tmp_path / "catalog.duckdb") as catalog:
        for name, columns in {**STAGED_COLUMNS, **REINDEX_COLUMNS}.items():
            rows = catalog.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
                [name],
            ).fetchall()
            schema = [r[0] for r in rows]
            # columns the writer fills itself: a folder set's digest, the ingested directory's host and path
            filled = {"folder_sets": {"set_digest"}, "file_stats": {"host", "source_path"}}.get(name, set())
            assert sorted(columns) == sorted(c for c in schema if c not in filled), name


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
def test_migration_008_moves_inductor_modules_into_sets(capsys, unpacked_archive, ingested_copy):
    """A catalog left by the 007-era layout (inductor_modules a table, one row per snapshot, module and
    kernel) upgrades with every row kept; the migration's digest and the ingest's agree, so an unchanged
    re-ingest of a real TorchInductor directory adds no module rows; gc drops a set no snapshot names."""
    from pathlib import Path

    corpus = Path(__file__).resolve().parent.parent / "corpus" / "inductor" / "h100-torch2.11-t3.6.0"
    cache = unpacked_archive(corpus / "gpt2_train.tar.xz")  # shared, read-only
    # `kdb ingest cache --tag x --no-sass` then `--tag y`, each exit 0
    home = ingested_copy([(tag, corpus / "gpt2_train.tar.xz") for tag in ("x", "y")], sass=False)
    views = {
        "modules": "SELECT s.tag, m.* EXCLUDE (snapshot_id) FROM inductor_modules m JOIN snapshots s USING (snapshot_id) "
        "ORDER BY ALL",
        "kernels": "SELECT * EXCLUDE (snapshot_id) FROM inductor_kernels ORDER BY ALL",
    }
    before = {k: kdb(capsys, home, "sql", q, "--format", "json").json() for k, q in views.items()}
    per_snapshot = sum(1 for r in before["modules"] if r["tag"] == "x")
    assert per_snapshot > 0 and len(before["modules"]) == 2 * per_snapshot
    con = duckdb.connect(str(home / "catalog.duckdb"))
    con.execute("CREATE TABLE moved AS SELECT * FROM inductor_modules")
    con.execute("DROP VIEW inductor_kernels")
    con.execute("DROP VIEW inductor_modules")
    con.execute(
        "CREATE TABLE inductor_modules (snapshot_id INTEGER NOT NULL, path VARCHAR NOT NULL, kernel_name VARCHAR "
        "NOT NULL, heuristic VARCHAR, def_line INTEGER, size_hints JSON, triton_meta JSON, inductor_meta JSON, "
        "configs JSON, kernel_perf_ms DOUBLE, PRIMARY KEY (snapshot_id, path, kernel_name))"
    )
    con.execute("INSERT INTO inductor_modules SELECT * FROM moved")
    con.execute("DROP TABLE moved")
    con.execute(
        "CREATE VIEW inductor_kernels AS SELECT s.tag, km.cache_key, km.kernel_name, km.module_path, km.link, "
        "km.detail, m.heuristic, m.size_hints, m.inductor_meta, m.triton_meta, m.kernel_perf_ms, s.snapshot_id "
        "FROM kernel_modules km JOIN snapshots s USING (snapshot_id) LEFT JOIN inductor_modules m ON "
        "m.snapshot_id = km.snapshot_id AND m.path = km.module_path AND m.kernel_name = km.kernel_name"
    )
    con.execute("DROP TABLE inductor_module_sets")
    con.execute("ALTER TABLE snapshots DROP COLUMN inductor_module_set")
    con.execute("DELETE FROM schema_migrations WHERE version = 8")
    assert con.execute("SELECT count(*) FROM inductor_modules").fetchone()[0] == 2 * per_snapshot
    con.close()
    with Catalog.open(home / "catalog.duckdb") as catalog:  # a writing open applies 008
        assert 8 in {v for v, _ in catalog.applied_migrations()}
        # the two snapshots held the same modules: one set
        assert catalog.con.execute("SELECT count(*) FROM inductor_module_sets").fetchone()[0] == per_snapshot
    assert {k: kdb(capsys, home, "sql", q, "--format", "json").json() for k, q in views.items()} == before
    assert kdb(capsys, home, "verify").code == 0
    # the same directory again: no new set, no new module row
    assert kdb(capsys, home, "ingest", str(cache), "--tag", "z", "--no-sass", "-q").code == 0
    sets = "SELECT count(DISTINCT set_digest) AS n, count(*) AS rows FROM inductor_module_sets"
    assert kdb(capsys, home, "sql", sets, "--format", "json").json() == [{"n": 1, "rows": per_snapshot}]
    for tag in ("x", "y", "z"):
        assert kdb(capsys, home, "rm", tag).code == 0
    assert kdb(capsys, home, "gc").code == 0
    assert kdb(capsys, home, "sql", sets, "--format", "json").json() == [{"n": 0, "rows": 0}]


# the columns migration 010 added, as its ALTER TABLE statements name them
MIGRATION_010_COLUMNS = tuple(re.findall(r"ADD COLUMN (\w+)", (ROOT / "schema" / "010_loops.sql").read_text()))


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
def test_migration_009_moves_inductor_links_into_sets(capsys, unpacked_archive, ingested_copy):
    """A catalog left by the 008-era layout (kernel_modules and autotune_results tables, rows per snapshot)
    upgrades with every row kept, through every view that reads them; the migration's digests and the
    ingest's agree, so an unchanged re-ingest of a real TorchInductor directory adds no link rows; gc
    drops the sets no snapshot names."""
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    archive = repo / "corpus" / "inductor" / "h100-torch2.11-t3.6.0" / "gpt2_train.tar.xz"
    cache = unpacked_archive(archive)  # shared, read-only
    # `kdb ingest cache --tag x --no-sass` then `--tag y`, each exit 0
    home = ingested_copy([(tag, archive) for tag in ("x", "y")], sass=False)
    views = {
        name: f"SELECT s.tag, v.* EXCLUDE (snapshot_id) FROM {name} v JOIN snapshots s USING (snapshot_id) ORDER BY ALL"
        for name in ("kernel_modules", "autotune_results")
    } | {name: f"SELECT * EXCLUDE (snapshot_id) FROM {name} ORDER BY ALL" for name in ("autotune", "inductor_kernels")}
    # the 008-era layout predates migration 010 too, whose columns come back NULL until `kdb reindex`
    views["kernels"] = f"SELECT * EXCLUDE (snapshot_id, {', '.join(MIGRATION_010_COLUMNS)}) FROM kernels ORDER BY ALL"
    before = {k: kdb(capsys, home, "sql", q, "--format", "json").json() for k, q in views.items()}
    links = {name: sum(1 for r in before[name] if r["tag"] == "x") for name in ("kernel_modules", "autotune_results")}
    assert all(n > 0 for n in links.values()), links
    assert all(len(before[name]) == 2 * n for name, n in links.items())
    assert any(r["inductor_module"] for r in before["kernels"]) and any(
        r["is_autotune_best"] for r in before["kernels"]
    )
    # the 008-era layout: both link tables per snapshot (the views that read them are the writer's: views.sql)
    con = duckdb.connect(str(home / "catalog.duckdb"))
    for name in ("kernel_modules", "autotune_results"):
        con.execute(f"CREATE TABLE moved_{name} AS SELECT * FROM {name}")
    for view in ("kernels", "inductor_kernels", "autotune", "kernel_modules", "autotune_results"):
        con.execute(f"DROP VIEW {view}")
    con.execute(
        "CREATE TABLE kernel_modules (snapshot_id INTEGER NOT NULL, cache_key VARCHAR NOT NULL, module_path VARCHAR, "
        "kernel_name VARCHAR, link VARCHAR NOT NULL, detail VARCHAR, PRIMARY KEY (snapshot_id, cache_key))"
    )
    con.execute(
        "CREATE TABLE autotune_results (snapshot_id INTEGER NOT NULL, source VARCHAR NOT NULL, path VARCHAR NOT NULL, "
        "entry INTEGER NOT NULL, kernel_name VARCHAR, module_path VARCHAR, key JSON, config JSON NOT NULL, "
        "time_ms DOUBLE, timings JSON, tuning_ms DOUBLE, is_best BOOLEAN NOT NULL, found_by_coordesc BOOLEAN, "
        "triton_cache_hash VARCHAR, cache_key VARCHAR, link VARCHAR NOT NULL, link_detail VARCHAR, "
        "PRIMARY KEY (snapshot_id, path, entry))"
    )
    for name in ("kernel_modules", "autotune_results"):
        con.execute(f"INSERT INTO {name} SELECT * FROM moved_{name}")
        con.execute(f"DROP TABLE moved_{name}")
    con.execute("DROP TABLE kernel_module_sets")
    con.execute("DROP TABLE autotune_result_sets")
    con.execute("ALTER TABLE snapshots DROP COLUMN kernel_module_set")
    con.execute("ALTER TABLE snapshots DROP COLUMN autotune_result_set")
    back_to_011_layout(con)  # what 012 changed
    con.execute("DROP VIEW instr_mix_by_loop")  # and what 010 added
    con.execute("DROP TABLE instr_mix_loop_counts")
    for column in MIGRATION_010_COLUMNS:
        con.execute(f"ALTER TABLE kernel_analysis DROP COLUMN {column}")
    con.execute("DELETE FROM schema_migrations WHERE version IN (9, 10)")  # 011 keeps its own
    assert con.execute("SELECT count(*) FROM kernel_modules").fetchone()[0] == 2 * links["kernel_modules"]
    con.close()
    with Catalog.open(home / "catalog.duckdb") as catalog:  # a writing open applies 009
        assert {9, 10, 12} <= {v for v, _ in catalog.applied_migrations()}
        # the two snapshots held the same links: one set of each
        for table, name in (("kernel_module_sets", "kernel_modules"), ("autotune_result_sets", "autotune_results")):
            assert catalog.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == links[name]
    assert {k: kdb(capsys, home, "sql", q, "--format", "json").json() for k, q in views.items()} == before
    assert kdb(capsys, home, "verify").code == 0
    # the same directory again: no new set, no new link row
    assert kdb(capsys, home, "ingest", str(cache), "--tag", "z", "--no-sass", "-q").code == 0
    counts = (
        "SELECT (SELECT count(DISTINCT set_digest) FROM kernel_module_sets) AS module_sets, "
        "(SELECT count(*) FROM kernel_module_sets) AS module_rows, "
        "(SELECT count(DISTINCT set_digest) FROM autotune_result_sets) AS autotune_sets, "
        "(SELECT count(*) FROM autotune_result_sets) AS autotune_rows"
    )
    assert kdb(capsys, home, "sql", counts, "--format", "json").json() == [
        {
            "module_sets": 1,
            "module_rows": links["kernel_modules"],
            "autotune_sets": 1,
            "autotune_rows": links["autotune_results"],
        }
    ]
    # the new snapshot reads the same rows through the views
    after = kdb(capsys, home, "sql", views["autotune"], "--format", "json").json()
    assert [r | {"tag": "x"} for r in after if r["tag"] == "z"] == [r for r in before["autotune"] if r["tag"] == "x"]
    for tag in ("x", "y", "z"):
        assert kdb(capsys, home, "rm", tag).code == 0
    assert kdb(capsys, home, "gc").code == 0
    assert kdb(capsys, home, "sql", counts, "--format", "json").json() == [
        {"module_sets": 0, "module_rows": 0, "autotune_sets": 0, "autotune_rows": 0}
    ]


@pytest.mark.slow  # outside the inner loop: 3 s on 2 cores (bench/test_suite.py)
def test_migration_010_adds_the_loop_figures_that_reindex_fills(capsys, ingested_copy):
    """A catalog written before 010 upgrades with NULL loop figures and no loop rows (said as unknown, never 0);
    `kdb reindex` then computes exactly what a fresh ingest records."""
    home = ingested_copy([("t3.4.0-gfx942", "t3.4.0-gfx942")])
    figures = f"SELECT cache_key, {', '.join(MIGRATION_010_COLUMNS)} FROM kernels ORDER BY cache_key"
    by_loop = "SELECT cache_key, loop_depth, grp, mnemonic, count FROM instr_mix_by_loop ORDER BY ALL"
    fresh = kdb(capsys, home, "sql", figures, "--format", "json").json()
    fresh_rows = kdb(capsys, home, "sql", by_loop, "--format", "json").json()
    assert any(r["max_loop_depth"] for r in fresh) and any(r["scratch_instr_in_loops"] for r in fresh)
    assert fresh_rows and any(r["loop_depth"] > 0 for r in fresh_rows)
    # the 009-era layout: no loop table or columns (the views are the writer's: views.sql)
    con = duckdb.connect(str(home / "catalog.duckdb"))
    back_to_011_layout(con)  # 012 comes after 010: undone first, applied again on open
    con.execute("DROP VIEW instr_mix_by_loop")
    con.execute("DROP VIEW kernels")
    con.execute("DROP TABLE instr_mix_loop_counts")
    for column in MIGRATION_010_COLUMNS:
        con.execute(f"ALTER TABLE kernel_analysis DROP COLUMN {column}")
    con.execute("DELETE FROM schema_migrations WHERE version = 10")
    con.close()
    with Catalog.open(home / "catalog.duckdb") as catalog:  # a writing open applies 010 (and 012)
        assert {10, 12} <= {v for v, _ in catalog.applied_migrations()}
    upgraded = kdb(capsys, home, "sql", figures, "--format", "json").json()
    assert [r["cache_key"] for r in upgraded] == [r["cache_key"] for r in fresh]
    assert all(r[c] is None for r in upgraded for c in MIGRATION_010_COLUMNS)
    assert kdb(capsys, home, "sql", by_loop, "--format", "json").json() == []
    assert kdb(capsys, home, "reindex", "t3.4.0-gfx942").code == 0
    assert kdb(capsys, home, "sql", figures, "--format", "json").json() == fresh
    assert kdb(capsys, home, "sql", by_loop, "--format", "json").json() == fresh_rows
    assert kdb(capsys, home, "verify").code == 0


# migration 012: the row tables it turned into lists (views of the old names stay), and the digest-keyed
# tables that lost their PRIMARY KEY
LISTED = {
    "instr_mix_counts": "instr_mix_lists",
    "source_line_counts": "source_line_lists",
    "instr_mix_loop_counts": "instr_mix_loop_lists",
}
UNKEYED = ("blobs", "folders", "folder_files", "folder_sets", "file_stats", "kernel_folders", "kernel_analysis")


def back_to_011_layout(con: duckdb.DuckDBPyConnection) -> None:
    """Turn a current catalog into the layout 011 left: row tables instead of lists, the PRIMARY KEY of
    blobs (the others 012 drops are rebuilt the same way by it), migration 012 not recorded."""
    for rows, lists in LISTED.items():
        con.execute(f"CREATE TABLE {rows}_011 AS SELECT * FROM {rows}")
        con.execute(f"DROP VIEW {rows}")
        con.execute(f"DROP TABLE {lists}")
        con.execute(f"ALTER TABLE {rows}_011 RENAME TO {rows}")
    con.execute("CREATE TABLE blobs_011 (hash VARCHAR PRIMARY KEY, size BIGINT NOT NULL, stored_size BIGINT NOT NULL)")
    con.execute("INSERT INTO blobs_011 SELECT * FROM blobs")
    con.execute("DROP TABLE blobs")
    con.execute("ALTER TABLE blobs_011 RENAME TO blobs")
    con.execute("DELETE FROM schema_migrations WHERE version = 12")


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
def test_migration_012_keeps_every_view_and_drops_the_digest_indexes(capsys, ingested_copy):
    """A catalog of the 011 layout upgrades to lists and unkeyed tables with every view reading the same
    rows, `kdb verify` clean, and the next ingest of the same cache recording the same analysis."""
    names = [n for n in ("t3.4.0-gfx942", "t3.4.0-sm90") if n in load_manifest()["snapshots"]]
    home = ingested_copy([(name, name) for name in names])
    views = ("instr_mix", "source_lines", "instr_mix_by_loop", "ptx_mix", "kernels", *LISTED)
    queries = {v: f"SELECT * FROM {v} ORDER BY ALL" for v in views}
    fresh = {v: kdb(capsys, home, "sql", q, "--format", "json").json() for v, q in queries.items()}
    assert all(fresh[v] for v in ("instr_mix", "source_lines", "instr_mix_by_loop", "ptx_mix", *LISTED))
    con = duckdb.connect(str(home / "catalog.duckdb"))
    back_to_011_layout(con)
    assert con.execute("SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'blobs'").fetchone()[0] >= 1
    old = {v: con.execute(q).fetchall() for v, q in queries.items()}
    con.close()
    with Catalog.open(home / "catalog.duckdb") as catalog:  # a writing open applies 012
        assert 12 in {v for v, _ in catalog.applied_migrations()}
        kinds = dict(catalog.con.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall())
        keyed = catalog.con.execute(
            "SELECT DISTINCT table_name FROM duckdb_constraints() WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
        ).fetchall()
    assert {v: kinds[v] for v in LISTED} == dict.fromkeys(LISTED, "VIEW")
    assert {kinds[t] for t in LISTED.values()} == {"BASE TABLE"}
    assert not set(UNKEYED) & {t for (t,) in keyed}
    upgraded = {v: kdb(capsys, home, "sql", q, "--format", "json").json() for v, q in queries.items()}
    assert upgraded == fresh
    assert sum(len(rows) for rows in old.values()) == sum(len(rows) for rows in fresh.values())
    assert kdb(capsys, home, "verify").code == 0
    # one row of lists per folder and source: as many as the old rows' distinct (folder, source) pairs
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    for rows, lists in LISTED.items():
        pairs = con.execute(f"SELECT count(*) FROM (SELECT DISTINCT folder_digest, source FROM {rows})").fetchone()
        assert con.execute(f"SELECT count(*) FROM {lists}").fetchone() == pairs
    con.close()
