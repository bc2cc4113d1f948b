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
from pgserver import PgServer

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
    res = run(shared, "export", "t3.6.0-sm80", str(tmp_path / "out"), "--verbatim")
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
    # the victim's own blobs (contents no other cache has): kill it once some have arrived
    others_content = {h for name in others for h in tree_hashes(unpack_snapshot(name)).values()}
    own = set(tree_hashes(unpack_snapshot("t3.4.0-gfx1100")).values()) - others_content
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and sum(1 for h in own if (objects / h[:2] / h[2:]).exists()) < 20:
        time.sleep(0.05)
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
        assert run(shared, "export", name, str(dest), "--verbatim").returncode == 0
        assert tree_hashes(dest) == tree_hashes(unpack_snapshot(name))
    assert collected > 0
    print(f"gc collected {collected} blobs during the ingests")


# -- push / pull ----------------------------------------------------------------------------------
def _local(home: Path) -> dict[str, str]:
    return {"KDB_HOME": str(home)}


def _blob_hashes(env: dict[str, str], tag: str) -> set[str]:
    res = run(
        env,
        "sql",
        f"SELECT DISTINCT f.hash FROM files f JOIN snapshots s USING (snapshot_id) WHERE s.tag = '{tag}'",
        "--format",
        "json",
    )
    assert res.returncode == 0, res.stderr
    return {r["hash"] for r in json.loads(res.stdout)}


def _objects(store: Path) -> set[str]:
    """The blob files of a store (its dictionary index, objects/dictionaries/, and the temporaries of a
    killed write apart)."""
    return {
        p.parent.name + p.name
        for p in (store / "objects").rglob("*")
        if p.is_file() and p.parent.name != "dictionaries" and not p.name.startswith(".tmp-")
    }


def _dictionaries(store: Path) -> set[str]:
    """The store's dictionary index entries, KIND-ID-SIZE-HASH (kdb/store/blobs.py)."""
    index = store / "objects" / "dictionaries"
    return {p.name for p in index.iterdir()} if index.exists() else set()


def _dictionary_blobs(store: Path) -> set[str]:
    return {entry.rsplit("-", 1)[1] for entry in _dictionaries(store)}


def _diff_doc(env: dict[str, str], a: str, b: str) -> dict:
    res = run(env, "diff", a, b, "--format", "json")
    assert res.returncode in (0, 1), res.stderr
    doc = json.loads(res.stdout)
    return {k: doc[k] for k in ("summary", "kernels", "winners")}


