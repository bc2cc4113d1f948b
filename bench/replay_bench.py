#!/usr/bin/env python3
"""Issue 39's replay benchmark: `kdb replay -j J` against Triton compiling the same kernels itself.

Inputs: the real Inductor caches of the corpus with Triton 3.6.0 — the H100 ones
(corpus/inductor/h100-torch2.11-t3.6.0/*.tar.xz, sm90) and the AMD snapshots
(corpus/inductor/amd/*-t3.6.0-gfx942.tar.zst). A kernel folder is a folder holding a `.ttir` and its JSON;
`--kernels N` takes N of them, each cache's sorted by folder name, round-robin over the caches (sorted by name).

* baseline: the toolchain interpreter runs a plain `multiprocessing` pool of J processes, each kernel
  `triton.compile(ttir, target=GPUTarget(...), options={num_warps, num_ctas, num_stages, AMD options of its JSON})`
  into one fresh TRITON_CACHE_DIR (BASELINE below); timed as that process, start to end.
* kdb: the N folders copied into one cache, ingested into a scratch home with the toolchain registered (not
  timed); each run replays from a fresh copy of that home: `kdb --home H replay bench --triton 3.6.0 --tag r
  -j J --format json`, timed as that process (whole), with the JSON's `compile_seconds` (the toolchain phase:
  J toolchain processes, a fork per kernel) and `seconds` (inside kdb: TTIR writes, compile, collect, ingest).

Runs alternate baseline, kdb, baseline, kdb per J (--repeat 2); the minimum of each is reported.
Writes bench/results/replay_bench.json (one entry per machine and N, merged) and prints a markdown table.

    python bench/replay_bench.py --kernels 120 --jobs 1,2          # ~12 min on 2 cores
    python bench/replay_bench.py --kernels 1000 --jobs 16,8         # the issue's figure, a 16-core machine
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
H100 = REPO / "corpus" / "inductor" / "h100-torch2.11-t3.6.0"
AMD = REPO / "corpus" / "inductor" / "amd"
OUT = BENCH / "results" / "replay_bench.json"
DEFAULT_TOOLCHAIN = "/var/tmp/kdb-toolchains/t3.6.0/bin/python"
LLD = "/usr/lib/llvm-22/bin/ld.lld"
TRITON = "3.6.0"
OPTIONS = ("num_warps", "num_ctas", "num_stages")
AMD_OPTIONS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack", "schedule_hint", "instruction_sched_variant")

# Triton compiling the kernels itself, run by the toolchain interpreter: argv[1] a JSON file
# {"jobs": [{"ttir", "target": [backend, arch, warp_size], "options"}], "workers": J}; TRITON_CACHE_DIR set by
# the caller. Prints {"ok": n, "failed": [[ttir, error], ...], "pool_seconds": s}.
BASELINE = r"""
import json, multiprocessing, sys, time, traceback

def compile_one(job):
    import triton
    from triton.backends.compiler import GPUTarget
    backend, arch, warp_size = job["target"]
    target = GPUTarget(backend, int(arch) if backend == "cuda" else arch, int(warp_size))
    try:
        triton.compile(job["ttir"], target=target, options=job["options"])
        return None
    except Exception:
        return [job["ttir"], traceback.format_exc().strip().splitlines()[-1][:300]]

if __name__ == "__main__":
    request = json.load(open(sys.argv[1]))
    started = time.monotonic()
    with multiprocessing.Pool(request["workers"]) as pool:
        failed = [f for f in pool.imap_unordered(compile_one, request["jobs"], chunksize=1) if f]
    print(json.dumps({"ok": len(request["jobs"]) - len(failed), "failed": failed,
                      "pool_seconds": time.monotonic() - started}))
