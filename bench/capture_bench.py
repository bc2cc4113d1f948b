"""kdb's Triton cache manager (`kdb.capture:CacheManager`) against Triton's own `FileCacheManager`, on real corpus
kernel folders, in-process, calling the manager as Triton's compiler does.

    nice python bench/capture_bench.py                          # gfx942 + sm90 snapshots, resnet18 gfx942; fastest of 3
    nice python bench/capture_bench.py --datasets t3.6.0-gfx942 --repeat 1 --profile   # a quick look + cProfile

Data (unpacked once into bench/.data/capture-bench/src): the kernel folders (those with a `__grp__NAME.json`;
the autotune-result folders are left out) of corpus snapshots t3.6.0-gfx942 (46) and t3.6.0-sm90 (41), and of the
Inductor resnet18 max-autotune cache recompiled for gfx942 with Triton 3.6.0 (254). Each folder is replayed as
`triton.compiler.compile` writes it: `get_cache_manager(key)`, `get_group(NAME.json)` (a miss), one
`put(data, name)` per file in the order of its group file (text as str, `.hsaco`/`.cubin` as bytes, the metadata
JSON last), then `put_group(NAME.json, {name: path})`. A hit is what `compile` + `CompiledKernel` do: a manager,
`get_group(NAME.json)`, then every file read (`read_bytes` for the binary, `read_text` for the rest, the metadata
parsed).

Every measured phase runs in its own process (`--worker`), each manager in a fresh folder (TRITON_CACHE_DIR;
KDB_HOME with KDB_CAPTURE_TAG=bench), which prints its timings as JSON:
  put   all folders written; kdb's commits (each put_group records the finished folder: `Capture.commit`,
        which runs kdb's ingest) timed apart by wrapping that method; the process's first kdb call (the
        capture made, the ingest imported) and its exit commit are timed apart too.
  hit   all folders read from a second process (kdb: nothing in its own folder, every file from the index and
        the blob store), then once more in that process (kdb: its own folder); kdb's exit commit (the folders
        it was served join the tag's snapshot) timed apart.
Puts alternate Triton / kdb, `--repeat` runs each (a fresh folder per run), and the fastest run counts. Hits run
on the last put run's folders: one untimed process per manager first (page cache warm), then `--repeat` each.
Inodes (files + directories) and bytes on disk (allocated blocks, hard links once, as du) are taken after the
last put process exited (run folders: bench/.data/capture-bench/run, removed unless --keep): kdb's whole home
(capture/ + objects/ + catalog files) against the Triton cache folder.

Results: a markdown table on stdout and bench/results/capture_bench.json.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
DATA = ROOT / "bench" / ".data" / "capture-bench"
RESULTS = ROOT / "bench" / "results" / "capture_bench.json"
BINARY = (".hsaco", ".cubin")
GROUP = "__grp__"
DATASETS = {
    "t3.6.0-gfx942": CORPUS / "snapshots" / "t3.6.0-gfx942.tar.zst",
    "t3.6.0-sm90": CORPUS / "snapshots" / "t3.6.0-sm90.tar.zst",
    "resnet18-gfx942": CORPUS / "inductor" / "amd" / "resnet18_infer_maxautotune-t3.6.0-gfx942.tar.zst",
}
MANAGERS: tuple[str, ...] = ("triton", "kdb")  # + "base" with --baseline
BASELINE: Path | None = None  # a checkout of the kdb the "base" manager runs (PYTHONPATH)


# -- data -------------------------------------------------------------------------------------------------


def unpack(name: str, dest: Path) -> Path:
    """A corpus archive unpacked once (the snapshot helper of corpus/unpack.py: a .tar.zst)."""
    if (dest / ".complete").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    sys.path.insert(0, str(CORPUS))
    from unpack import unpack_archive  # noqa: E402

    unpack_archive(DATASETS[name], dest)
    (dest / ".complete").touch()
    return dest


def kernel_folders(root: Path) -> list[dict]:
    """Every kernel folder under root, its files in the order the compile put them (its group file's)."""
    out = []
    for group in sorted(root.rglob(f"{GROUP}*.json")):
        meta = group.name[len(GROUP) :]
        names = list(json.loads(group.read_text())["child_paths"])
        if meta in names:  # the metadata JSON is put last, just before the group
            names = [n for n in names if n != meta] + [meta]
        out.append({"dir": str(group.parent), "key": group.parent.name, "meta": meta, "files": names})
    return out


# -- the measured processes ------------------------------------------------------------------------------


def _manager_class(which: str):
    import triton.runtime.cache  # noqa: F401 - imported in any process Triton compiles in, before its first put

    if which != "triton":
        from kdb.capture import CacheManager

        return CacheManager
    from triton.runtime.cache import FileCacheManager

    return FileCacheManager


def worker_put(which: str, folders: list[dict], profile: str | None) -> dict:
    loaded = []
    for f in folders:
        files = []
        for name in f["files"]:
            raw = (Path(f["dir"]) / name).read_bytes()
            files.append((name, raw if name.endswith(BINARY) else raw.decode()))
        loaded.append((f["key"], f["meta"], files))
    manager = _manager_class(which)
    commits: list[float] = []
    startup = 0.0
    if which != "triton":
        from kdb.capture import cache

        real_commit = cache.Capture.commit

        def timed_commit(self, wait_s: float) -> int:
            t0 = time.perf_counter()
            try:
                return real_commit(self, wait_s)
            finally:
                commits.append(time.perf_counter() - t0)

        cache.Capture.commit = timed_commit  # type: ignore[method-assign]
        t0 = time.perf_counter()
        cache.current()  # the process's first kdb call: the capture made, the ingest imported
        startup = time.perf_counter() - t0
    prof = cProfile.Profile() if profile else None
    miss = puts = groups = folder_total = 0.0
    nfiles = nbytes = 0
    if prof:
        prof.enable()
    for key, meta, files in loaded:
        t_folder = time.perf_counter()
        m = manager(key)
        t0 = time.perf_counter()
        assert m.get_group(meta) is None, f"{key}: a hit before the first put"
        miss += time.perf_counter() - t0
        group = {}
        t0 = time.perf_counter()
        for name, data in files:
            group[name] = m.put(data, name)
        puts += time.perf_counter() - t0
        t0 = time.perf_counter()
        m.put_group(meta, group)
        t1 = time.perf_counter()
        groups += t1 - t0
        folder_total += t1 - t_folder
        nfiles += len(files) + 1
        nbytes += sum(len(d) for _, d in files)
    if prof:
        prof.disable()
        prof.dump_stats(profile)
    out = {
        "folders": len(loaded),
        "files": nfiles - len(loaded),
        "bytes": nbytes,
        "miss_s": miss,
        "puts_s": puts,
        "put_group_s": groups,
        "folder_s": folder_total,
        "startup_s": startup,
    }
    if which != "triton":
        from kdb.capture import cache

        during = len(commits)
        out["stats"] = dict(cache.stats())
        t0 = time.perf_counter()
        cache._at_exit()  # the exit commit (whatever is still spooled), as atexit would run it
        out["exit_commit_s"] = time.perf_counter() - t0
        out["detached"] = getattr(cache._capture, "detached", None)
        cache._capture = None  # the registered hook then finds nothing to do
        out["commits_s"] = commits[:during]
        out["commit_s"] = sum(commits[:during])
    return out


def _read_like_compiled_kernel(group: dict[str, str]) -> int:
    meta = next(p for c, p in group.items() if c.endswith(".json"))
    json.loads(Path(meta).read_text())
    size = 0
    for c, p in group.items():
        if not c.endswith(".json"):
            size += len(Path(p).read_bytes() if c.endswith(BINARY) else Path(p).read_text())
    return size


def worker_hit(which: str, folders: list[dict], profile: str | None) -> dict:
    manager = _manager_class(which)
    startup = 0.0
    if which != "triton":
        from kdb.capture import cache

        t0 = time.perf_counter()
        cache.current()  # the process's first kdb call, timed apart as in the put process
        startup = time.perf_counter() - t0
    prof = cProfile.Profile() if profile else None
    passes = []
    for i in range(2):  # a process's first hits, then the same keys again in that process
        if prof and i == 0:
            prof.enable()
        t0 = time.perf_counter()
        for f in folders:
            group = manager(f["key"]).get_group(f["meta"])
            assert group is not None and len(group) == len(f["files"]), f"{f['key']}: not a whole hit: {group}"
            _read_like_compiled_kernel(group)
        passes.append(time.perf_counter() - t0)
        if prof and i == 0:
            prof.disable()
            prof.dump_stats(profile)
    out = {"folders": len(folders), "first_s": passes[0], "again_s": passes[1], "startup_s": startup}
    if which != "triton":
        from kdb.capture import cache

        out["stats"] = dict(cache.stats())
        t0 = time.perf_counter()
        cache._at_exit()  # the folders it was served join the tag's snapshot
        out["exit_commit_s"] = time.perf_counter() - t0
        out["detached"] = getattr(cache._capture, "detached", None)
        cache._capture = None
    return out


# -- the driver ------------------------------------------------------------------------------------------


def env_for(which: str, run_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KDB_", "TRITON_"))}
    env["TRITON_CACHE_DIR"] = str(run_dir / "triton")
    code = str(BASELINE) if which == "base" else str(ROOT)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")]))
    if which != "triton":
        env |= {"KDB_HOME": str(run_dir / "kdb"), "KDB_CAPTURE_TAG": "bench"}
    return env


def run_worker(mode: str, which: str, spec: Path, run_dir: Path, profile: Path | None = None) -> dict:
    cmd = [sys.executable, __file__, "--worker", mode, which, str(spec)]
    if profile:
        cmd.append(str(profile))
    done = subprocess.run(cmd, env=env_for(which, run_dir), capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"{mode} {which} failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
    if done.stderr.strip():
        print(f"  [{mode} {which} stderr] {done.stderr.strip()[-500:]}", file=sys.stderr)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    wait_for(out.get("detached"))
    return out


def wait_for(pid: int | None, limit_s: float = 120.0) -> None:
    """The exit commit a kdb process left to a detached `kdb capture commit` (not timed: after the process ended)
    ends before the next measured process starts, which it would otherwise compete with for the 2 cores."""
    deadline = time.monotonic() + limit_s
    while pid and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def tree_usage(paths: list[Path]) -> dict:
    """Inodes (files + directories + links below each path, the path itself counted) and bytes: apparent and
    allocated (st_blocks, each inode once, as du)."""
    seen: set[tuple[int, int]] = set()
    inodes = apparent = disk = 0
    for top in paths:
        if not top.exists():
            continue
        entries = [top] if not top.is_dir() else [top, *top.rglob("*")]
        for p in entries:
            st = p.lstat()
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            inodes += 1
            apparent += st.st_size
            disk += st.st_blocks * 512
    return {"inodes": inodes, "apparent_bytes": apparent, "disk_bytes": disk}


def kdb_usage(home: Path) -> dict:
    parts = {
        "capture": tree_usage([home / "capture"]),
        "objects": tree_usage([home / "objects"]),
        "catalog": tree_usage([p for p in home.iterdir() if p.name not in ("capture", "objects")]),
    }
    total = {k: sum(part[k] for part in parts.values()) for k in ("inodes", "apparent_bytes", "disk_bytes")}
    return {**total, "parts": parts}


def print_profile(path: Path, title: str, limit: int = 22) -> None:
    buf = io.StringIO()
    stats = pstats.Stats(str(path), stream=buf)
    stats.sort_stats("cumulative").print_stats(r"kdb/|duckdb|zstd|syncfs|posix|json", limit)
    text = buf.getvalue()
    start = text.find("   ncalls")
    print(f"\n### cProfile: {title}\n\n```\n{text[start:].rstrip()}\n```")


def bench_dataset(name: str, work: Path, repeat: int, profile: bool) -> dict:
    """Puts, hits and usage of one dataset; `profile`: one more cProfiled kdb put and hit run."""
    src = unpack(name, DATA / "src" / name)
    folders = kernel_folders(src)
    spec = work / f"{name}.json"
    spec.write_text(json.dumps(folders))
    print(f"## {name}: {len(folders)} kernel folders, load average {os.getloadavg()[0]:.2f}", flush=True)
    puts: dict[str, list[dict]] = {m: [] for m in MANAGERS}
    for i in range(repeat):
        for which in MANAGERS:
            run_dir = work / name / which
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dir.mkdir(parents=True)
            r = run_worker("put", which, spec, run_dir)
            puts[which].append(r)
            extra = f", commits {r['commit_s']:.2f} s" if which != "triton" else ""
            print(f"  put #{i + 1} {which}: {r['folder_s']:.2f} s{extra}", flush=True)
    kdb_dir, tri_dir = work / name / "kdb", work / name / "triton"
    usage = {"kdb": kdb_usage(kdb_dir / "kdb"), "triton": tree_usage([tri_dir / "triton"])}
    if "base" in MANAGERS:
        usage["base"] = kdb_usage(work / name / "base" / "kdb")
    hits: dict[str, list[dict]] = {m: [] for m in MANAGERS}
    for which in MANAGERS:
        run_worker("hit", which, spec, work / name / which)  # page cache warm; kdb: its exit commit adopts
    for i in range(repeat):
        for which in MANAGERS:
            r = run_worker("hit", which, spec, work / name / which)
            hits[which].append(r)
            print(f"  hit #{i + 1} {which}: {r['first_s']:.3f} s", flush=True)
    usage["kdb_after_hits"] = kdb_usage(kdb_dir / "kdb")
    profiles = {}
    if profile:
        for mode in ("put", "hit"):
            run_dir = work / name / f"profile-{mode}"
            if mode == "put":
                shutil.rmtree(run_dir, ignore_errors=True)
                run_dir.mkdir(parents=True)
            else:
                run_dir = kdb_dir
            prof = work / f"{name}-{mode}.prof"
            profiles[mode] = run_worker(mode, "kdb", spec, run_dir, prof)
            print_profile(prof, f"kdb {mode}, {name}")
    return {"dataset": name, "puts": puts, "hits": hits, "usage": usage, "profiled": profiles}


def summarize(res: dict) -> dict:
    """The fastest run of each manager, per folder / per file, in ms."""
    out: dict = {}
    for which in MANAGERS:
        p = min(res["puts"][which], key=lambda r: r["folder_s"])
        h = min(res["hits"][which], key=lambda r: r["first_s"])
        n, nf = p["folders"], p["files"]
        row = {
            "folders": n,
            "files": nf,
            "mb": p["bytes"] / 1e6,
            "put_file_ms": 1e3 * p["puts_s"] / nf,
            "put_folder_ms": 1e3 * p["folder_s"] / n,
            "put_group_ms": 1e3 * p["put_group_s"] / n,
            "miss_ms": 1e3 * p["miss_s"] / n,
            "hit_ms": 1e3 * h["first_s"] / n,
            "hit_again_ms": 1e3 * min(r["again_s"] for r in res["hits"][which]) / n,
            "inodes": res["usage"][which]["inodes"],
            "disk_mb": res["usage"][which]["disk_bytes"] / 1e6,
            "apparent_mb": res["usage"][which]["apparent_bytes"] / 1e6,
        }
        if which != "triton":
            commits = p["commits_s"]
            tenth = max(1, len(commits) // 10)
            row |= {
                "commit_ms": 1e3 * p["commit_s"] / n,
                "put_group_excl_commit_ms": 1e3 * (p["put_group_s"] - p["commit_s"]) / n,
                "commit_first_tenth_ms": 1e3 * sum(commits[:tenth]) / tenth,
                "commit_last_tenth_ms": 1e3 * sum(commits[-tenth:]) / tenth,
                "startup_ms": 1e3 * p["startup_s"],
                "hit_startup_ms": 1e3 * h["startup_s"],
                "put_exit_commit_ms": 1e3 * p["exit_commit_s"],
                "hit_exit_commit_ms": 1e3 * h["exit_commit_s"],
                "commits": p["stats"].get("commits", 0),
                "commits_deferred": p["stats"].get("commits_deferred", 0),
                "hit_store_reads": h["stats"].get("store_reads", 0),
                "hit_served": h["stats"].get("served", 0),
            }
        out[which] = row
    return out


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _cell(k: float, t: float, unit: str) -> str:
    ratio = f"{k / t:.1f}×" if t else "—"
    return f"{_num(k)} / {_num(t)}{' ' + unit if unit else ''} = {ratio}"


def table(summaries: dict[str, dict], kdb: str = "kdb") -> str:
    """The kdb manager `kdb` ("base": the baseline checkout) against Triton's."""
    names = list(summaries)
    head = "| measure (kdb / Triton = ratio) | " + " | ".join(
        f"{n} ({s[kdb]['folders']} folders, {s[kdb]['files']} files, {s[kdb]['mb']:.0f} MB)"
        for n, s in summaries.items()
    )
    lines = [head + " |", "|---" * (len(names) + 1) + "|"]
    rows = [
        ("put, per file", "put_file_ms", "ms"),
        ("put, per kernel folder (puts + put_group + its commit)", "put_folder_ms", "ms"),
        ("put_group, per folder (incl. commit)", "put_group_ms", "ms"),
        ("miss before compile (get_group), per folder", "miss_ms", "ms"),
        ("hit from a 2nd process, per kernel (get_group + read all)", "hit_ms", "ms"),
        ("hit again in that process, per kernel", "hit_again_ms", "ms"),
        ("inodes (files + dirs)", "inodes", ""),
        ("bytes on disk (du)", "disk_mb", "MB"),
    ]
    for label, key, unit in rows:
        cells = [_cell(s[kdb][key], s["triton"][key], unit) for s in summaries.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    kdb_only = [
        ("kdb: commit per folder (inside put_group)", "commit_ms"),
        ("kdb: put_group without its commit", "put_group_excl_commit_ms"),
        ("kdb: commit, first / last tenth of folders", None),
        ("kdb: first call of a process, compiling / reading (capture made, ingest imported)", "startup"),
        ("kdb: exit hook of the compiling process (commit, own folder removed)", "put_exit_commit_ms"),
        ("kdb: exit hook of the reading process (adoption commit, own folder removed)", "hit_exit_commit_ms"),
    ]
    for label, key in kdb_only:
        if key == "startup":
            cells = [f"{_num(s[kdb]['startup_ms'])} / {_num(s[kdb]['hit_startup_ms'])} ms" for s in summaries.values()]
        elif key is None:
            cells = [
                f"{_num(s[kdb]['commit_first_tenth_ms'])} / {_num(s[kdb]['commit_last_tenth_ms'])} ms"
                for s in summaries.values()
            ]
        else:
            cells = [f"{_num(s[kdb][key])} ms" for s in summaries.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default=",".join(DATASETS), help=f"comma-separated, of: {', '.join(DATASETS)}")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--profile", action="store_true", help="also one cProfiled kdb put and hit run (first dataset only)"
    )
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help=f"keep {DATA / 'run'}")
    parser.add_argument("--render", type=Path, metavar="JSON", help="only print the table of an earlier results file")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="CHECKOUT",
        help="also run the kdb of this checkout (e.g. `git worktree add /tmp/kdb-capbase COMMIT`) as manager 'base'",
    )
    args = parser.parse_args()
    if args.render:
        doc = json.loads(args.render.read_text())
        print(f"fastest of {doc['repeat']}, commit {doc['commit']}, load {doc['load_before']} -> {doc['load_after']}\n")
        print(table(doc["summary"]))
        if doc.get("baseline"):
            print(f"\nbaseline {doc['baseline']}:\n\n" + table(doc["summary"], "base"))
        return 0
    global MANAGERS, BASELINE
    if args.baseline:
        BASELINE = args.baseline.resolve()
        MANAGERS = ("triton", "base", "kdb")
    import triton

    work = DATA / "run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    load_before = os.getloadavg()
    print(f"# kdb.capture vs FileCacheManager, Triton {triton.__version__}, {os.cpu_count()} CPUs, load {load_before}")
    results, summaries = [], {}
    try:
        for name in args.datasets.split(","):
            res = bench_dataset(name, work, args.repeat, args.profile and not results)
            results.append(res)
            summaries[name] = summarize(res)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"\n## Results: fastest of {args.repeat}, load average after {load_after}\n")
    print(table(summaries))
    base_commit = None
    if BASELINE is not None:
        base_commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=BASELINE, capture_output=True, text=True
        )
        print(f"\n### Baseline kdb ({BASELINE}, {base_commit.stdout.strip()}) against Triton, same run\n")
        print(table(summaries, "base"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    doc = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit.stdout.strip(),
        "triton": triton.__version__,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": load_after,
        "repeat": args.repeat,
        "baseline": None if base_commit is None else base_commit.stdout.strip(),
        "summary": summaries,
        "runs": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n(written to {args.json.relative_to(ROOT) if args.json.is_relative_to(ROOT) else args.json})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        mode, which, spec = sys.argv[2], sys.argv[3], Path(sys.argv[4])
        prof = sys.argv[5] if len(sys.argv) > 5 else None
        fn = worker_put if mode == "put" else worker_hit
        print(json.dumps(fn(which, json.loads(spec.read_text()), prof)))
        sys.exit(0)
    sys.exit(main())
