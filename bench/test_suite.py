#!/usr/bin/env python3
"""Wall and CPU time of the test suite per tier, marker and test file (docs/developing.md's figures).

    python bench/test_suite.py                      # cold full run, warm full run, fast tier, each marker
    python bench/test_suite.py --tiers warm,fast    # only some of them
    python bench/test_suite.py --json out.json      # also machine-readable

Tiers (each a `python -m pytest` of its own, as a contributor types it, plus the arguments shown):
  cold     the README's command on an empty test cache ($KDB_TEST_CACHE pointed at a new folder): includes
           unpacking the corpus and ingesting every cached home once;
  warm     the README's command again on that cache;
  fast     -m "not slow" (the inner loop) on the warm cache;
  markers  -m MARKER for each marker of pyproject.toml that selects tests, on the warm cache.

Every line gives the wall time, the CPU time of pytest and every process it started (user + system: what a
busy machine does not inflate), and the load average before and after: on a shared machine the wall times
are only as good as it was quiet. Not a timed test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKERS = ["slow", "corpus_home", "llvm", "browser", "postgres", "strace", "triton", "nvidia_tools"]
SUMMARY_RE = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(label: str, args: list[str], env: dict[str, str]) -> dict:
    before = load()
    cpu_before = cpu_s()
    started = time.monotonic()
    times = Path(tempfile.mkdtemp(prefix="kdb-test-times-"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env={**env, "KDB_TEST_TIMES": str(times)},
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    cpu = cpu_s() - cpu_before
    last = next((line for line in reversed(proc.stdout.splitlines()) if SUMMARY_RE.search(line)), "")
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in SUMMARY_RE.findall(last)}
    row = {
        "tier": label,
        "args": " ".join(args),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "exit": proc.returncode,
        "counts": counts,
        "load_before": before,
        "load_after": load(),
    }
    tests = [json.loads(line) for f in sorted(times.glob("*.jsonl")) for line in f.read_text().splitlines()]
    shutil.rmtree(times, ignore_errors=True)
    row["per_file"] = _totals(tests, lambda t: [t["file"]])
    row["per_marker"] = _totals(tests, lambda t: t["markers"] or ["(none)"])
    row["slowest"] = sorted(tests, key=lambda t: -t["cpu_s"])[:15]
    summary = last.strip("= ")[:70]
    print(
        f"{label:<22} {wall:7.1f} s wall {cpu:7.1f} s CPU  exit {proc.returncode}  {summary:<70}  "
        f"load {before} -> {row['load_after']}",
        flush=True,
    )
    if proc.returncode not in (0, 5):
        print(proc.stdout[-3000:], file=sys.stderr)
    _print_totals(row)
    return row


def _totals(tests: list[dict], keys) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for t in tests:
        for key in keys(t):
            row = out.setdefault(key, {"tests": 0, "wall_s": 0.0, "cpu_s": 0.0})
            row["tests"] += 1
            row["wall_s"] = round(row["wall_s"] + t["wall_s"], 2)
            row["cpu_s"] = round(row["cpu_s"] + t["cpu_s"], 2)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["cpu_s"]))


def _print_totals(row: dict) -> None:
    """Per test file: its tests, wall and CPU seconds (setup included), its share of the tier's CPU, and `over`
    where that share is more than twice its share of the tests (a file that grew past its share)."""
    per_file = row["per_file"]
    cpu = sum(r["cpu_s"] for r in per_file.values()) or 1.0
    count = sum(r["tests"] for r in per_file.values()) or 1
    for name, r in per_file.items():
        share, fair = r["cpu_s"] / cpu, r["tests"] / count
        flag = "  over its share" if share > 2 * fair and r["cpu_s"] > 10 else ""
        print(
            f"    {name:<40} {r['tests']:5d} tests {r['wall_s']:8.1f} s wall {r['cpu_s']:8.1f} s CPU {share:6.1%}{flag}"
        )
    for name, r in row["per_marker"].items():
        print(f"    -m {name:<37} {r['tests']:5d} tests {r['wall_s']:8.1f} s wall {r['cpu_s']:8.1f} s CPU")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiers", default="cold,warm,fast,markers", help="comma-separated: cold, warm, fast, markers")
    parser.add_argument("--cache", type=Path, help="test cache folder to use (default: a new one, removed after)")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    parser.add_argument("pytest_args", nargs="*", help="extra arguments for every run (after --)")
    args = parser.parse_args()
    tiers = args.tiers.split(",")
    with tempfile.TemporaryDirectory(prefix="kdb-test-cache-") as tmp:
        cache = args.cache or Path(tmp)
        env = {**os.environ, "KDB_TEST_CACHE": str(cache)}
        print(f"{os.cpu_count()} CPUs; test cache {cache}; python -m pytest -q {' '.join(args.pytest_args)}")
        rows = []
        if "cold" in tiers:
            rows.append(run("cold (full, new cache)", args.pytest_args, env))
        if "warm" in tiers:
            rows.append(run("warm (full)", args.pytest_args, env))
        if "fast" in tiers:
            rows.append(run('fast (-m "not slow")', ["-m", "not slow", *args.pytest_args], env))
        if "markers" in tiers:
            for marker in MARKERS:
                rows.append(run(f"-m {marker}", ["-m", marker, *args.pytest_args], env))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["exit"] in (0, 5) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
