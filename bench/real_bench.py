"""kdb on the real caches of the corpus, against `tar -cf - DIR | zstd -3`, side by side in one run.

    python bench/run_bench.py --real                          # every real cache below, fastest of 3
    python bench/run_bench.py --real --caches gpt2 --repeat 1 # a quick look

Caches: the TorchInductor cache directories from an H100 (`corpus/inductor/h100-torch2.11-t3.6.0/*.tar.xz`,
ingested whole: Triton cache + generated modules + autotune files) and the same kernels compiled for
gfx942 (`corpus/inductor/amd/*-gfx942.tar.zst`, a Triton cache each; Triton 3.6.0 where the corpus has it,
else the newest release there, e.g. resnet18 with 3.5.1).

Per cache: the page cache is warmed (one `tar` read), then `tar | zstd -3` and the first `kdb ingest`
(every default analysis, SASS included where nvdisasm is found; a fresh home each time) each run
--repeat times, fastest kept; store = objects + catalog of the last first-ingest home; then one unchanged
re-ingests into that home (new tags) -> the first one's time (ratio to the first ingest) and store
growth, and the mean growth over REINGESTS of them: DuckDB writes a commit's changed blocks anew and
reuses the freed ones at the next, so one re-ingest's growth (~48 KB) is mostly taken back by the
following one (gfx942 gpt2 over six: +49, -65, +49, -49, +49, +16 KB). Load
average is printed before and after, since this 2-core machine is shared.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
H100 = REPO / "corpus" / "inductor" / "h100-torch2.11-t3.6.0"
AMD = REPO / "corpus" / "inductor" / "amd"
MB = 1024 * 1024
REINGESTS = 4


def real_caches() -> dict[str, Path]:
    caches = {f"h100/{p.name.removesuffix('.tar.xz')}": p for p in sorted(H100.glob("*.tar.xz"))}
    caches.pop("h100/triton_autotune", None)  # autotune results only, no kernel folders
    # AMD: one snapshot per scenario, Triton 3.6.0 (the H100 caches' release) where there is one
    by_scenario: dict[str, Path] = {}
    for p in sorted(AMD.glob("*-gfx942.tar.zst")):
        scenario = p.name.split("-t", 1)[0]
        if scenario not in by_scenario or "-t3.6.0-" in p.name:
            by_scenario[scenario] = p
    caches |= {f"amd/{p.name.removesuffix('.tar.zst')}": p for p in by_scenario.values()}
    return caches


def unpack(archive: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    if archive.name.endswith(".tar.xz"):
        with tarfile.open(archive, "r:xz") as tar:
            tar.extractall(dest, filter="data")
    else:
        import zstandard

        data = zstandard.ZstdDecompressor().stream_reader(archive.open("rb")).read()
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            tar.extractall(dest, filter="data")
    return dest


def bench_real(run, store_bytes, tree_bytes, work: Path, names: list[str], repeat: int) -> list[dict]:
    kdb = [sys.executable, "-m", "kdb"]
    rows = []
    print(f"# kdb on the real corpus caches, {os.cpu_count()} CPUs, load average {os.getloadavg()}", flush=True)
    for name, archive in real_caches().items():
        if names and not any(n in name for n in names):
            continue
        cache = unpack(archive, work / "caches" / name)
        raw, _ = tree_bytes(cache)
        nfiles = sum(len(f) for _, _, f in os.walk(cache))
        print(f"## {name}: {raw / MB:.1f} MB in {nfiles} files", flush=True)
        out = work / "archive.tar.zst"
        subprocess.run(f"tar -cf - -C {cache.parent} {cache.name} > /dev/null", shell=True, check=True)
        tars, firsts = [], []
        for i in range(repeat):
            tars.append(
                run(
                    f"tar | zstd -3 #{i + 1}",
                    f"tar -cf - -C {cache.parent} {cache.name} | zstd -3 -q -f -o {out}",
                    shell=True,
                )
            )
            home = work / "home"
            shutil.rmtree(home, ignore_errors=True)
            env = {**os.environ, "KDB_HOME": str(home)}
            firsts.append(run(f"kdb ingest (first) #{i + 1}", kdb + ["ingest", str(cache), "--tag", "a0", "-q"], env))
        archive_size = out.stat().st_size
        store, _ = store_bytes(home)
        again = run("kdb ingest (unchanged)", kdb + ["ingest", str(cache), "--tag", "a1", "-q"], env)
        grown, _ = store_bytes(home)
        agains = [again] + [
            run(f"kdb ingest (unchanged) #{i}", kdb + ["ingest", str(cache), "--tag", f"a{i}", "-q"], env)
            for i in range(2, REINGESTS + 1)
        ]
        grown_all, _ = store_bytes(home)
        notes = (
            subprocess.run(
                kdb
                + [
                    "sql",
                    "SELECT instr_source, count(*) AS n FROM kernels WHERE tag = 'a0' GROUP BY ALL ORDER BY 1",
                    "--format",
                    "csv",
                ],
                env=env,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[1:]
        )
        base, first = min(r.seconds for r in tars), min(r.seconds for r in firsts)
        rows.append(
            {
                "cache": name,
                "mb": raw / MB,
                "files": nfiles,
                "kdb": first,
                "tar": base,
                "store": store,
                "archive": archive_size,
                "again": again.seconds,
                "growth": grown - store,
                "growth_mean": (grown_all - store) / REINGESTS,
                "mix": ", ".join(notes),
                "rc": max(r.rc for r in [*firsts, *agains]),
            }
        )
        shutil.rmtree(cache, ignore_errors=True)
    print(f"\n## Results: real corpus caches, fastest of {repeat}, load average after {os.getloadavg()}\n")
    print(
        "| real cache | kdb first ingest | `tar \\| zstd -3` | ratio | store | archive | ratio "
        f"| unchanged re-ingest | ratio | growth | growth, mean of {REINGESTS} | mixes (instr_source: kernels) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['cache']} ({r['mb']:.0f} MB, {r['files']} files) | {r['kdb']:.2f} s | {r['tar']:.2f} s | "
            f"{r['kdb'] / r['tar']:.1f}× | {r['store'] / MB:.1f} MB | {r['archive'] / MB:.1f} MB | "
            f"{r['store'] / r['archive']:.2f}× | {r['again']:.2f} s | {r['again'] / r['kdb']:.2f}× | "
            f"{r['growth'] / 1024:+.0f} KB | {r['growth_mean'] / 1024:+.0f} KB ({r['growth_mean'] / r['store']:.2%}) | "
            f"{r['mix']}{'' if r['rc'] in (0, 1) else ' (rc ' + str(r['rc']) + ')'} |"
        )
    return rows
