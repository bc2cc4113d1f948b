"""How the first ingest scales with worker processes: one generated cache, `kdb ingest -j N` for each N.

    python bench/scaling.py --kernels 10000 --workers 1,2,4,8,16 --no-sass --json out.json

Made for the 16-core GPU machine the project borrows (its CPUs are the point; no GPU is used): the cache
is built there by bench/scale_cache.py from corpus/snapshots, every ingest runs as a subprocess into a
fresh home, and each run records wall time, the CPU time of the whole process tree (user + system of the
ingest and its reaped children) and the peak PSS of the tree (run_bench.py's sampler). The baseline is
`tar -cf - DIR` piped into Python's zstandard at level 3 on one thread (the GPU machine has no `zstd`
command), measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from run_bench import run, store_bytes  # noqa: E402


def tar_zstd_seconds(cache: Path, out: Path) -> tuple[float, int]:
    import zstandard

    started = time.perf_counter()
    tar = subprocess.Popen(["tar", "-cf", "-", "-C", str(cache.parent), cache.name], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    with out.open("wb") as fh:
        zstandard.ZstdCompressor(level=3).copy_stream(tar.stdout, fh)
    tar.wait()
    return time.perf_counter() - started, out.stat().st_size


def _phases(stdout: str) -> dict[str, float]:
    """The ingest's own phase timings (`kdb ingest --format json`: phase_seconds)."""
    try:
        return json.loads(stdout[stdout.index("{") :]).get("phase_seconds", {})
    except ValueError:
        return {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=10000)
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--sass", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--work", type=Path, default=BENCH / ".data" / "scaling")
    ap.add_argument("--cache", type=Path, help="an existing cache to ingest instead of building one")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    cache = args.cache
    if cache is None:
        cache = args.work / "cache"
        if not (cache / ".complete").exists():
            shutil.rmtree(cache, ignore_errors=True)
            t = time.perf_counter()
            subprocess.run(
                [sys.executable, str(BENCH / "scale_cache.py"), "--kernels", str(args.kernels), "--out", str(cache)],
                check=True,
            )
            (cache / ".complete").touch()
            print(f"# built {args.kernels} kernels in {time.perf_counter() - t:.1f} s", flush=True)
    files = sum(len(f) for _, _, f in os.walk(cache))
    tar_s, archive = min(tar_zstd_seconds(cache, args.work / "a.tar.zst") for _ in range(args.repeat))
    print(f"# cache {cache}: {files} files; tar | zstd -3 (1 thread) {tar_s:.2f} s, {archive / 1e6:.1f} MB", flush=True)
    kdb = [sys.executable, "-m", "kdb"]
    rows = []
    for n in (int(x) for x in args.workers.split(",")):
        best = None
        for i in range(args.repeat):
            home = args.work / "home"
            shutil.rmtree(home, ignore_errors=True)
            env = {**os.environ, "KDB_HOME": str(home)}
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            cmd = kdb + ["ingest", str(cache), "--tag", "a", "-q", "-j", str(n), "--format", "json"]
            cmd += [] if args.sass else ["--no-sass"]
            r = run(f"kdb ingest -j {n} #{i + 1}", cmd, env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            row = {
                "workers": n,
                "seconds": r.seconds,
                "cpu_seconds": cpu,
                "tree_pss_mb": r.tree_pss / 1e6,
                "rc": r.rc,
                "store_mb": store_bytes(home)[0] / 1e6,
                "phase_seconds": _phases(r.stdout),
            }
            print(f"  -j {n}: {r.seconds:.1f} s wall, {cpu:.1f} s CPU, rc {r.rc}, {row['phase_seconds']}", flush=True)
            if best is None or row["seconds"] < best["seconds"]:
                best = row
        rows.append(best)
    base = {r["workers"]: r["seconds"] for r in rows}
    for r in rows:
        r["speedup_vs_2"] = base[2] / r["seconds"] if 2 in base else None
        r["ratio_vs_tar"] = r["seconds"] / tar_s
    result = {
        "cpus": os.cpu_count(),
        "kernels": args.kernels,
        "files": files,
        "sass": args.sass,
        "tar_zstd3_seconds": tar_s,
        "archive_mb": archive / 1e6,
        "runs": rows,
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
