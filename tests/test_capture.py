"""kdb as Triton's cache (issue 30): real compiles of corpus kernels by the installed Triton (3.6.0 in CI), offline,
for an AMD and an NVIDIA target, through `kdb.capture:CacheManager` / `kdb.capture:RemoteBackend`.

The oracle is Triton itself: the same compiles with TRITON_CACHE_DIR alone write the directory a capture's
`kdb export` must equal byte for byte; the capture's own counters (KDB_CAPTURE_STATS) say what a second
process compiled; `kdb verify` checks store and catalog after concurrent and killed captures.
Every Triton release of the corpus is checked the same way by bench/capture_releases.py (venvs per release).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPILE = ROOT / "bench" / "capture_compile.py"
LLD = "/usr/lib/llvm-22/bin/ld.lld"
TARGETS = {"gfx942": ("hip", "gfx942", 64, "t3.6.0-gfx942"), "sm90": ("cuda", 90, 32, "t3.6.0-sm90")}

pytestmark = [pytest.mark.slow, pytest.mark.triton]


def _configs(snapshot: str, count: int) -> list[dict]:
    from capture_compile import build_module  # bench/ (tests/conftest.py puts it on the path)

    # the small elementwise kernels first: each compiles in well under a second
    return build_module().configs_for(snapshot)[:count]


def tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


class Compiles:
    """Compile runs of one target's configs, each a fresh process as a user's job would be."""

    def __init__(self, work: Path, target: str, count: int = 4) -> None:
        backend, arch, warp, snapshot = TARGETS[target]
        self.work = work
        self.configs = _configs(snapshot, count)
        self.spec = {"backend": backend, "target": arch, "warp_size": warp}
        self.triton_dir = work / "triton-cache"  # TRITON_CACHE_DIR of every run: group files name it
        self.runs = 0

    def run(self, env: dict[str, str], configs: list[dict] | None = None, wait: bool = True):
        self.runs += 1
        results = self.work / f"results-{self.runs}.jsonl"
        spec_path = self.work / f"spec-{self.runs}.json"
        spec_path.write_text(json.dumps({**self.spec, "configs": configs or self.configs, "results": str(results)}))
        full = {
            **os.environ,
            "TRITON_CACHE_DIR": str(self.triton_dir),
            "TRITON_HIP_LLD_PATH": LLD,
            "TRITON_HOME": str(self.work / "triton-home"),
            **env,
        }
        proc = subprocess.Popen(
            [sys.executable, str(COMPILE), str(spec_path)],
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.work,
        )
        if not wait:
            return proc, results
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        lines = [json.loads(line) for line in results.read_text().splitlines()]
        assert all("cache_key" in r for r in lines), lines
        return lines, err

    def reference(self) -> Path:
        """The directory Triton's own FileCacheManager writes for these compiles."""
        shutil.rmtree(self.triton_dir, ignore_errors=True)
        self.run({})
        ref = self.work / "reference"
        os.replace(self.triton_dir, ref)
        return ref


