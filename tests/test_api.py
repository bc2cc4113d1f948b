"""The Python API (kdb/api): a home opened with kdb.open(), ingested, queried, diffed and rendered on real corpus
snapshots; every rendering equal, byte for byte, to what the CLI prints for the same question."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pairing_matrix as pm
import pytest
import sampling
from pgserver import PgServer

import kdb
from kdb.errors import ExitCode, TagError, UsageError

PAIR = ("t3.8.0-sm120", "t3.9.0-sm120")  # two small NVIDIA snapshots (37 and 38 kernels) of one target
OTHER_TARGET = "t3.1.0-gfx942"  # 41 kernels, AMD
RULES = ["new-spills", "occupancy-drop", "registers:+5%"]


def cli(home: Path, *args: str) -> tuple[int, str]:
    """`kdb --home HOME ARGS…` in this process: (exit status, stdout)."""
    return pm.in_process_runner(home, list(args))


@pytest.fixture(scope="module")
def api_home(tmp_path_factory, unpack_snapshot) -> Path:
    """A home holding PAIR, ingested through the API (no SASS: quicker, and the same for the CLI's reads)."""
    home = tmp_path_factory.mktemp("api-home")
    with kdb.open(home) as db:
        for tag in PAIR:
            summary = db.ingest(unpack_snapshot(tag), tag, labels={"suite": "api"}, workers=1, sass=False)
            assert (summary.tag, summary.problems) == (tag, 0)
            assert summary.kernels > 30
    return home


def test_import_kdb_stays_cheap_and_the_public_names_are_listed_once() -> None:
    code = (
        "import sys, kdb; "
        "print(sorted(m for m in sys.modules if m.startswith(('kdb.', 'duckdb', 'typer', 'plotly', 'deepdiff'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"  # kdb.open imports kdb.api on its first call
    # kdb.api imports its submodules on first use (PEP 562): the package alone reads no catalog, diff or ingest code
    code = "import sys, kdb.api; print(sorted(m for m in sys.modules if m.startswith(('duckdb', 'typer', 'kdb.'))))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['kdb.api', 'kdb.errors']"
    import kdb.api

    for name in kdb.api.__all__:
        getattr(kdb.api, name)  # a lazy name is in vars() once it is used
    assert kdb.api.__all__ == [
        "CatalogBusy",
        "Diff",
        "ExitCode",
        "InputError",
        "IntegrityError",
        "Kdb",
        "KdbError",
        "Kernel",
        "Snapshot",
        "TagError",
        "UntrustedComparison",
        "UsageError",
        "open",
    ]
    public = {n for n in vars(kdb.api) if not n.startswith("_") and n != "annotations"}
    assert public == set(kdb.api.__all__)
    assert callable(kdb.open) and "open" in kdb.__all__


@pytest.mark.slow  # 5-7 s of CPU (bench/test_suite.py)
def test_snapshots_equal_kdb_tags_json(api_home: Path) -> None:
    with kdb.open(api_home) as db:
        snapshots = db.snapshots()
    code, out = cli(api_home, "tags", "--format", "json")
    assert code == 0
    from kdb.render.tables import to_json

    assert to_json([s.to_dict() for s in snapshots]) == out
    assert [s.tag for s in snapshots] == list(PAIR)
    assert all(s.labels == {"suite": "api"} and s.kernel_count > 30 for s in snapshots)
    assert kdb.open(api_home / "nothing-here").snapshots() == []  # a new home answers empty, as `kdb tags`


@pytest.mark.slow  # outside the inner loop: 4 s on 2 cores (bench/test_suite.py)
def test_kernels_is_a_relation_over_the_kernels_view(api_home: Path) -> None:
    with kdb.open(api_home) as db:
        rel = db.kernels(PAIR[0])
        count = db.snapshots()[0].kernel_count
    assert {"tag", "cache_key", "name", "registers", "occupancy"} <= set(rel.columns)
    rows = rel.fetchall()
    assert len(rows) == count and {r[rel.columns.index("tag")] for r in rows} == {PAIR[0]}
    # the relation is DuckDB's: filters, aggregates, ordering run there; it outlives close()
    keys = [r[0] for r in rel.order("name, cache_key").project("cache_key").fetchall()]
    assert keys == [r[rel.columns.index("cache_key")] for r in rows]
    assert rel.filter("registers > 0").aggregate("count(*)").fetchone()[0] > 0
    # the same rows `kdb sql` reads
    code, out = cli(
        api_home, "sql", f"SELECT name, registers FROM kernels WHERE tag = '{PAIR[0]}' ORDER BY ALL", "--format", "json"
    )
    assert code == 0
    assert [[r["name"], r["registers"]] for r in json.loads(out)] == [
        list(r) for r in rel.project("name, registers").order("ALL").fetchall()
    ]
    # the copy is closed to the outside like `kdb sql`: no host files
    with pytest.raises(Exception, match="disabled by configuration"):
        rel.query("k", "SELECT * FROM read_text('/etc/hostname')").fetchall()
    with kdb.open(api_home) as db, pytest.raises(TagError):
        db.kernels("no-such-tag")


@pytest.mark.slow  # 5-7 s of CPU (bench/test_suite.py)
def test_diff_renders_exactly_what_the_cli_prints(api_home: Path, tmp_path: Path) -> None:
    a, b = PAIR
    with kdb.open(api_home) as db:
        d = db.diff(a, b, fail_on=RULES)
        report = d.to_html(tmp_path / "api.html")
    rules = [x for r in RULES for x in ("--fail-on", r)]
    code, out = cli(api_home, "diff", a, b, *rules, "--format", "json")
    assert d.to_json() == out
    assert d.exit_code == code and isinstance(d.exit_code, ExitCode)
    doc = json.loads(out)
    assert d.summary == doc["summary"] and list(d.fired) == doc["fired_rules"]
    assert list(d.assumptions) == doc["assumptions"] and list(d.unknown_rules) == doc["unknown_rules"]
    # .kernels in the JSON's (rank) order
    assert [(k.name, k.status.report_status, k.reason) for k in d.kernels] == [
        (k["name"], k["status"], k["reason"]) for k in doc["kernels"]
    ]
    assert any(k.status.changed for k in d.kernels)  # the pair really differs (3.8.0 -> 3.9.0)
    for fmt, text in (("markdown", d.to_markdown()), ("csv", d.to_csv())):
        assert cli(api_home, "diff", a, b, *rules, "--format", fmt) == (code, text)
    assert cli(api_home, "diff", a, b, "--format", "markdown", "--top", "3")[1] == d.to_markdown(top=3)
    # to_html writes the page `kdb report` writes, byte for byte
    assert cli(api_home, "report", a, b, "--output", str(tmp_path / "cli.html"))[0] == 0
    assert report.read_bytes() == (tmp_path / "cli.html").read_bytes()
    assert cli(api_home, "report", a, b, "--limit", "2", "--output", str(tmp_path / "cli2.html"))[0] == 0
    assert d.to_html(tmp_path / "api2.html", limit=2).read_bytes() == (tmp_path / "cli2.html").read_bytes()
    page = d._repr_html_()
    assert page.startswith("<div>") and "<table>" in page and f"kdb diff {a} → {b}" in page
    assert d.kernels[0].name in page


@pytest.mark.slow  # 5-7 s of CPU (bench/test_suite.py)
def test_diff_exit_codes_and_errors_follow_the_cli(api_home: Path) -> None:
    a, b = PAIR
    with kdb.open(api_home) as db:
        assert db.diff(a, a).exit_code == ExitCode.OK
        assert db.diff(a, a).summary["changed"] == 0
        fired = db.diff(a, b, fail_on=["any-change"])
        assert fired.exit_code == ExitCode.FINDINGS and fired.fired == ("any-change",)
        with pytest.raises(TagError):
            db.diff(a, "no-such-tag")
        with pytest.raises(UsageError):
            db.diff(a, b, fail_on=["no-such-rule"])


def test_kernel_equals_kdb_show_json(api_home: Path) -> None:
    with kdb.open(api_home) as db:
        d = db.diff(*PAIR)
        key = d.result.key_of(d.kernels[0])
        k = db.kernel(PAIR[0], key)
        with pytest.raises(UsageError):
            db.kernel(PAIR[0], "no_such_kernel")
    code, out = cli(api_home, "show", PAIR[0], "--kernel", key, "--format", "json")
    assert code == 0
    from kdb.render.tables import to_json

    assert to_json([k.to_dict()]) == out
    assert (k.name, k.cache_key) == (d.kernels[0].name, d.kernels[0].a_cache_key)
    assert k["registers"] == json.loads(out)[0]["registers"]
    page = k._repr_html_()
    assert "<table>" in page and k.name in page


@pytest.mark.slow  # 5-7 s of CPU (bench/test_suite.py)
def test_ingest_refuses_a_known_tag_and_closed_objects_refuse_work(tmp_path: Path, unpack_snapshot) -> None:
    cache = unpack_snapshot(PAIR[0])
    db = kdb.open(tmp_path / "home")
    db.ingest(cache, "x", sass=False, workers=1)
    before = db.kernels("x")
    with pytest.raises(TagError):
        db.ingest(cache, "x", sass=False, workers=1)
    summary = db.ingest(cache, "x", labels=["k=v"], replace=True, sass=False, workers=1)
    assert summary.kernels == before.aggregate("count(*)").fetchone()[0]  # the earlier relation still reads
    assert [s.labels for s in db.snapshots()] == [{"k": "v"}]
    # another target: an untrusted comparison is returned with its problem, as the CLI prints it and exits 2
    db.ingest(unpack_snapshot(OTHER_TARGET), "y", sass=False, workers=1)
    untrusted = db.diff("x", "y")
    assert untrusted.exit_code == ExitCode.USAGE and "target" in (untrusted.trust_problem or "")
    assert cli(tmp_path / "home", "diff", "x", "y", "--format", "json") == (ExitCode.USAGE, untrusted.to_json())
    assert db.diff("x", "y", across_targets=True).trust_problem is None
    db.close()
    with pytest.raises(UsageError, match="closed"):
        db.snapshots()
    assert "closed" in repr(db)


def test_shared_home_through_the_environment(pg: PgServer, tmp_path: Path, unpack_snapshot, monkeypatch) -> None:
    """KDB_CATALOG + KDB_STORE select the shared home, as for the CLI: ingest, list, relation, diff."""
    env = {"KDB_CATALOG": pg.catalog_url(pg.new_database()), "KDB_STORE": str(tmp_path / "store")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with kdb.open(tmp_path / "local-home-not-used") as db:
        assert db.is_shared and db.home == tmp_path / "store"
        db.ingest(unpack_snapshot(PAIR[0]), "s", sass=False, workers=1)
        count = db.snapshots()[0].kernel_count
        rel = db.kernels("s")
        d = db.diff("s", "s")
    assert len(rel.fetchall()) == count and rel.filter("registers > 0").aggregate("count(*)").fetchone()[0] > 0
    assert d.exit_code == ExitCode.OK and d.summary["kernels"] == count
    out = subprocess.run(
        [sys.executable, "-m", "kdb", "diff", "s", "s", "--format", "json"], capture_output=True, text=True, check=True
    ).stdout
    assert out == d.to_json()
    assert not (tmp_path / "local-home-not-used").exists()
    monkeypatch.delenv("KDB_STORE")
    with pytest.raises(UsageError, match="needs both"):  # one of the two is not enough, as for the CLI
        kdb.open()


@pytest.mark.slow
def test_diff_json_equals_the_cli_for_every_same_target_corpus_pair(corpus_home: Path, corpus_snapshots) -> None:
    every_pair = pm.pairs_to_check(corpus_snapshots)
    assert every_pair
    # every pair in the sweep; otherwise pairs holding every snapshot once, rotating with the commit
    pairs = sampling.covering(
        every_pair,
        members=lambda p: (p[0].tag, p[1].tag),
        id_of=lambda p: f"{p[0].tag}->{p[1].tag}",
        what="same-target pairs, API and CLI",
    )
    differ = []
    with kdb.open(corpus_home) as db:
        for a, b in pairs:
            code, out = cli(corpus_home, "diff", a.tag, b.tag, "--format", "json", "--min-match", "0")
            d = db.diff(a.tag, b.tag, min_match=0)
            if (d.to_json(), d.exit_code) != (out, code):
                differ.append((a.tag, b.tag))
    assert differ == []
