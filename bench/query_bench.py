"""The 10k-kernel diff and the summary query, on their own (the steps of run_bench.py that need no `zstd`).

    python bench/query_bench.py --kernels 10000 --snapshots 20 --json out.json

Builds cache A (scale_cache.py) and B (A with 5% of kernels changed), ingests A as a0 and B as b into a
fresh home (all cores), then times, fastest of --repeat, each in a fresh process: `kdb diff a0 b`, the
same diff with every pair's mnemonic counts compared (diff_full_compare.py), and, once the catalog holds
--snapshots snapshots (re-ingests of A), run_bench.py's summary query through `kdb sql`. Start-up
(`kdb --version`) is timed too. Memory: the tree's peak PSS of each command (run_bench.py's sampler).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from run_bench import QUERY, run  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=10000)
    ap.add_argument("--snapshots", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=BENCH / ".data" / "query")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    a_dir, b_dir, home = work / "cache-a", work / "cache-b", work / "home"
    scale = [sys.executable, str(BENCH / "scale_cache.py")]
    if not (a_dir / ".complete").exists():
        shutil.rmtree(a_dir, ignore_errors=True)
        subprocess.run(
            [*scale, "--kernels", str(args.kernels), "--out", str(a_dir)], check=True, stdout=subprocess.DEVNULL
        )
        (a_dir / ".complete").touch()
    shutil.rmtree(b_dir, ignore_errors=True)
    subprocess.run(
        [*scale, "--out", str(b_dir), "--from", str(a_dir), "--change-fraction", "0.05"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (b_dir / ".complete").unlink(missing_ok=True)
    shutil.rmtree(home, ignore_errors=True)
    env = {**os.environ, "KDB_HOME": str(home)}
    kdb = [sys.executable, "-m", "kdb"]
    out: dict[str, object] = {"cpus": os.cpu_count(), "kernels": args.kernels}
    for tag, cache, jobs in (("a0", a_dir, []), ("b", b_dir, []), ("a1", a_dir, ["-j", "2"])):
        if tag == "a1":  # the same cache on two workers, into a home of its own: memory at -j 2
            env_2 = {**env, "KDB_HOME": str(work / "home-j2")}
            shutil.rmtree(work / "home-j2", ignore_errors=True)
        r = run(
            f"ingest {tag}",
            kdb + ["ingest", str(cache), "--tag", tag, "-q", "--no-sass", *jobs],
            env_2 if jobs else env,
        )
        out[f"ingest_{tag}_s"], out[f"ingest_{tag}_pss_mb"] = r.seconds, r.tree_pss / 1e6
    diffs = [run(f"kdb diff a0 b #{i + 1}", kdb + ["diff", "a0", "b"], env) for i in range(args.repeat)]
    full = [
        run(
            f"diff, every mix compared #{i + 1}",
            [sys.executable, str(BENCH / "diff_full_compare.py"), str(home), "a0", "b"],
            env,
        )
        for i in range(args.repeat)
    ]
    print("   ", full[-1].stdout.strip(), flush=True)
    for i in range(1, args.snapshots - 1):
        run(f"re-ingest a{i}", kdb + ["ingest", str(a_dir), "--tag", f"a{i}", "-q", "--no-sass"], env)
    queries = [run(f"summary query #{i + 1}", kdb + ["sql", QUERY], env) for i in range(args.repeat)]
    starts = [run(f"kdb --version #{i + 1}", kdb + ["--version"], env) for i in range(args.repeat)]
    snapshots = subprocess.run(
        kdb + ["sql", "SELECT count(*) AS n FROM snapshots", "--format", "csv"], env=env, capture_output=True, text=True
    ).stdout.split()[-1]
    out.update(
        {
            "diff_s": min(r.seconds for r in diffs),
            "diff_rc": diffs[0].rc,
            "diff_pss_mb": max(r.tree_pss for r in diffs) / 1e6,
            "diff_every_mix_s": min(r.seconds for r in full),
            "summary_query_s": min(r.seconds for r in queries),
            "summary_snapshots": int(snapshots),
            "startup_s": min(r.seconds for r in starts),
            "diff_summary": next((ln for ln in diffs[0].stdout.splitlines() if ln.startswith("matched")), ""),
        }
    )
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
