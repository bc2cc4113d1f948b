#!/usr/bin/env python3
"""A warm start as a job feels it (issue 41): one process per target compiling every corpus config of a Triton
release offline (bench/capture_compile.py: the release's own JIT, no GPU), every compile a cache hit — whole
process wall time with Triton's own cache (TRITON_CACHE_DIR filled by an earlier run) against kdb.capture
(TRITON_CACHE_MANAGER=kdb.capture:CacheManager, a home filled by an earlier captured run, Triton's folder absent).

    nice python bench/capture_warm.py [--release 3.9.0] [--targets gfx942,sm90] [--repeat 5]
                                      [--baseline /tmp/kdb-capbase]

Per target: one cold Triton run and one cold kdb run (untimed: they fill the caches), then `--repeat` rounds of
warm runs, alternating Triton / kdb (/ the baseline checkout's kdb, "base", on the same home: it reads the index
and blobs, the served folders are new). Each warm run is a fresh process; kdb's counters (KDB_CAPTURE_STATS) must
say every lookup was a hit and nothing was put. The exit commit a kdb process leaves to a detached `kdb capture
commit` (its served folders joining the run's tag) is waited for, untimed, before the next run starts. The
release runs in its toolchain (/var/tmp/kdb-toolchains/t<release>/bin/python) with kdb and its dependencies
appended after its own site-packages (a sitecustomize), so its Triton comes first.

Results: bench/results/capture_warm.json (median and min of each, per target), a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPILE = ROOT / "bench" / "capture_compile.py"
RESULTS = ROOT / "bench" / "results" / "capture_warm.json"
WORK = ROOT / "bench" / ".data" / "capture-warm"
LLD = "/usr/lib/llvm-22/bin/ld.lld"
TARGETS = {"gfx942": ("hip", "gfx942", 64), "sm90": ("cuda", 90, 32)}


def toolchain_python(release: str) -> Path:
    py = Path(f"/var/tmp/kdb-toolchains/t{release}/bin/python")
    if not py.exists():
        raise SystemExit(f"no toolchain for Triton {release}: {py}")
    return py


def sitecustomize(work: Path) -> Path:
    """A folder holding a sitecustomize that appends the host's site-packages (kdb's dependencies, its editable
    finder) after the toolchain's own: kdb importable, the toolchain's Triton first."""
    folder = work / "site"
    folder.mkdir(parents=True, exist_ok=True)
    dirs = site.getsitepackages()
    (folder / "sitecustomize.py").write_text(f"import site\nfor d in {dirs!r}:\n    site.addsitedir(d)\n")
    return folder


def compile_run(py: Path, spec: dict, env: dict[str, str], work: Path, name: str) -> tuple[float, list[dict]]:
    results = work / f"{name}.jsonl"
    results.unlink(missing_ok=True)
    spec_path = work / f"{name}.json"
    spec_path.write_text(json.dumps({**spec, "results": str(results)}))
    t0 = time.perf_counter()
    done = subprocess.run([str(py), str(COMPILE), str(spec_path)], env=env, capture_output=True, text=True, cwd=work)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{name} failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
    if "kdb capture:" in done.stderr:
        raise SystemExit(f"{name}: kdb said: {done.stderr[-2000:]}")
    return elapsed, [json.loads(line) for line in results.read_text().splitlines()]


def counters(stats: Path) -> dict[str, int]:
    total: dict[str, int] = {}
    for path in stats.glob("*.json"):
        for key, value in json.loads(path.read_text()).items():
            if isinstance(value, int) and key != "pid":
                total[key] = total.get(key, 0) + value
    return total


def wait_adopted(home: Path, tag: str, limit_s: float = 120.0) -> float:
    """Until the tag's adoption log is taken and recorded (the detached exit commit finished); seconds waited."""
    adopt = home / "capture" / "adopt"
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if not (adopt / f"{tag}.log").exists() and not (adopt / f"{tag}.taking").exists():
            return time.monotonic() - t0
        time.sleep(0.05)
    raise SystemExit(f"the exit commit of {tag} did not finish in {limit_s:.0f} s")


