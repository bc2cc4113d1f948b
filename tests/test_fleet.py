"""The shared home (issue 17): a DuckLake catalog on a real PostgreSQL server, blobs on a shared path,
many kdb processes writing at once with no lock between them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import tree_hashes
from pgserver import PgServer, find_bin_dir

CORPUS = [
    "t3.1.0-gfx90a",
    "t3.3.1-gfx942",
    "t3.4.0-gfx1100",
    "t3.4.0-gfx942",
    "t3.4.0-sm90",
    "t3.6.0-gfx950",
    "t3.6.0-sm80",
    "t3.7.1-gfx950",
]


@pytest.fixture(scope="module")
def pg():
    if find_bin_dir() is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed (.ci/run installs postgresql-15)")
        pytest.skip("PostgreSQL binaries not found")
    server = PgServer().start()
    yield server
    server.stop()


@pytest.fixture
def shared(pg: PgServer, tmp_path: Path) -> dict[str, str]:
    """Environment selecting a fresh shared home: its own database and store."""
    return {"KDB_CATALOG": pg.catalog_url(pg.new_database()), "KDB_STORE": str(tmp_path / "store")}


def kdb_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "kdb", *args]


def run(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kdb_cmd(*args), env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout, check=False
    )


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        kdb_cmd(*args),
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(procs: dict[str, subprocess.Popen[str]], timeout: float = 900) -> dict[str, tuple[int, str]]:
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=timeout)
        out[name] = (proc.returncode, stderr + stdout)
    return out


def snapshots(env: dict[str, str]) -> dict[str, dict]:
    res = run(env, "tags", "--format", "json")
    assert res.returncode == 0, res.stderr
    return {s["tag"]: s for s in json.loads(res.stdout)}


def test_eight_writers_at_once_then_diff_verify_and_plain_duckdb_attach(shared, unpack_snapshot, tmp_path):
    caches = {name: unpack_snapshot(name) for name in CORPUS}
    started = time.monotonic()
    procs = {name: spawn(shared, "ingest", str(path), "--tag", name, "-q", "-j", "1") for name, path in caches.items()}
    results = finish(procs)
    elapsed = time.monotonic() - started
    assert {n: r for n, r in results.items() if r[0] not in (0, 1)} == {}
    print(f"8 concurrent ingests: {elapsed:.1f} s")

    snaps = snapshots(shared)
    assert sorted(snaps) == sorted(CORPUS)
    for name, path in caches.items():  # each snapshot is whole: every file of its cache, byte for byte
        assert snaps[name]["file_count"] == len(tree_hashes(path)), name
        assert snaps[name]["kernel_count"] > 0
    res = run(shared, "verify")
    assert res.returncode == 0, res.stdout + res.stderr

    # diff between snapshots written by different writers
    res = run(shared, "diff", "t3.3.1-gfx942", "t3.4.0-gfx942", "--format", "json")
    assert res.returncode in (0, 1), res.stderr
    assert json.loads(res.stdout)["summary"]["matched"] > 0

    # export restores a cache exactly; show and sql read the shared catalog
    res = run(shared, "export", "t3.6.0-sm80", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    assert tree_hashes(tmp_path / "out") == tree_hashes(caches["t3.6.0-sm80"])
    assert run(shared, "show", "t3.4.0-sm90").returncode == 0
    res = run(shared, "sql", "SELECT count(DISTINCT tag) AS n FROM kernels", "--format", "json")
    assert json.loads(res.stdout) == [{"n": 8}]

    # the ATTACH the README documents, from the plain DuckDB shell
    res = run(shared, "shell", "--print")
    assert res.returncode == 0, res.stderr
    duckdb_cli = shutil.which("duckdb", path=str(Path(sys.executable).parent)) or shutil.which("duckdb")
    assert duckdb_cli, "duckdb-cli is part of the test extra"
    proc = subprocess.run(
        [duckdb_cli, "-csv", "-noheader", ":memory:"],
        input=res.stdout + "SELECT count(*) FROM snapshots;\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "8"


def test_killed_writer_leaves_nothing_partial(shared, unpack_snapshot):
    victim = spawn(shared, "ingest", str(unpack_snapshot("t3.4.0-gfx1100")), "--tag", "victim", "-q", "-j", "1")
    others = {
        name: spawn(shared, "ingest", str(unpack_snapshot(name)), "--tag", name, "-q", "-j", "1")
        for name in ("t3.6.0-gfx950", "t3.7.1-gfx950")
    }
    objects = Path(shared["KDB_STORE"]) / "objects"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and sum(1 for _ in objects.rglob("*")) < 300:
        time.sleep(0.2)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.communicate()
    results = finish(others)
    assert {n: r for n, r in results.items() if r[0] not in (0, 1)} == {}
    assert sorted(snapshots(shared)) == ["t3.6.0-gfx950", "t3.7.1-gfx950"]
    res = run(shared, "verify", "--format", "json")
    assert res.returncode == 0, res.stdout
    assert json.loads(res.stdout)["unreferenced_blobs"] > 0  # the victim's blobs
    res = run(shared, "gc", "--grace", "0", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["blobs_deleted"] > 0
    res = run(shared, "verify", "--format", "json")
    assert res.returncode == 0 and json.loads(res.stdout)["unreferenced_blobs"] == 0, res.stdout


def test_gc_during_ingests_loses_nothing(shared, unpack_snapshot, tmp_path):
    """Garbage that the new ingests will reuse (a removed snapshot of the same caches, its blobs made old)
    is collected by gc running in a loop while those ingests run: every ingest still completes whole."""
    names = ["t3.4.0-gfx942", "t3.3.1-gfx942", "t3.6.0-gfx950"]
    for name in [*names, "t3.6.0-sm80"]:  # the last one's blobs are reused by no new ingest: gc frees them
        assert run(shared, "ingest", str(unpack_snapshot(name)), "--tag", f"old-{name}", "-q").returncode in (0, 1)
        assert run(shared, "rm", f"old-{name}").returncode == 0
    old = time.time() - 7200
    for path in (Path(shared["KDB_STORE"]) / "objects").rglob("*"):
        os.utime(path, (old, old))
    procs = {
        name: spawn(shared, "ingest", str(unpack_snapshot(name)), "--tag", name, "-q", "-j", "1") for name in names
    }
    collected = 0
    while any(p.poll() is None for p in procs.values()):
        res = run(shared, "gc", "--format", "json")
        assert res.returncode == 0, res.stderr
        collected += json.loads(res.stdout)["blobs_deleted"]
    results = finish(procs)
    assert {n: r for n, r in results.items() if r[0] not in (0, 1)} == {}
    assert sorted(snapshots(shared)) == sorted(names)
    res = run(shared, "verify")
    assert res.returncode == 0, res.stdout
    for name in names:
        dest = tmp_path / f"export-{name}"
        assert run(shared, "export", name, str(dest)).returncode == 0
        assert tree_hashes(dest) == tree_hashes(unpack_snapshot(name))
    assert collected > 0
    print(f"gc collected {collected} blobs during the ingests")