def kdb(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kdb", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def capture_env(home: dict[str, str], tag: str, stats: Path, **extra: str) -> dict[str, str]:
    return {
        "TRITON_CACHE_MANAGER": "kdb.capture:CacheManager",
        "KDB_CAPTURE_TAG": tag,
        "KDB_CAPTURE_STATS": str(stats),
        **home,
        **extra,
    }


def counters(stats: Path) -> dict[str, int]:
    total: dict[str, int] = {}
    for path in stats.glob("*.json"):
        for key, value in json.loads(path.read_text()).items():
            if isinstance(value, int) and key != "pid":
                total[key] = total.get(key, 0) + value
    return total


def exported(home: dict[str, str], tag: str, dest: Path) -> dict[str, str]:
    r = kdb(home, "export", tag, str(dest), "--verbatim")  # the stored bytes, group files included
    assert r.returncode == 0, r.stderr
    return tree(dest)


# -- byte for byte, and a second process compiles nothing -----------------------------------------------


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_capture_exports_triton_cache_dir_byte_for_byte_and_serves_a_second_process(tmp_path, target):
    compiles = Compiles(tmp_path, target)
    ref = compiles.reference()
    home = {"KDB_HOME": str(tmp_path / "home")}

    first, err = compiles.run(capture_env(home, "first", tmp_path / "stats-1"))
    assert "kdb capture" not in err, err
    assert not compiles.triton_dir.exists()  # Triton's folder is not used at all
    c1 = counters(tmp_path / "stats-1")
    files = sum(1 for _ in ref.rglob("*") if _.is_file())
    assert c1["puts"] == files and c1["misses"] >= len(compiles.configs), c1
    assert exported(home, "first", tmp_path / "export") == tree(ref)

    second, err = compiles.run(capture_env(home, "second", tmp_path / "stats-2"))
    assert [r["cache_key"] for r in second] == [r["cache_key"] for r in first]
    c2 = counters(tmp_path / "stats-2")
    assert c2.get("puts", 0) == 0 and c2.get("misses", 0) == 0, c2  # compiled nothing
    assert c2["hits"] == c2["lookups"] == files, c2  # every file of every kernel served by kdb
    # the second run's snapshot holds the kernels it used, served from the first's folders
    assert exported(home, "second", tmp_path / "export-2") == tree(ref)
    diff = kdb(home, "diff", "first", "second", "--format", "json")
    assert diff.returncode == 0, diff.stderr
    labels = [k["label"] for k in json.loads(diff.stdout)["kernels"]]
    assert labels == ["same"] * len(compiles.configs), labels
    assert kdb(home, "verify").returncode == 0


def test_remote_backend_keeps_triton_folder_format(tmp_path):
    """Triton's RemoteCacheManager in front, kdb as its backend: the capture still exports the directory
    Triton's own FileCacheManager writes (RemoteCacheManager's own group files are name lists)."""
    compiles = Compiles(tmp_path, "gfx942")
    ref = compiles.reference()
    home = {"KDB_HOME": str(tmp_path / "home")}
    remote = {
        "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
        "TRITON_REMOTE_CACHE_BACKEND": "kdb.capture:RemoteBackend",
    }
    compiles.run({**capture_env(home, "r1", tmp_path / "stats-1"), **remote})
    assert exported(home, "r1", tmp_path / "export") == tree(ref)
    shutil.rmtree(compiles.triton_dir)  # Triton's local folder gone: a fresh node of the fleet
    compiles.run({**capture_env(home, "r2", tmp_path / "stats-2"), **remote})
    c2 = counters(tmp_path / "stats-2")
    assert c2.get("puts", 0) == 0 and c2.get("misses", 0) == 0 and c2["hits"] > 0, c2


# -- many processes at once -------------------------------------------------------------------------------


def _eight_at_once(tmp_path: Path, home: dict[str, str]) -> None:
    compiles = Compiles(tmp_path, "gfx942", count=6)
    ref = compiles.reference()
    n = len(compiles.configs)
    procs = []
    started = time.monotonic()
    for i in range(8):  # each compiles 4 of the 6 configs, rotated: every config by 5 or 6 processes at once
        subset = [compiles.configs[(i + j) % n] for j in range(4)]
        procs.append(
            compiles.run(capture_env(home, "eight", tmp_path / "stats", KDB_CAPTURE_WAIT="60"), subset, wait=False)
        )
    for proc, results in procs:
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-2000:]
        assert "kdb capture" not in err, err
        assert all("cache_key" in json.loads(line) for line in results.read_text().splitlines())
    elapsed = time.monotonic() - started
    r = kdb(home, "capture", "commit", "--tag", "eight")  # whatever a busy exit left spooled
    assert r.returncode == 0, r.stderr
    assert kdb(home, "verify").returncode == 0
    assert exported(home, "eight", tmp_path / "export") == tree(ref)  # nothing lost, nothing torn
    rows = kdb(
        home,
        "sql",
        "SELECT count(*) AS n, count(DISTINCT cache_key) AS d FROM kernels k "
        "JOIN snapshots s USING (snapshot_id) WHERE s.tag = 'eight'",
        "--format",
        "json",
    )
    assert rows.returncode == 0, rows.stderr
    assert json.loads(rows.stdout) == [{"n": n, "d": n}], elapsed  # no duplicate rows
    c = counters(tmp_path / "stats")
    assert c["puts"] >= sum(1 for _ in ref.rglob("*") if _.is_file()), c


def test_eight_processes_capture_at_once_on_the_local_home(tmp_path):
    _eight_at_once(tmp_path, {"KDB_HOME": str(tmp_path / "home")})


def test_eight_processes_capture_at_once_on_a_shared_home(tmp_path, pg):
    _eight_at_once(tmp_path, {"KDB_CATALOG": pg.catalog_url(pg.new_database()), "KDB_STORE": str(tmp_path / "store")})


# -- kdb's problems are never the compile's ---------------------------------------------------------------