"""


@dataclass(frozen=True)
class Kernel:
    cache: str  # which corpus cache
    folder: Path  # the unpacked kernel folder
    ttir: str  # file name of its TTIR
    meta: dict[str, Any]


@dataclass(frozen=True)
class Setup:
    work: Path
    toolchain: str
    kernels: list[Kernel]
    base_home: Path  # ingested, toolchain registered; copied per kdb run
    cache: Path  # the N folders as one Triton cache
    worker: str | None  # --worker: another in_toolchain.py


def archives() -> list[tuple[str, Path]]:
    found = [(f"h100/{p.name.removesuffix('.tar.xz')}", p) for p in sorted(H100.glob("*.tar.xz"))]
    found += [(f"amd/{p.name.removesuffix('.tar.zst')}", p) for p in sorted(AMD.glob("*-t3.6.0-gfx942.tar.zst"))]
    return found


def unpack(archive: Path, dest: Path) -> Path:
    if (dest / ".done").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    if archive.name.endswith(".tar.xz"):
        subprocess.run(["tar", "-xJf", str(archive), "-C", str(dest)], check=True)
    else:
        zstd = subprocess.Popen(["zstd", "-dc", str(archive)], stdout=subprocess.PIPE)
        with tarfile.open(fileobj=zstd.stdout, mode="r|") as tar:
            tar.extractall(dest, filter="data")
        zstd.wait()
    (dest / ".done").touch()
    return dest


def kernel_folders(cache: str, root: Path) -> list[Kernel]:
    """Every kernel folder under `root` (an Inductor cache holds its Triton cache under triton/<device>/), by name."""
    found = []
    for ttir in root.rglob("*.ttir"):
        folder = ttir.parent
        meta_path = folder / (ttir.name.removesuffix(".ttir") + ".json")
        if not meta_path.is_file():
            continue
        meta = json.loads(meta_path.read_text())
        if isinstance(meta.get("target"), dict):
            found.append(Kernel(cache, folder, ttir.name, meta))
    return sorted(found, key=lambda k: k.folder.name)


def select(per_cache: list[list[Kernel]], n: int) -> list[Kernel]:
    """Round-robin over the caches, each in folder-name order; one folder name taken once."""
    chosen: list[Kernel] = []
    names: set[str] = set()
    depth = 0
    while len(chosen) < n and any(depth < len(c) for c in per_cache):
        for kernels in per_cache:
            if depth < len(kernels) and len(chosen) < n and kernels[depth].folder.name not in names:
                chosen.append(kernels[depth])
                names.add(kernels[depth].folder.name)
        depth += 1
    return chosen


def baseline_job(kernel: Kernel, cache: Path) -> dict[str, Any]:
    target = kernel.meta["target"]
    names = OPTIONS + (AMD_OPTIONS if target["backend"] == "hip" else ())
    options = {k: kernel.meta[k] for k in names if kernel.meta.get(k) is not None}
    return {
        "ttir": str(cache / kernel.folder.name / kernel.ttir),
        "target": [target["backend"], target["arch"], target["warp_size"]],
        "options": options,
    }


def kdb_cmd(home: Path, *args: str, worker: str | None = None) -> list[str]:
    if worker is None:
        return [sys.executable, "-m", "kdb", "--home", str(home), *args]
    # kdb with another kdb/replay/in_toolchain.py (to measure a change to it before it is made)
    patched = (
        "import runpy, sys; from pathlib import Path; import kdb.replay.run as run; "
        f"run.WORKER = Path({worker!r}); sys.argv[0] = 'kdb'; runpy.run_module('kdb', run_name='__main__')"
    )
    return [sys.executable, "-c", patched, "--home", str(home), *args]


def prepare(args: argparse.Namespace) -> Setup:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    per_cache = []
    for name, archive in archives():
        root = unpack(archive, work / "unpacked" / name)
        per_cache.append(kernel_folders(name, root))
    kernels = select(per_cache, args.kernels)
    if len(kernels) < args.kernels:
        print(f"only {len(kernels)} kernel folders in the caches", file=sys.stderr)
    cache = work / f"cache-{len(kernels)}"
    base_home = work / f"home-{len(kernels)}"
    done = base_home / ".done"  # the kdb it was made with: another's catalog may need a migration
    if not done.exists() or done.read_text() != commit():
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(base_home, ignore_errors=True)
        cache.mkdir()
        for k in kernels:
            shutil.copytree(k.folder, cache / k.folder.name)
        started = time.monotonic()
        subprocess.run(kdb_cmd(base_home, "ingest", str(cache), "--tag", "bench", "-q"), check=True)
        print(f"ingest of {len(kernels)} kernels: {time.monotonic() - started:.1f} s (not timed)", file=sys.stderr)
        subprocess.run(kdb_cmd(base_home, "toolchain", "add", TRITON, "--python", args.toolchain), check=True)
        done.write_text(commit())
    return Setup(work, args.toolchain, kernels, base_home, cache, args.worker)


def compile_env(cache_dir: Path) -> dict[str, str]:
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache_dir))
    env.setdefault("TRITON_HIP_LLD_PATH", LLD)
    return env


def run_baseline(setup: Setup, jobs: int) -> dict[str, Any]:
    out = setup.work / "baseline-cache"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    script = setup.work / "baseline.py"
    script.write_text(BASELINE)
    request = setup.work / "baseline-jobs.json"
    request.write_text(json.dumps({"jobs": [baseline_job(k, setup.cache) for k in setup.kernels], "workers": jobs}))
    started = time.monotonic()
    proc = subprocess.run(
        [setup.toolchain, str(script), str(request)], env=compile_env(out), capture_output=True, text=True
    )
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"baseline failed: {proc.stderr.strip()[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    folders = sum(1 for p in out.iterdir() if p.is_dir())
    return {
        "seconds": seconds,
        "pool_seconds": result["pool_seconds"],
        "ok": result["ok"],
        "failed": len(result["failed"]),
        "first_failures": result["failed"][:3],
        "cache_folders": folders,
    }


def run_kdb(setup: Setup, jobs: int) -> dict[str, Any]:
    home = setup.work / "home-run"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(setup.base_home, home, symlinks=True)
    args = ("replay", "bench", "--triton", TRITON, "--tag", "replayed", "-j", str(jobs), "--format", "json")
    cmd = kdb_cmd(home, *args, worker=setup.worker)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=compile_env(setup.work / "unused-cache"))
    seconds = time.monotonic() - started
    if proc.returncode not in (0, 1):  # 1: some kernel could not be replayed (counted below)
        raise SystemExit(f"kdb replay failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    doc = json.loads(proc.stdout)
    return {
        "seconds": seconds,
        "kdb_seconds": doc["seconds"],
        "compile_seconds": doc["compile_seconds"],
        "replayed": doc["replayed"],
        "failed": len(doc["failed"]),
        "first_failures": [f"{f['name']}: {f['reason']}" for f in doc["failed"][:3]],
    }


def measure(setup: Setup, jobs: int, repeat: int) -> dict[str, Any]:
    baselines, kdbs = [], []
    for i in range(repeat):
        baselines.append(run_baseline(setup, jobs))
        print(f"-j {jobs} #{i + 1} baseline {baselines[-1]['seconds']:.1f} s", file=sys.stderr)
        kdbs.append(run_kdb(setup, jobs))
        k = kdbs[-1]
        print(f"-j {jobs} #{i + 1} kdb {k['seconds']:.1f} s (compile {k['compile_seconds']:.1f} s)", file=sys.stderr)
    base = min(b["seconds"] for b in baselines)
    whole = min(k["seconds"] for k in kdbs)
    compile_s = min(k["compile_seconds"] for k in kdbs)
    return {
        "jobs": jobs,
        "baseline_s": round(base, 2),
        "kdb_whole_s": round(whole, 2),
        "kdb_compile_s": round(compile_s, 2),
        "ratio_whole": round(whole / base, 3),
        "ratio_compile": round(compile_s / base, 3),
        "replayed": kdbs[-1]["replayed"],
        "failed": kdbs[-1]["failed"],
        "baseline_ok": baselines[-1]["ok"],
        "baseline_failed": baselines[-1]["failed"],
        "runs": {"baseline": baselines, "kdb": kdbs},
    }


def commit() -> str:
    """HEAD, and which files of kdb/replay differ from it (others' work in progress is measured too)."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "kdb"], capture_output=True, text=True
    ).stdout.split("\n")
    changed = sorted(line[3:] for line in dirty if line.strip())
    return head.stdout.strip() + (f" + uncommitted {', '.join(changed)}" if changed else "")


