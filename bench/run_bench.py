"""Benchmark kdb at scale against `tar -cf - DIR | zstd -3`, on one generated cache, in one run.

    python bench/run_bench.py                      # 600 kernels (~0.26 GB cache), about 6 min on 2 cores
    python bench/run_bench.py --kernels 10000      # the issue's scale (~4.4 GB cache, ≥ 1 GB)
    python bench/run_bench.py --real               # the real corpus caches instead (bench/real_bench.py)

Steps (every kdb command runs as a subprocess, `kdb` CLI, its own fresh home under --work):
  1. scale_cache.py builds cache A (N kernels) and cache B (A with 5% of kernels changed);
  2. baseline: `tar -cf - A | zstd -3` -> time and archive size;
  3. `kdb ingest A --tag a0` (first ingest) -> time, store size (objects + catalog);
  4. `kdb ingest A --tag a1` (re-ingest, unchanged) -> time ratio vs 3, store growth;
  5. `kdb ingest B --tag b` (5% changed) -> time, store growth;
  6. `kdb diff a0 b` -> time (and the same diff with every mix compared), then `kdb gc` -> store growth
     once the catalog's free blocks are compacted away;
  7. more ingests of A until the catalog holds --snapshots snapshots, then
     `kdb sql "SELECT arch, count(*), avg(vgpr_count), max(scratch_bytes) FROM kernels GROUP BY arch"` -> time.
Memory: every command's process tree (ingest forks worker processes) is sampled every 50 ms; reported
are the peak of the tree's summed PSS (shared pages counted once, split between sharers) and the peak
RSS of the largest single process (wait4 ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
QUERY = "SELECT arch, count(*), avg(vgpr_count), max(scratch_bytes) FROM kernels GROUP BY arch"
MB = 1024 * 1024


@dataclass
class Run:
    label: str
    seconds: float
    rc: int
    tree_pss: int  # bytes, peak of the summed PSS of the process tree
    max_rss: int  # bytes, peak RSS of the largest single process
    stdout: str


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(label: str, cmd: list[str] | str, env: dict[str, str] | None = None, shell: bool = False) -> Run:
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            kids = _children_map()
            tree, todo = [], [proc.pid]
            while todo:
                pid = todo.pop()
                tree.append(pid)
                todo.extend(kids.get(pid, []))
            peak[0] = max(peak[0], sum(_pss(p) for p in tree))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    r = Run(label, seconds, proc.returncode, peak[0], usage.ru_maxrss * 1024, out.decode(errors="replace"))
    print(
        f"  {label:<34} {seconds:8.2f} s  rc={r.rc}  tree PSS {r.tree_pss / MB:7.1f} MB  "
        f"max RSS {r.max_rss / MB:7.1f} MB",
        flush=True,
    )
    return r


def tree_bytes(path: Path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of every regular file under path."""
    apparent = allocated = 0
    for root, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def store_bytes(home: Path) -> tuple[int, int]:
    a, b = tree_bytes(home / "objects") if (home / "objects").exists() else (0, 0)
    for f in home.glob("catalog.duckdb*"):
        a += f.stat().st_size
        b += f.stat().st_blocks * 512
    return a, b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", type=int, default=600)
    p.add_argument("--snapshots", type=int, default=20, help="snapshots in the catalog for the SQL query")
    p.add_argument("--change-fraction", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sources", default="*", help="corpus snapshots the cache copies (scale_cache.py --sources)")
    p.add_argument("--work", type=Path, default=BENCH / ".data" / "run")
    p.add_argument("--keep", action="store_true", help="keep the generated caches and kdb home")
    p.add_argument("--json", type=Path, help="also write the figures as JSON here")
    p.add_argument("--real", action="store_true", help="measure on the real corpus caches (bench/real_bench.py)")
    p.add_argument("--caches", nargs="*", default=[], help="--real: only caches whose name contains one of these")
    p.add_argument(
        "--repeat", type=int, default=3, help="--real: runs of each first ingest and baseline (fastest kept)"
    )
    args = p.parse_args(argv)
    # An installed kdb runs from bytecode pip compiled at install time; an editable checkout under
    # PYTHONDONTWRITEBYTECODE would compile kdb's modules again in every command it times (~50 ms each).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "kdb")], check=True)
    if args.real:
        sys.path.insert(0, str(BENCH))
        from real_bench import bench_real

        shutil.rmtree(args.work, ignore_errors=True)
        rows = bench_real(run, store_bytes, tree_bytes, args.work, args.caches, args.repeat)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
        return 0

    if shutil.which("zstd") is None:
        sys.exit("zstd not found: apt-get install zstd")
    work: Path = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    a_dir, b_dir, home, archive = work / "cache-a", work / "cache-b", work / "home", work / "a.tar.zst"
    env = {**os.environ, "KDB_HOME": str(home)}
    kdb = [sys.executable, "-m", "kdb"]
    scale = [sys.executable, str(BENCH / "scale_cache.py")]

    print(
        f"# kdb benchmark: {args.kernels} kernels from corpus snapshots {args.sources!r}, {os.cpu_count()} CPUs",
        flush=True,
    )
    run(
        "generate cache A",
        scale
        + ["--kernels", str(args.kernels), "--out", str(a_dir), "--seed", str(args.seed), "--sources", args.sources],
    )
    run(
        "generate cache B (changed)",
        scale
        + [
            "--from",
            str(a_dir),
            "--out",
            str(b_dir),
            "--seed",
            str(args.seed),
            "--change-fraction",
            str(args.change_fraction),
        ],
    )
    raw, _ = tree_bytes(a_dir)
    nfiles = sum(len(f) for _, _, f in os.walk(a_dir))
    print(f"  cache A: {raw / MB:.1f} MB in {nfiles} files", flush=True)

    # Warm the page cache the same way for both sides: everything was just written, read it once.
    subprocess.run(f"tar -cf - -C {a_dir.parent} {a_dir.name} > /dev/null", shell=True, check=True)
    base = run(
        "tar -cf - A | zstd -3", f"tar -cf - -C {a_dir.parent} {a_dir.name} | zstd -3 -q -o {archive}", shell=True
    )
    arch_size = archive.stat().st_size

    first = run("kdb ingest A (first)", kdb + ["ingest", str(a_dir), "--tag", "a0", "-q"], env)
    nosass = run(
        "kdb ingest A --no-sass (first, other home)",
        kdb + ["--home", str(work / "home-nosass"), "ingest", str(a_dir), "--tag", "a0", "-q", "--no-sass"],
        env,
    )
    s1, s1_alloc = store_bytes(home)
    re = run("kdb ingest A (re-ingest)", kdb + ["ingest", str(a_dir), "--tag", "a1", "-q"], env)
    s2, _ = store_bytes(home)
    chg = run("kdb ingest B (5% changed)", kdb + ["ingest", str(b_dir), "--tag", "b", "-q"], env)
    s3, _ = store_bytes(home)
    diff = run("kdb diff a0 b", kdb + ["diff", "a0", "b"], env)
    diff_summary = next((ln for ln in diff.stdout.splitlines() if ln.startswith("matched")), diff.stdout[-300:])
    print(f"    {diff_summary}")
    diff_json = run("kdb diff a0 b --format json", kdb + ["diff", "a0", "b", "--format", "json"], env)
    full = run(
        "kdb diff a0 b, every mix compared",
        [sys.executable, str(BENCH / "diff_full_compare.py"), str(home), "a0", "b"],
        env,
    )
    print(f"    {full.stdout.strip()}")
    # DuckDB leaves the blocks of the ingest's transaction free in the catalog; gc copies them away.
    gc = run("kdb gc (after the 5%-changed ingest)", kdb + ["gc"], env)
    print(f"    {gc.stdout.strip()}")
    s3_gc, _ = store_bytes(home)

    fills = []
    for i in range(2, args.snapshots - 1):
        fills.append(run(f"kdb ingest A (fill a{i})", kdb + ["ingest", str(a_dir), "--tag", f"a{i}", "-q"], env))
    s4, _ = store_bytes(home)
    count = run("kdb sql count", kdb + ["sql", "SELECT count(*) AS snapshots FROM snapshots"], env)
    q = run("kdb sql summary query", kdb + ["sql", QUERY], env)
    print(q.stdout)
    startup = run("kdb --version (startup)", kdb + ["--version"], env)

    ingests = [first, nosass, re, chg, *fills]
    peak_ingest = max(r.tree_pss for r in ingests)
    rows = [
        ("first ingest time", f"{first.seconds:.1f} s vs {base.seconds:.1f} s", first.seconds / base.seconds, "≤ 1.5×"),
        (
            "first ingest --no-sass",
            f"{nosass.seconds:.1f} s vs {base.seconds:.1f} s",
            nosass.seconds / base.seconds,
            "≤ 1.5×",
        ),
        ("store size (objects+catalog)", f"{s1 / MB:.0f} MB vs {arch_size / MB:.0f} MB", s1 / arch_size, "≤ 1.0×"),
        ("re-ingest time", f"{re.seconds:.1f} s vs {first.seconds:.1f} s", re.seconds / first.seconds, "≤ 0.1×"),
        ("re-ingest store growth", f"+{(s2 - s1) / MB:.1f} MB", (s2 - s1) / s1, "< 1%"),
        ("5%-changed ingest time", f"{chg.seconds:.1f} s vs {first.seconds:.1f} s", chg.seconds / first.seconds, "—"),
        ("5%-changed store growth", f"+{(s3 - s2) / MB:.1f} MB", (s3 - s2) / s2, "—"),
        (
            "5%-changed store growth after kdb gc",
            f"+{(s3_gc - s2) / MB:.1f} MB (gc {gc.seconds:.1f} s)",
            (s3_gc - s2) / s2,
            "—",
        ),
        # issue 16's targets: diff < 1 s, summary query < 0.3 s (session 3 measured against 2 s / 0.5 s)
        ("diff a0 b", f"{diff.seconds:.2f} s (rc {diff.rc})", diff.seconds / 1.0, "< 1 s"),
        ("diff a0 b --format json", f"{diff_json.seconds:.2f} s (rc {diff_json.rc})", diff_json.seconds / 1.0, "—"),
        ("diff a0 b, every mix compared", f"{full.seconds:.2f} s (rc {full.rc})", full.seconds / 1.0, "(< 1 s)"),
        (
            f"summary query, {count.stdout.split()[-1] if count.stdout.split() else '?'} snapshots",
            f"{q.seconds:.2f} s (startup {startup.seconds:.2f} s)",
            q.seconds / 0.3,
            "< 0.3 s",
        ),
        (
            "ingest peak memory (tree PSS)",
            f"{peak_ingest / MB:.0f} MB (max 1-proc RSS {max(r.max_rss for r in ingests) / MB:.0f} MB)",
            peak_ingest / (512 * MB),
            "< 512 MB",
        ),
    ]
    print(
        f"\n## Results: {args.kernels} kernels ({args.sources!r}), cache {raw / MB:.0f} MB / {nfiles} files, {os.cpu_count()} CPUs\n"
    )
    print("| measure | kdb vs baseline | ratio (diff/query/memory: × target) | target | met |")
    print("|---|---|---|---|---|")
    limits = [1.5, 1.5, 1.0, 0.1, 0.01, None, None, None, 1.0, 1.0, 1.0, 1.0]
    for (name, fig, ratio, target), lim in zip(rows, limits, strict=False):
        ok = "—" if lim is None else ("yes" if ratio <= lim else "**no**")
        shown = f"{ratio * 100:.2f}%" if "growth" in name else f"{ratio:.2f}×"
        print(f"| {name} | {fig} | {shown} | {target} | {ok} |")
    print(
        f"\nstore allocated on disk after first ingest: {s1_alloc / MB:.0f} MB (4 KiB blocks per blob); "
        f"apparent size after {args.snapshots} snapshots: {s4 / MB:.0f} MB; other peaks: "
        + ", ".join(f"{r.label} {r.tree_pss / MB:.0f} MB" for r in (base, diff, q))
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "kernels": args.kernels,
                    "raw_bytes": raw,
                    "files": nfiles,
                    "archive_bytes": arch_size,
                    "store": [s1, s2, s3, s3_gc, s4],
                    "runs": [
                        r.__dict__ | {"stdout": r.stdout[-2000:]}
                        for r in [base, *ingests, diff, full, gc, count, q, startup]
                    ],
                },
                indent=1,
            )
        )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