def bench_target(target: str, args: argparse.Namespace, py: Path, site_dir: Path) -> dict:
    sys.path.insert(0, str(ROOT / "bench"))
    from capture_compile import build_module

    backend, arch, warp = TARGETS[target]
    configs = build_module().configs_for(f"t{args.release}-{target}")
    if args.configs:
        configs = configs[: args.configs]
    spec = {"backend": backend, "target": arch, "warp_size": warp, "configs": configs}
    work = WORK / target
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KDB_", "TRITON_"))}
    base |= {"TRITON_HIP_LLD_PATH": LLD, "TRITON_HOME": str(work / "triton-home")}

    def env(which: str, tag: str, stats: Path | None = None) -> dict[str, str]:
        code = str(args.baseline) if which == "base" else str(ROOT)
        out = base | {"PYTHONPATH": os.pathsep.join([str(site_dir), code])}
        if which == "triton":
            return out | {"TRITON_CACHE_DIR": str(work / "triton")}
        out |= {"TRITON_CACHE_DIR": str(work / "absent"), "TRITON_CACHE_MANAGER": "kdb.capture:CacheManager"}
        out |= {"KDB_HOME": str(work / "home"), "KDB_CAPTURE_TAG": tag}
        return out | ({"KDB_CAPTURE_STATS": str(stats)} if stats else {})

    print(f"## {target}: {len(configs)} configs, Triton {args.release}, load {os.getloadavg()[0]:.2f}", flush=True)
    cold_t, lines = compile_run(py, spec, env("triton", ""), work, "cold-triton")
    keys = [r.get("cache_key") for r in lines]
    ok = sum(1 for k in keys if k)
    cold_k, lines_k = compile_run(py, spec, env("kdb", "cold"), work, "cold-kdb")
    assert [r.get("cache_key") for r in lines_k] == keys, "kdb's compile gave other cache keys"
    print(f"  cold: Triton {cold_t:.1f} s, kdb {cold_k:.1f} s ({ok} of {len(configs)} configs compiled)", flush=True)
    managers = ["triton", "kdb"] + (["base"] if args.baseline else [])
    times: dict[str, list[float]] = {m: [] for m in managers}
    stats_of: dict[str, dict] = {}
    for i in range(args.repeat):
        for which in managers:
            tag = f"warm-{which}-{i}"
            stats = work / f"stats-{which}-{i}"
            elapsed, out = compile_run(py, spec, env(which, tag, stats), work, f"warm-{which}")
            assert [r.get("cache_key") for r in out] == keys, f"{which}: other cache keys"
            if which != "triton":
                c = counters(stats)
                assert c.get("puts", 0) == 0 and c.get("misses", 0) == 0 and c["hits"] == c["lookups"], (which, c)
                stats_of[which] = c
                wait_adopted(work / "home", tag)  # untimed: the detached exit commit (new kdb) ends first
            else:
                assert not (work / "absent").exists()
            times[which].append(elapsed)
            print(f"  warm #{i + 1} {which}: {elapsed:.2f} s", flush=True)
    summary = {m: {"median_s": statistics.median(t), "min_s": min(t), "runs_s": t} for m, t in times.items()}
    for m in managers:
        summary[m]["per_kernel_ms"] = 1e3 * summary[m]["median_s"] / ok
    return {"target": target, "configs": len(configs), "kernels": ok, "summary": summary, "counters": stats_of}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", default="3.9.0")
    ap.add_argument("--targets", default="gfx942,sm90")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--configs", type=int, default=0, help="only the first N configs of each target (0: all)")
    ap.add_argument("--baseline", type=Path, help="also the kdb of this checkout, as 'base'")
    ap.add_argument("--json", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.baseline:
        args.baseline = args.baseline.resolve()
    py = toolchain_python(args.release)
    site_dir = sitecustomize(WORK)
    load_before = os.getloadavg()
    results = [bench_target(t, args, py, site_dir) for t in args.targets.split(",")]
    print("\n| target | kernels | Triton warm (median) | kdb warm | kdb / Triton | baseline kdb | baseline / Triton |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        s = r["summary"]
        t, k = s["triton"]["median_s"], s["kdb"]["median_s"]
        b = s.get("base", {}).get("median_s")
        cells = f"{b:.2f} s | {b / t:.2f}×" if b else "— | —"
        print(f"| {r['target']} | {r['kernels']} | {t:.2f} s | {k:.2f} s | {k / t:.2f}× | {cells} |")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    doc = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit.stdout.strip(),
        "baseline": str(args.baseline) if args.baseline else None,
        "release": args.release,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "repeat": args.repeat,
        "results": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n(written to {args.json})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