def _transfer(env: dict[str, str], verb: str, *args: str) -> dict:
    res = run(env, verb, *args, "--format", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_push_then_pull_moves_only_missing_blobs_and_diffs_the_same(shared, unpack_snapshot, tmp_path):
    a, b = "t3.3.1-gfx942", "t3.4.0-gfx942"
    local = _local(tmp_path / "local")
    for name in (a, b):
        assert run(local, "ingest", str(unpack_snapshot(name)), "--tag", name, "-q").returncode in (0, 1)
    before = _diff_doc(local, a, b)
    blobs = {name: _blob_hashes(local, name) for name in (a, b)}
    both = {**local, **shared}
    store = Path(shared["KDB_STORE"])

    first = _transfer(both, "push", a)["snapshots"][0]
    assert (first["status"], first["blobs"], first["blobs_copied"]) == ("copied", len(blobs[a]), len(blobs[a]))
    # the snapshot's blobs, and the dictionaries (trained on the first ingest) their frames were made with
    local_home = tmp_path / "local"
    assert _dictionaries(local_home)  # the corpus snapshot is large enough to train them
    assert _dictionaries(store) == _dictionaries(local_home)
    assert _objects(store) == blobs[a] | _dictionary_blobs(local_home)
    second = _transfer(both, "push", b)["snapshots"][0]  # only what the first did not bring travels
    assert (second["blobs"], second["blobs_copied"]) == (len(blobs[b]), len(blobs[b] - blobs[a]))
    assert 0 < second["blobs_copied"] < second["blobs"]
    assert _objects(store) == blobs[a] | blobs[b] | _dictionary_blobs(local_home)
    again = _transfer(both, "push", a)["snapshots"][0]
    assert (again["status"], again["blobs_copied"]) == ("present", 0)
    assert sorted(snapshots(shared)) == [a, b]
    assert run(shared, "verify").returncode == 0
    assert _diff_doc(shared, a, b) == before  # same pairs, facts, verdicts and reasons on the shared home

    # a tag taken by another snapshot is refused, and --as copies under a new one
    res = run(both, "push", b, "--as", a)
    assert res.returncode == 4 and "other content" in res.stderr and len(res.stderr.splitlines()) == 1
    renamed = _transfer(both, "push", b, "--as", "renamed")["snapshots"][0]
    assert (renamed["dest_tag"], renamed["blobs_copied"]) == ("renamed", 0)

    fresh = {**_local(tmp_path / "fresh"), **shared}
    pulled = _transfer(fresh, "pull", a, b)["snapshots"]
    assert [p["blobs_copied"] for p in pulled] == [len(blobs[a]), len(blobs[b] - blobs[a])]
    fresh_local = _local(tmp_path / "fresh")
    assert sorted(snapshots(fresh_local)) == [a, b]
    assert run(fresh_local, "verify").returncode == 0
    assert _diff_doc(fresh_local, a, b) == before
    assert run(fresh_local, "export", b, str(tmp_path / "out"), "--verbatim").returncode == 0
    assert tree_hashes(tmp_path / "out") == tree_hashes(unpack_snapshot(b))


def test_push_refuses_a_corrupted_blob_and_records_nothing(shared, unpack_snapshot, tmp_path):
    local_home = tmp_path / "local"
    local = _local(local_home)
    name = "t3.6.0-sm80"
    assert run(local, "ingest", str(unpack_snapshot(name)), "--tag", name, "-q").returncode in (0, 1)
    victim = sorted((local_home / "objects").rglob("*"), key=lambda p: (-p.stat().st_size, p.name))[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # damage a real blob of the snapshot in place
    victim.write_bytes(bytes(data))
    res = run({**local, **shared}, "push", name)
    assert res.returncode == 5, res.stdout + res.stderr
    assert "corrupted" in res.stderr and len(res.stderr.splitlines()) == 1
    assert snapshots(shared) == {}  # nothing of the snapshot is visible
    assert victim.parent.name + victim.name not in _objects(Path(shared["KDB_STORE"]))


def test_killed_push_leaves_nothing_partial_and_a_rerun_completes(shared, tmp_path):
    """SIGKILL while the blobs travel (a real Inductor cache, 3,000+ files): no snapshot on the shared home,
    verify clean apart from the unreferenced blobs, and the next push reuses them and completes."""
    import tarfile

    cache = tmp_path / "cache"
    corpus = Path(__file__).resolve().parent.parent / "corpus" / "inductor" / "h100-torch2.11-t3.6.0"
    with tarfile.open(corpus / "mlp_train_maxautotune.tar.xz", "r:xz") as tar:
        tar.extractall(cache, filter="data")
    local = _local(tmp_path / "local")
    assert run(local, "ingest", str(cache), "--tag", "mlp", "--no-sass", "-q").returncode in (0, 1)
    total = len(_blob_hashes(local, "mlp"))
    store = Path(shared["KDB_STORE"]) / "objects"
    victim = spawn({**local, **shared}, "push", "mlp")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and sum(1 for _ in store.rglob("*")) < 200:
        time.sleep(0.01)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.communicate()
    arrived = len(_objects(Path(shared["KDB_STORE"])) - _dictionary_blobs(Path(shared["KDB_STORE"])))
    assert 0 < arrived < total  # killed while the blobs travelled
    assert snapshots(shared) == {}
    res = run(shared, "verify", "--format", "json")
    assert res.returncode == 0 and json.loads(res.stdout)["unreferenced_blobs"] == arrived, res.stdout
    rerun = _transfer({**local, **shared}, "push", "mlp")["snapshots"][0]
    assert (rerun["status"], rerun["blobs_copied"]) == ("copied", total - arrived)
    res = run(shared, "verify", "--format", "json")
    assert res.returncode == 0 and json.loads(res.stdout)["unreferenced_blobs"] == 0, res.stdout
    assert list(snapshots(shared)) == ["mlp"]
