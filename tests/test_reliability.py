"""Reliability: killed writers, concurrent writers and readers lose nothing (README "Safety")."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from helpers import duckdb_shell, kdb, kdb_subprocess

from kdb.errors import ExitCode
from kdb.store.lock import is_held

sys.path.insert(0, str(ROOT / "bench"))
import crash_harness

SEED = int(os.environ.get("KDB_CRASH_SEED", "20251121"))


pytestmark = pytest.mark.slow  # killed and concurrent real ingests, the crash harness


@pytest.fixture(scope="module")
def amd(corpus_manifest, unpack_snapshot):
    name = crash_harness.smallest_amd_snapshot(corpus_manifest)
    entry = corpus_manifest["snapshots"][name]
    return unpack_snapshot(name), entry["kernel_count"], entry["file_count"]


def _start(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kdb", "--home", str(home), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _counts(capsys, home: Path, tag: str) -> tuple[int, int]:
    shown = kdb(capsys, home, "show", tag, "--format", "json").json()
    return shown["kernel_count"], shown["file_count"]


def _lock_held(home: Path) -> bool:
    """Whether a kdb writer holds write.lock now (probing takes the lock for an instant when free)."""
    return is_held(home / "write.lock")


def _file_locked_by_other(path: Path) -> bool:
    """Whether another process holds a POSIX lock on `path` (DuckDB locks its whole database file);
    F_GETLK only asks, so the probe never takes the lock from under the process being watched."""
    request = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    fd = os.open(path, os.O_RDWR)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, request)
    finally:
        os.close(fd)
    return struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.01)
    return False


# -- crashes -------------------------------------------------------------------------------------


def test_sigkilled_ingest_rm_and_gc_leave_consistent_home(tmp_path):
    """bench/crash_harness.py with fewer trials: each kill leaves a verifiable home, the redo succeeds."""
    lines: list[str] = []
    # Kill delays are random, and rm/gc last a few tenths of a second: on a fast or a noisy machine
    # some runs finish before their kill. The harness adds trials until enough of each kind were
    # really killed before finishing, and this test fails if even the extra trials do not get there.
    wanted = {"ingest": 4, "rm": 2, "gc": 2}
    report = crash_harness.run(
        {"ingest": 6, "rm": 3, "gc": 3}, SEED, workdir=tmp_path, min_killed=wanted, log=lines.append
    )
    summary = "\n".join(lines) + "\n" + report.summary()
    assert sum(report.trials.values()) >= 12, summary
    assert report.inconsistencies == [], summary
    assert report.tracebacks == [], summary
    for kind, count in wanted.items():
        assert report.killed[kind] >= count, summary


def test_ingest_killed_before_migrations_leaves_verifiable_home(tmp_path, capsys):
    """Regression: the catalog used to appear under its name before its migrations ran, so a kill in
    between left a catalog every reader refused. Now the first file a kill can leave is fully migrated."""
    from kdb.store.catalog import Catalog

    home = tmp_path / "home"
    Catalog._create(home / "catalog.duckdb")
    r = kdb(capsys, home, "verify")
    assert r.code == 0, r.err
    assert kdb(capsys, home, "tags", "--format", "json").code == 0


def test_harness_store_check_sees_a_partial_blob(corpus_manifest, ingested_copy, capsys):
    """The harness's own store check must not be blind: a truncated blob under its final name is caught."""
    home = ingested_copy([("t", crash_harness.smallest_amd_snapshot(corpus_manifest))])  # `kdb ingest` exit 0
    assert crash_harness.check_store(home / "objects") == []
    # A dictionary is a blob too, but truncating one damages every blob of its kind (its own test is in
    # test_dictionaries.py); its random id decides where it sorts, so leave dictionaries out of the pick.
    dictionaries = {entry.name.rsplit("-", 1)[1] for entry in (home / "objects" / "dictionaries").iterdir()}
    assert dictionaries  # the real cache has kinds with enough files to train one
    blob = next(
        p
        for p in sorted((home / "objects").rglob("*"))
        if p.is_file() and p.stat().st_size > 100 and p.parent.name + p.name not in dictionaries
    )
    (blob.parent / ".tmp-leftover").write_bytes(blob.read_bytes()[:50])  # an interrupted write: allowed
    assert crash_harness.check_store(home / "objects") == []
    blob.write_bytes(blob.read_bytes()[: blob.stat().st_size // 2])
    problems = crash_harness.check_store(home / "objects")
    assert len(problems) == 1 and blob.parent.name + blob.name in problems[0]
    # A truncated dictionary is caught too, named first (then every blob of its kind, which now cannot be read).
    entry = sorted((home / "objects" / "dictionaries").iterdir())[0]
    digest = entry.name.rsplit("-", 1)[1]
    dictionary = home / "objects" / digest[:2] / digest[2:]
    dictionary.write_bytes(dictionary.read_bytes()[: dictionary.stat().st_size // 2])
    problems = crash_harness.check_store(home / "objects")
    assert problems[0].startswith(f"store: dictionary entry {entry.name} ")
    damaged = {blob.parent.name + blob.name, digest}  # the truncated blob, and the dictionary as a blob
    others = [p for p in problems[1:] if not any(name in p for name in damaged)]
    assert len(others) > 1 and all("needs dictionary" in p for p in others)


# -- concurrent writers --------------------------------------------------------------------------


def test_two_ingests_at_once_both_complete(amd, tmp_path, capsys):
    cache, kernels, files = amd
    home = tmp_path / "home"
    first = _start(home, "ingest", str(cache), "--tag", "one", "-q")
    second = _start(home, "ingest", str(cache), "--tag", "two", "-q")
    for proc in (first, second):
        code, _, err = _finish(proc)
        assert code == 0, err
        assert err == ""
    assert _counts(capsys, home, "one") == (kernels, files)
    assert _counts(capsys, home, "two") == (kernels, files)
    assert kdb(capsys, home, "verify").code == 0


def test_second_writer_with_wait_0_exits_busy(amd, tmp_path, capsys):
    cache, kernels, files = amd
    home = tmp_path / "home"
    for attempt in range(3):  # retried only if the first ingest finished before the second could try
        first = _start(home, "ingest", str(cache), "--tag", f"first{attempt}", "-q", "-j", "1")
        assert _wait_for(lambda: _lock_held(home), first), "the first ingest never took write.lock"
        second = kdb_subprocess(home, "--wait", "0", "ingest", str(cache), "--tag", f"second{attempt}", "-q")
        code, _, err = _finish(first)
        assert code == 0, err
        if second.code == 0:
            continue
        assert second.code == ExitCode.BUSY, second.err
        assert second.out == ""
        lines = second.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kdb: error: catalog busy"), second.err
        assert "Traceback" not in second.err
        assert kdb(capsys, home, "show", f"second{attempt}").code == ExitCode.TAG  # nothing of it was recorded
        assert _counts(capsys, home, f"first{attempt}") == (kernels, files)
        break
    else:
        pytest.fail("the first ingest never outlasted the second's start")
    assert kdb(capsys, home, "verify").code == 0
    # gc and rm are writers too
    first = _start(home, "ingest", str(cache), "--tag", "third", "-q", "-j", "1")
    assert _wait_for(lambda: _lock_held(home), first)
    r_gc = kdb_subprocess(home, "--wait", "0", "gc")
    r_rm = kdb_subprocess(home, "--wait", "0", "rm", "first0")
    assert _finish(first)[0] == 0
    for r in (r_gc, r_rm):
        assert r.code in (ExitCode.BUSY, 0) and "Traceback" not in r.err
        if r.code == ExitCode.BUSY:
            assert r.err.startswith("kdb: error: catalog busy") and len(r.err.strip().splitlines()) == 1


# -- readers while a writer runs -----------------------------------------------------------------


def test_kdb_sql_during_ingest_succeeds_or_waits(amd, tmp_path, capsys):
    """README: readers work while an ingest runs; during its final commit they wait for it."""
    cache, kernels, files = amd
    home = tmp_path / "home"
    assert kdb(capsys, home, "ingest", str(cache), "--tag", "base", "-q").code == 0
    writer = _start(home, "ingest", str(cache), "--tag", "new", "-q", "-j", "1")
    seen = []
    while writer.poll() is None:
        r = kdb_subprocess(home, "sql", "SELECT count(*) AS n, sum(file_count) AS f FROM snapshots", "--format", "csv")
        assert r.code == 0, r.err
        assert "Traceback" not in r.err
        seen.append(r.out.splitlines()[1])
    code, _, err = _finish(writer)
    assert code == 0, err
    assert seen, "no reader ran while the ingest did"
    # each reader saw the snapshot either not at all or complete, never a part of it
    assert set(seen) <= {f"1,{files}", f"2,{2 * files}"}, seen
    assert _counts(capsys, home, "new") == (kernels, files)


def _duckdb_exe() -> str:
    exe = duckdb_shell()
    assert exe, "the DuckDB shell (pip package duckdb-cli) is a test dependency: pip install -e '.[test]'"
    return exe


def test_duckdb_shell_during_ingest_sees_all_or_nothing(amd, tmp_path, capsys):
    """The DuckDB shell does not retry: while kdb commits it may be refused with a lock error; never partial data."""
    exe = _duckdb_exe()
    cache, kernels, files = amd
    home = tmp_path / "home"
    assert kdb(capsys, home, "ingest", str(cache), "--tag", "base", "-q").code == 0
    writer = _start(home, "ingest", str(cache), "--tag", "new", "-q", "-j", "1")
    ok, refused = [], []
    while writer.poll() is None:
        r = subprocess.run(
            [
                exe,
                "-readonly",
                "-csv",
                "-noheader",
                str(home / "catalog.duckdb"),
                "-c",
                "SELECT count(*), sum(file_count) FROM snapshots",
            ],
            check=False,
            capture_output=True,
            text=True,
        )
        if r.returncode == 0:
            ok.append(r.stdout.strip())
        else:
            assert "lock" in r.stderr.lower(), r.stderr
            refused.append(r.stderr)
    code, _, err = _finish(writer)
    assert code == 0, err
    assert ok, "the shell never read the catalog during the ingest"
    assert set(ok) <= {f"1,{files}", f"2,{2 * files}"}, ok
    assert _counts(capsys, home, "new") == (kernels, files)


def test_ingest_waits_for_open_duckdb_shell_within_wait(amd, tmp_path, capsys):
    """A `duckdb -readonly` session holds the catalog: ingest waits up to --wait, then exits 6 in one line."""
    exe = _duckdb_exe()
    cache, kernels, files = amd
    home = tmp_path / "home"
    assert kdb(capsys, home, "ingest", str(cache), "--tag", "base", "-q").code == 0
    shell = subprocess.Popen(
        [exe, "-readonly", str(home / "catalog.duckdb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert _wait_for(lambda: _file_locked_by_other(home / "catalog.duckdb"), shell, 30), (
            "the shell never opened the catalog"
        )
        started = time.monotonic()
        r = kdb_subprocess(home, "--wait", "1", "ingest", str(cache), "--tag", "refused", "-q")
        elapsed = time.monotonic() - started
        assert r.code == ExitCode.BUSY, r.err
        assert len(r.err.strip().splitlines()) == 1 and "catalog busy" in r.err
        assert elapsed < 8, f"--wait 1 was not honoured: waited {elapsed:.1f} s"
        waiting = _start(home, "--wait", "60", "ingest", str(cache), "--tag", "later", "-q")
        time.sleep(2.0)
        assert waiting.poll() is None, "ingest did not wait for the shell"
    finally:
        shell.communicate(".quit\n", timeout=30)
    code, _, err = _finish(waiting)
    assert code == 0, err
    assert _counts(capsys, home, "later") == (kernels, files)
    assert kdb(capsys, home, "show", "refused").code == ExitCode.TAG
