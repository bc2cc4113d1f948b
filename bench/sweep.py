#!/usr/bin/env python3
"""The sweep: every oracle over every kernel, pair and release of the corpus, recorded.

    python bench/sweep.py                 # runs the sweep, writes bench/results/sweep.json (exit 1 on a mismatch)
    python bench/sweep.py --check         # says whether the recorded sweep covers today's source (exit 1 if not)
    python bench/sweep.py -- -x           # extra pytest arguments after --

The README's test command runs each oracle check on a stratified sample (tests/sampling.py); the sweep runs the
same tests with $KDB_SWEEP=1, so each check sees everything, and the tests kept for the sweep alone (marker
`sweep`). It runs every test file that holds such a check (SWEPT_TESTS), with every tool required
($KDB_REQUIRE_ALL_TOOLS=1: a missing oracle fails, never skips).

The record (bench/results/sweep.json) says what was checked: pytest's counts, every failing test (the
mismatches), how many items each check saw (the sampling log, summed per test and per check), the tools'
versions, the commit, and the sha256 of every source file the sweep covers (COVERED). tests/test_sweep_record.py,
part of the README's test command, fails naming this command when any covered file differs from the record.
Not a timed test: wall and CPU seconds are recorded, nothing asserts them.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "bench" / "results" / "sweep.json"
COMMAND = "python bench/sweep.py"
# A test file belongs to the sweep when it samples (imports tests/sampling.py, or calls a `sampled(...)` helper of
# another test module that does) or holds a test marked `sweep`.
SWEEP_FILE_RE = re.compile(r"^(?:import sampling|from sampling import)|\bsampled\(|pytest\.mark\.sweep\b", re.MULTILINE)
# What the sweep's verdict depends on, besides the test files it runs: kdb itself, the catalog migrations,
# the corpus and its build records, and the test machinery that picks and caches what the checks read.
COVERED_TREES = ("kdb", "schema")
COVERED_SUFFIXES = (".py", ".c", ".json", ".sql", ".md", ".zst", ".xz", ".txt", ".csv")
COVERED_FILES = (
    "tests/conftest.py",
    "tests/corpus_cache.py",
    "tests/sampling.py",
    "tests/oracle_cache.py",
    "tests/helpers.py",
    "tests/elf_oracle.py",  # the pyelftools oracle of the ELF records (test_amd_analysis, test_nvidia_analysis)
    "tests/pgserver.py",  # the real PostgreSQL of the shared-catalog checks (test_api, test_sql_readonly)
    "bench/pairing_matrix.py",
    "bench/sweep.py",
)
COVERED_GLOBS = ("corpus/**/*", "tests/nvidia_fixtures/*")


def swept_tests() -> list[str]:
    """The test files the sweep runs, relative to the root."""
    found = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if path.name != "test_sweep_record.py" and SWEEP_FILE_RE.search(path.read_text()):
            found.append(path.relative_to(ROOT).as_posix())
    return found


def covered_files() -> list[str]:
    files: set[str] = set()
    for tree in COVERED_TREES:
        for path in (ROOT / tree).rglob("*"):
            if path.is_file() and path.suffix in COVERED_SUFFIXES and "__pycache__" not in path.parts:
                files.add(path.relative_to(ROOT).as_posix())
    files.update(f for f in COVERED_FILES if (ROOT / f).is_file())
    for pattern in COVERED_GLOBS:
        files.update(p.relative_to(ROOT).as_posix() for p in ROOT.glob(pattern) if p.is_file())
    files.update(swept_tests())
    return sorted(f for f in files if "__pycache__" not in f)


def file_digests(files: list[str]) -> dict[str, str]:
    return {f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest() for f in files}


def source_digest(digests: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(digests.items())).encode()).hexdigest()


def stale_files(record: dict) -> list[str]:
    """Covered files added, removed or changed since the record was made."""
    now = file_digests(covered_files())
    then = record.get("files", {})
    return sorted(f for f in now.keys() | then.keys() if now.get(f) != then.get(f))


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def tool_versions() -> dict[str, str]:
    """The first line that names a version, of every oracle the sweep runs."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import LLVM_BIN, nvidia_tool_dir  # noqa: E402  (the same lookup as the tests)

    tools = {name: LLVM_BIN / name for name in ("llvm-readelf", "llvm-objdump", "llc", "ld.lld")}
    nv = nvidia_tool_dir()
    if nv is not None:
        tools.update({name: nv / name for name in ("cuobjdump", "nvdisasm")})
    # the Triton wheel's 12.8 copies: the oracles for the cubins NVIDIA's 13.x tools refuse
    spec = importlib.util.find_spec("triton")
    for location in (spec.submodule_search_locations or []) if spec else []:
        for name in ("cuobjdump", "nvdisasm"):
            if (Path(location) / "backends" / "nvidia" / "bin" / name).is_file():
                tools[f"{name} (triton)"] = Path(location) / "backends" / "nvidia" / "bin" / name
    out = {}
    for name, exe in tools.items():
        try:
            text = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60).stdout
        except OSError as exc:
            out[name] = f"missing: {exc}"
            continue
        line = next((ln.strip() for ln in text.splitlines() if re.search(r"\d+\.\d+", ln)), text.strip()[:80])
        out[name] = f"{exe}: {line}"
    for package in ("duckdb", "triton", "pytest"):
        try:
            out[package] = __import__(package).__version__
        except ImportError:
            out[package] = "missing"
    out["python"] = platform.python_version()
    cxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()
    out["g++"] = cxx[0] if cxx else "missing"
    return out