def test_unusable_home_never_breaks_a_compile(tmp_path):
    compiles = Compiles(tmp_path, "sm90", count=2)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the home should be\n")
    lines, err = compiles.run(capture_env({"KDB_HOME": str(blocker)}, "x", tmp_path / "stats"))
    assert len(lines) == 2
    said = [line for line in err.splitlines() if line.startswith("kdb capture:")]
    assert len(said) == 1 and "Triton goes on without kdb" in said[0], err


def test_catalog_held_too_long_defers_the_commit_and_loses_nothing(tmp_path):
    compiles = Compiles(tmp_path, "gfx942", count=3)
    ref = compiles.reference()
    home_dir = tmp_path / "home"
    home = {"KDB_HOME": str(home_dir)}
    assert kdb(home, "capture", "commit", "--tag", "busy").returncode == 0  # makes the home
    fd = os.open(home_dir / "write.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a long `kdb ingest` holds it
    try:
        started = time.monotonic()
        lines, err = compiles.run(capture_env(home, "busy", tmp_path / "stats", KDB_CAPTURE_WAIT="1"))
        assert time.monotonic() - started < 120
    finally:
        os.close(fd)
    assert len(lines) == 3
    said = [line for line in err.splitlines() if line.startswith("kdb capture:")]
    assert len(said) == 1 and "stay spooled" in said[0], err
    assert "; 3 folders stay spooled" in said[0], said  # counted where the busy commit left them
    status = kdb(home, "capture", "status", "--tag", "busy")
    assert "3 whole folders wait to be recorded" in status.stdout, status.stdout
    r = kdb(home, "capture", "commit", "--tag", "busy")
    assert r.returncode == 0 and "recorded 3 folders" in r.stdout, r.stdout + r.stderr
    assert exported(home, "busy", tmp_path / "export") == tree(ref)


def test_killed_capture_leaves_store_and_catalog_consistent(tmp_path):
    compiles = Compiles(tmp_path, "gfx942", count=4)
    ref = compiles.reference()
    home = {"KDB_HOME": str(tmp_path / "home")}
    rng = random.Random(20261125)
    killed = trial = 0
    # a compile of 4 small kernels lasts 2-5 s: trials go on until 3 were killed mid-run (a fast run beats its kill)
    while killed < 3 and trial < 12:
        trial += 1
        proc, _ = compiles.run(capture_env(home, "killed", tmp_path / f"stats-{trial}"), wait=False)
        time.sleep(rng.uniform(0.5, 2.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.communicate(timeout=600)
        # killed before its first commit made the catalog: then only the spool holds anything
        recorded = (tmp_path / "home" / "catalog.duckdb").exists()
        r = kdb(home, "verify") if recorded else kdb(home, "capture", "status", "--tag", "killed")
        assert r.returncode == 0, f"trial {trial}: {r.stdout}{r.stderr}"
    assert killed >= 3, f"{killed} of {trial} trials killed mid-run"
    compiles.run(capture_env(home, "killed", tmp_path / "stats-last"))
    assert kdb(home, "capture", "commit", "--tag", "killed").returncode == 0
    assert kdb(home, "verify").returncode == 0
    assert exported(home, "killed", tmp_path / "export") == tree(ref)


def test_removed_capture_turns_into_misses_not_failures(tmp_path):
    """`kdb rm` + `kdb gc` of a capture: gc removes the index entries naming the blobs it collected (issue 37), and
    later lookups of them are misses (Triton compiles again, kdb records it again), never a broken process."""
    compiles = Compiles(tmp_path, "gfx942", count=2)
    ref = compiles.reference()
    home = {"KDB_HOME": str(tmp_path / "home")}
    compiles.run(capture_env(home, "gone", tmp_path / "stats-1"))
    assert kdb(home, "rm", "gone").returncode == 0
    gc = kdb(home, "gc", "--format", "json")
    assert gc.returncode == 0 and json.loads(gc.stdout)["capture_index_removed"] == 2, gc.stdout + gc.stderr
    _, err = compiles.run(capture_env(home, "again", tmp_path / "stats-2"))
    assert "kdb capture" not in err, err
    c = counters(tmp_path / "stats-2")
    assert c.get("stale_index", 0) == 0 and c["puts"] == sum(1 for p in ref.rglob("*") if p.is_file()), c
    assert exported(home, "again", tmp_path / "export") == tree(ref)
    assert kdb(home, "verify").returncode == 0


def test_capture_check_reads_the_installed_triton():
    r = kdb({}, "capture", "check")
    import triton

    assert r.returncode == 0 and r.stdout.startswith(f"Triton {triton.__version__}: ") and "both work" in r.stdout, r
