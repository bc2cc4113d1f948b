"""Measure the shared home (DuckLake on PostgreSQL + a shared store) as it grows, for docs/scale-out.md.

    python bench/fleet_scale.py                       # 16 daily snapshots of one 200-kernel runner
    python bench/fleet_scale.py --kernels 400 --days 16 --checkpoints 1,4,16

One runner's history: day 0 is a cache of N real corpus kernels (bench/scale_cache.py), each later day
the previous day's cache with --change-fraction of its kernels recompiled (new folders, same kernels).
Every day is ingested into one shared home on a throwaway PostgreSQL server (tests/pgserver.py); at the
checkpoints (1x, 4x, 16x days) it records: PostgreSQL database size and its transactions/rows written per
ingest (pg_stat_database), the Parquet bytes and files under STORE/lake, the blob bytes and files under
STORE/objects, catalog rows per table, and the latency (fastest of 3, each a fresh `kdb` process) of
`kdb tags`, `kdb diff` of the last two days and a summary query over every snapshot. Then `kdb gc` (which
merges DuckLake's small files) and the sizes again. Writes a JSON record and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "tests"))
from pgserver import PgServer  # noqa: E402

SUMMARY = "SELECT tag, arch, count(*) AS kernels, avg(vgpr_count), max(scratch_bytes) FROM kernels GROUP BY ALL"
TABLES = [
    "snapshots",
    "folder_sets",
    "folders",
    "folder_files",
    "blobs",
    "kernel_folders",
    "kernel_analysis",
    "instr_mix_counts",
    "source_line_counts",
]


def kdb(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kdb", *args], env={**os.environ, **env}, capture_output=True, text=True, check=False
    )


def fastest(env: dict[str, str], *args: str, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = kdb(env, *args)
        best = min(best, time.perf_counter() - t0)
        if r.returncode not in (0, 1):
            raise RuntimeError(f"kdb {' '.join(args)}: {r.stderr}")
    return best


def tree_size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def psql(pg: PgServer, db: str, sql: str) -> str:
    out = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user, "-d", db, "-Atc", sql],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def pg_counters(pg: PgServer, db: str) -> dict[str, int]:
    row = psql(
        pg,
        db,
        "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database "
        "WHERE datname = current_database()",
    )
    keys = ("xact_commit", "tup_inserted", "tup_updated", "tup_deleted")
    return dict(zip(keys, map(int, row.split("|")), strict=True))


def measure(pg: PgServer, db: str, env: dict[str, str], store: Path, days: list[str]) -> dict:
    rows = json.loads(
        kdb(
            env,
            "sql",
            " UNION ALL ".join(f"SELECT '{t}' AS t, count(*) AS n FROM {t}" for t in TABLES),
            "--format",
            "json",
        ).stdout
    )
    lake_bytes, lake_files = tree_size(store / "lake")
    blob_bytes, blob_files = tree_size(store / "objects")
    out = {
        "snapshots": len(days),
        "pg_bytes": int(psql(pg, db, "SELECT pg_database_size(current_database())")),
        "lake_bytes": lake_bytes,
        "lake_files": lake_files,
        "blob_bytes": blob_bytes,
        "blob_files": blob_files,
        "rows": {r["t"]: r["n"] for r in rows},
        "tags_s": fastest(env, "tags", "--format", "json"),
        "summary_s": fastest(env, "sql", SUMMARY, "--format", "json"),
    }
    if len(days) > 1:
        out["diff_s"] = fastest(env, "diff", days[-2], days[-1], "--format", "json")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=200)
    ap.add_argument("--days", type=int, default=16)
    ap.add_argument("--checkpoints", default="1,4,16")
    ap.add_argument("--change-fraction", type=float, default=0.05)
    ap.add_argument("--work", type=Path, default=BENCH / ".data" / "fleet")
    ap.add_argument("--out", type=Path, default=BENCH / ".data" / "fleet.json")
    a = ap.parse_args()
    checkpoints = {int(c) for c in a.checkpoints.split(",")}
    shutil.rmtree(a.work, ignore_errors=True)
    a.work.mkdir(parents=True)
    caches = [a.work / f"day{d:02d}" for d in range(a.days)]
    scale = [sys.executable, str(BENCH / "scale_cache.py")]
    subprocess.run([*scale, "--kernels", str(a.kernels), "--out", str(caches[0])], check=True, capture_output=True)
    for d in range(1, a.days):
        subprocess.run(
            [
                *scale,
                "--from",
                str(caches[d - 1]),
                "--out",
                str(caches[d]),
                "--seed",
                str(d),
                "--change-fraction",
                str(a.change_fraction),
            ],
            check=True,
            capture_output=True,
        )
    pg = PgServer().start()
    record: dict = {
        "kernels": a.kernels,
        "change_fraction": a.change_fraction,
        "cpus": os.cpu_count(),
        "ingests": [],
        "checkpoints": [],
    }
    try:
        db = pg.new_database()
        store = a.work / "store"
        env = {"KDB_CATALOG": pg.catalog_url(db), "KDB_STORE": str(store)}
        days: list[str] = []
        for d, cache in enumerate(caches):
            tag = f"day{d:02d}"
            before = pg_counters(pg, db) if days else None
            t0 = time.perf_counter()
            r = kdb(env, "ingest", str(cache), "--tag", tag, "-q")
            seconds = time.perf_counter() - t0
            if r.returncode not in (0, 1):
                raise RuntimeError(r.stderr)
            after = pg_counters(pg, db)
            days.append(tag)
            entry = {"tag": tag, "seconds": round(seconds, 2), "load": os.getloadavg()[0]}
            if before is not None:
                entry["pg"] = {k: after[k] - before[k] for k in after}
            record["ingests"].append(entry)
            print(json.dumps(entry), flush=True)
            if d + 1 in checkpoints:
                m = measure(pg, db, env, store, days)
                m["load"] = os.getloadavg()[0]
                record["checkpoints"].append(m)
                print(json.dumps(m), flush=True)
        t0 = time.perf_counter()
        kdb(env, "gc", "--grace", "0")
        gc_s = time.perf_counter() - t0
        after_gc = measure(pg, db, env, store, days)
        after_gc["gc_s"] = gc_s
        record["after_gc"] = after_gc
    finally:
        pg.stop()
    a.out.write_text(json.dumps(record, indent=1))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