def junit_results(path: Path) -> tuple[dict[str, int], list[dict]]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures = []
    for case in ET.parse(path).getroot().iter("testcase"):
        node = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            counts["failed"] += 1
            failures.append({"test": node, "message": (bad.get("message") or "")[:2000]})
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts, failures


def checked_items(log: Path) -> dict[str, dict]:
    """Per test: how many items its checks saw, of how many (the sampling log of the run)."""
    per_test: dict[str, dict] = defaultdict(lambda: {"total": 0, "checked": 0, "calls": 0})
    if log.exists():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            row = per_test[entry["test"]]
            row["total"] += entry["total"]
            row["checked"] += entry["checked"]
            row["calls"] += 1
    return dict(sorted(per_test.items()))


def run_sweep(extra: list[str]) -> int:
    tests = swept_tests()
    files = covered_files()
    digests = file_digests(files)
    started = time.time()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory(prefix="kdb-sweep-") as tmp:
        junit, log = Path(tmp) / "junit.xml", Path(tmp) / "sampled.jsonl"
        env = {**os.environ, "KDB_SWEEP": "1", "KDB_SAMPLE_LOG": str(log), "KDB_REQUIRE_ALL_TOOLS": "1"}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *tests, *extra]
        print(f"sweep: KDB_SWEEP=1 {' '.join(cmd[1:])}", flush=True)
        proc = subprocess.run(cmd, cwd=ROOT, env=env)
        counts, failures = junit_results(junit) if junit.exists() else ({}, [{"test": "pytest", "message": "no junit"}])
        checks = checked_items(log)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    partial = [c for c in checks.values() if c["checked"] != c["total"]]
    record = {
        "command": COMMAND,
        "pytest": " ".join(cmd[3:4] + [a for a in cmd[4:] if not a.startswith("--junitxml")]),
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--", *COVERED_TREES, "tests", "corpus", "bench")),
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}",
        "wall_s": round(time.time() - started, 1),
        "cpu_s": round((cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime), 1),
        "exit": proc.returncode,
        "passed": proc.returncode == 0 and not failures and not partial,
        "tests": counts,
        "mismatches": failures,
        "items_checked": sum(c["checked"] for c in checks.values()),
        "items_total": sum(c["total"] for c in checks.values()),
        "checks": checks,
        "tools": tool_versions(),
        "test_files": tests,
        "source_sha256": source_digest(digests),
        "files": digests,
    }
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"sweep: {counts} ; {record['items_checked']} of {record['items_total']} items checked ; "
        f"{len(failures)} mismatches ; {record['wall_s']} s ; recorded in {RECORD.relative_to(ROOT)}"
    )
    return 0 if record["passed"] else 1


def check() -> int:
    if not RECORD.exists():
        print(f"no recorded sweep ({RECORD.relative_to(ROOT)}): run {COMMAND}")
        return 1
    record = json.loads(RECORD.read_text())
    stale = stale_files(record)
    if stale:
        print(f"the recorded sweep does not cover {len(stale)} changed files (first: {stale[:5]}): run {COMMAND}")
        return 1
    print(f"the recorded sweep covers today's source ({len(record['files'])} files); passed: {record['passed']}")
    return 0 if record["passed"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only say whether the record covers today's source")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()
    return check() if args.check else run_sweep(args.pytest_args)


if __name__ == "__main__":
    raise SystemExit(main())