def uptime() -> str:
    return Path("/proc/loadavg").read_text().strip()


def table(entry: dict[str, Any]) -> str:
    lines = [
        f"{entry['kernels']} kernels ({entry['mix']}), Triton {TRITON}, {entry['cpus']} CPUs, "
        f"load before {entry['load_before']}, after {entry['load_after']}",
        "",
        "| -j | baseline (Triton's own pool) | kdb replay, whole | kdb compile phase | whole / baseline "
        "| compile / baseline | replayed / failed | baseline ok / failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in entry["results"]:
        lines.append(
            f"| {r['jobs']} | {r['baseline_s']:.1f} s | {r['kdb_whole_s']:.1f} s | {r['kdb_compile_s']:.1f} s "
            f"| {r['ratio_whole']:.2f}x | {r['ratio_compile']:.2f}x | {r['replayed']} / {r['failed']} "
            f"| {r['baseline_ok']} / {r['baseline_failed']} |"
        )
    return "\n".join(lines)


def save(entry: dict[str, Any]) -> None:
    doc = json.loads(OUT.read_text()) if OUT.exists() else {"runs": {}}
    worker = f"/worker={Path(entry['worker']).name}" if entry["worker"] else ""
    doc["runs"][f"{entry['machine']}/{entry['cpus']}cpu/{entry['kernels']}k{worker}"] = entry
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=120, help="kernel folders (round-robin over the caches)")
    ap.add_argument("--jobs", default="1,2", help="comma-separated -j values")
    ap.add_argument("--toolchain", default=DEFAULT_TOOLCHAIN if Path(DEFAULT_TOOLCHAIN).exists() else sys.executable)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each, alternating; the minimum is kept")
    ap.add_argument("--work", default="/var/tmp/kdb-replay-bench", help="unpacked caches, homes (reused)")
    ap.add_argument("--machine", default=platform.node(), help="the name this run is recorded under")
    ap.add_argument("--no-save", action="store_true", help="print only")
    ap.add_argument("--worker", help="time kdb with this file in place of kdb/replay/in_toolchain.py")
    args = ap.parse_args()
    load_before = uptime()
    setup = prepare(args)
    mix: dict[str, int] = {}
    for k in setup.kernels:
        arch = ("sm" if k.meta["target"]["backend"] == "cuda" else "") + str(k.meta["target"]["arch"])
        mix[arch] = mix.get(arch, 0) + 1
    results = [measure(setup, int(j), args.repeat) for j in args.jobs.split(",")]
    entry = {
        "machine": args.machine,
        "cpus": os.cpu_count(),
        "kernels": len(setup.kernels),
        "mix": ", ".join(f"{v} {k}" for k, v in sorted(mix.items())),
        "caches": sorted({k.cache for k in setup.kernels}),
        "toolchain": args.toolchain,
        "worker": args.worker,
        "commit": commit(),
        "load_before": load_before,
        "load_after": uptime(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "results": results,
    }
    if not args.no_save:
        save(entry)
    print(table(entry))


if __name__ == "__main__":
    main()
