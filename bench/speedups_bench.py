"""The compiled stage normaliser (kdb/_speedups.c, issue #31) against the pure-Python reference, in one run.

    python bench/speedups_bench.py [--folders 2000] [--analysis-folders 400] [--reps 3] [--root bench/.data/c2k]

Reads N kernel folders of a real cache into memory (default: all 2,000 of bench/.data/c2k, 504 of them with
PTX), then prints, CPU time (best of --reps):
  * stage_digest ms/file per kind, pure vs compiled, and the ratio (every output compared first);
  * the whole per-kernel analysis (kdb.analysis.folder.analyze_folders, sass off, batches of 24) ms/kernel
    with the normaliser pure, then compiled.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import defaultdict
from pathlib import Path

from kdb.analysis.folder import analyze_folders
from kdb.analysis.model import AnalysisOptions, FolderFile
from kdb.ingest.walker import kernel_json, walk_cache
from kdb.ingest.worker import folder_digest, groups_of
from kdb.store.blobs import hash_bytes
from kdb.triton import normalize

KINDS = ("ttir", "ttgir", "llir", "amdgcn", "ptx", "source")


def load(root: Path, n: int) -> list:
    groups = [g for g in groups_of(walk_cache(root).files) if g[2]]
    groups = groups[:: max(1, len(groups) // n)][:n]
    jobs = []
    for key, files, _ in groups:
        contents, hashes = [], []
        for f in files:
            data = Path(f.abspath).read_bytes()
            contents.append(FolderFile(f.rel, f.kind, data))
            hashes.append((f.rel[len(key) + 1 :], hash_bytes(data)))
        jf = kernel_json(files)
        assert jf is not None
        jobs.append((key, folder_digest(key, hashes), next(c for c in contents if c.rel == jf.rel), contents))
    return jobs


def best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        gc.collect()
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).parent / ".data" / "c2k")
    ap.add_argument("--folders", type=int, default=2000)
    ap.add_argument("--analysis-folders", type=int, default=400)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    compiled = normalize._COMPILED_NORMALISE
    if compiled is None:
        raise SystemExit("kdb._speedups is not built (or KDB_PURE_PYTHON=1): pip install -e . builds it")
    jobs = load(args.root, args.folders)
    texts: dict[str, list[str]] = defaultdict(list)
    for job in jobs:
        for c in job[3]:
            if c.kind in KINDS:
                texts[c.kind].append(c.data.decode("utf-8", "replace"))
    print(f"{len(jobs)} kernel folders of {args.root}; CPU time, best of {args.reps}")
    print(f"{'stage_digest':14s} {'files':>6s} {'kB/file':>8s} {'pure ms':>9s} {'C ms':>8s} {'ratio':>7s}")
    total_pure = total_c = 0.0
    for kind in KINDS:
        ts = texts.get(kind, [])
        if not ts:
            continue
        handed_back = 0
        for t in ts:
            out = compiled(t, kind)
            handed_back += out is None
            assert out is None or out == normalize.normalise_stage_pure(t, kind), f"{kind}: outputs differ"
        normalize._COMPILED_NORMALISE = None
        pure = best(lambda ts=ts, kind=kind: [normalize.stage_digest(t, kind) for t in ts], args.reps)
        normalize._COMPILED_NORMALISE = compiled
        fast = best(lambda ts=ts, kind=kind: [normalize.stage_digest(t, kind) for t in ts], args.reps)
        total_pure += pure
        total_c += fast
        kb = sum(map(len, ts)) / len(ts) / 1e3
        note = f"  ({handed_back} to Python)" if handed_back else ""
        print(
            f"{kind:14s} {len(ts):6d} {kb:8.1f} {pure / len(ts) * 1e3:9.3f} {fast / len(ts) * 1e3:8.3f}"
            f" {pure / fast:6.1f}x{note}"
        )
    print(
        f"{'per kernel':14s} {'':6s} {'':8s} {total_pure / len(jobs) * 1e3:9.3f} {total_c / len(jobs) * 1e3:8.3f}"
        f" {total_pure / total_c:6.1f}x"
    )

    opts = AnalysisOptions(sass=False)
    jobs = jobs[:: max(1, len(jobs) // args.analysis_folders)][: args.analysis_folders]

    def analysis() -> None:
        for i in range(0, len(jobs), 24):
            analyze_folders(jobs[i : i + 24], opts)

    analysis()  # warm-up: imports, caches
    normalize._COMPILED_NORMALISE = None
    pure = best(analysis, args.reps)
    normalize._COMPILED_NORMALISE = compiled
    fast = best(analysis, args.reps)
    print(
        f"whole analysis of {len(jobs)} kernels, ms/kernel: pure {pure / len(jobs) * 1e3:.2f}, compiled {fast / len(jobs) * 1e3:.2f}"
        f" ({pure / fast:.2f}x, {(pure - fast) / len(jobs) * 1e3:.2f} ms/kernel saved)"
    )


if __name__ == "__main__":
    main()
