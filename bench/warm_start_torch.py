#!/usr/bin/env python3
"""A real `torch.compile` warm start on the GPU machine: the whole process with kdb as Triton's cache against the
same process with Triton's own FileCacheManager (issue 41).

Per scenario of corpus/profiles/make_profiles.py (real models, random weights, two steps each), every run a fresh
process with a fresh TORCHINDUCTOR_CACHE_DIR, so Inductor generates every kernel again and asks Triton's cache for
each one; only Triton's cache is warm:
  cold-triton  TRITON_CACHE_DIR=W/tc                                        (fills Triton's folder)
  cold-kdb     TRITON_CACHE_MANAGER=kdb.capture:CacheManager, KDB_HOME=W/home (fills kdb)
  then --repeat times, alternating: warm-triton (W/tc again), warm-kdb (the same home and tag).
Whole-process seconds (interpreter start to exit, the kdb exit work included); the median warm run of each side
and their ratio; kdb's counters (KDB_CAPTURE_STATS) show every warm lookup was a hit.

    python3 bench/warm_start_torch.py --work W --out OUT [--scenario mlp_train] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from capture_warm import counters as _counters  # bench/ is this script's sys.path[0]

MODEL = Path(__file__).resolve().parent / "capture_torch.py"  # its --model runs one scenario's two steps


def _run(scenario: str, work: Path, env: dict[str, str], name: str) -> dict:
    inductor = work / f"inductor-{name}"
    shutil.rmtree(inductor, ignore_errors=True)  # Inductor compiles again: every kernel is asked of Triton's cache
    full = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor), **env}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(MODEL), "--model", scenario], env=full, capture_output=True, text=True, timeout=900
    )
    seconds = time.monotonic() - started
    shutil.rmtree(inductor, ignore_errors=True)
    return {"run": name, "rc": proc.returncode, "seconds": round(seconds, 3), "stderr_tail": proc.stderr[-800:]}


def scenario_runs(scenario: str, work: Path, repeat: int) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    triton = {"TRITON_CACHE_DIR": str(work / "tc")}

    def kdb(stats: str) -> dict[str, str]:
        return {
            "TRITON_CACHE_MANAGER": "kdb.capture:CacheManager",
            "KDB_HOME": str(work / "home"),
            "KDB_CAPTURE_TAG": f"warm-{scenario}",
            "KDB_CAPTURE_STATS": str(work / stats),
            "TRITON_CACHE_DIR": str(work / "tc-unused"),
        }

    runs = [_run(scenario, work, triton, "cold-triton"), _run(scenario, work, kdb("stats-cold"), "cold-kdb")]
    warm_counters = []
    for i in range(repeat):
        runs.append(_run(scenario, work, triton, f"warm-triton-{i}"))
        runs.append(_run(scenario, work, kdb(f"stats-warm-{i}"), f"warm-kdb-{i}"))
        warm_counters.append(_counters(work / f"stats-warm-{i}"))
    warm_t = [r["seconds"] for r in runs if r["run"].startswith("warm-triton")]
    warm_k = [r["seconds"] for r in runs if r["run"].startswith("warm-kdb")]
    return {
        "scenario": scenario,
        "runs": runs,
        "cold_counters": _counters(work / "stats-cold"),
        "warm_counters": warm_counters,
        "warm_triton_median_s": statistics.median(warm_t),
        "warm_kdb_median_s": statistics.median(warm_k),
        "warm_ratio": round(statistics.median(warm_k) / statistics.median(warm_t), 3),
        "tc_files": sum(1 for p in (work / "tc").rglob("*") if p.is_file()),
        "kdb_tc_unused_made": (work / "tc-unused").exists(),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scenario", action="append")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for scenario in args.scenario or ["mlp_train"]:
        results.append(scenario_runs(scenario, args.work / scenario, args.repeat))
        (args.out / "warm_start_torch.json").write_text(json.dumps(results, indent=1))
        last = results[-1]
        print(scenario, last["warm_triton_median_s"], last["warm_kdb_median_s"], last["warm_ratio"], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
