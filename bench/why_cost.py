#!/usr/bin/env python3
"""What recording the key's parts (issue 42, kdb/capture/keyparts.py) costs per compile, against Triton's own put of
the same compile's folder (issue 41's budget: a put ≤ 1.2× Triton's), measured in the same process and run.

    nice python bench/why_cost.py [--count 12] [--repeat 200]

Real offline compiles of the first COUNT corpus configs of t3.6.0-gfx942 with the installed Triton (the stand-in
driver of corpus/build.py, no GPU) through `kdb.capture:CacheManager`, in this process; every listener call's
arguments kept. Then, per compile: the listener's work (a record built and appended to the process's file), REPEAT
times; and Triton's `FileCacheManager` writing that compile's folder (each file `put` in the group's order, then
`put_group`) into a fresh TRITON_CACHE_DIR, REPEAT // 10 times. Medians per compile, the ratio of the two, and the
first record of the process apart (it asks the backend its option names and hash once per target).
Results: stdout and bench/results/why_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kdb-why-cost-"))
    os.environ.update(
        TRITON_CACHE_MANAGER="kdb.capture:CacheManager",
        KDB_HOME=str(work / "home"),
        KDB_CAPTURE_TAG="why-cost",
        TRITON_HIP_LLD_PATH="/usr/lib/llvm-22/bin/ld.lld",
        TRITON_HOME=str(work / "triton-home"),
        TRITON_CACHE_DIR=str(work / "triton-cache"),
    )
    from capture_compile import build_module
    from capture_compile import main as compile_main

    import kdb.capture.keyparts as keyparts

    calls: list[tuple] = []
    first: list[float] = []
    write = keyparts._write

    def keeping(src, metadata, hit, how, folder=None):  # noqa: ANN001 - the listener's own arguments
        started = time.perf_counter()
        write(src, metadata, hit, how, folder)
        if not first:
            first.append(time.perf_counter() - started)
        calls.append((src, dict(metadata), hit, how, folder))

    keyparts._write = keeping
    configs = build_module().configs_for("t3.6.0-gfx942")[: args.count]
    spec = work / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "backend": "hip",
                "target": "gfx942",
                "warp_size": 64,
                "configs": configs,
                "results": str(work / "r.jsonl"),
            }
        )
    )
    compile_main(str(spec))
    keyparts._write = write
    from kdb.capture.cache import current

    capture = current()
    assert capture is not None
    listener_s, triton_s = [], []
    for src, metadata, hit, how, folder in calls:
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            write(src, metadata, hit, how, folder)
            times.append(time.perf_counter() - started)
        listener_s.append(statistics.median(times))
        triton_s.append(_triton_put(capture.mine / folder, work, max(3, args.repeat // 10)))
    ratio = [a / b for a, b in zip(listener_s, triton_s, strict=True)]
    build_s, encode_s = [], []
    for src, metadata, hit, how, folder in calls:  # where the listener's time goes: the record, its JSON line
        started = time.perf_counter()
        for _ in range(args.repeat):
            record = keyparts.build_record(src, metadata, hit, how, folder)
        build_s.append((time.perf_counter() - started) / args.repeat)
        started = time.perf_counter()
        for _ in range(args.repeat):
            json.dumps(record, sort_keys=True, default=str)
        encode_s.append((time.perf_counter() - started) / args.repeat)
    result = {
        "compiles": len(calls),
        "listener_us_median": statistics.median(listener_s) * 1e6,
        "listener_us_max": max(listener_s) * 1e6,
        "build_record_us_median": statistics.median(build_s) * 1e6,
        "json_line_us_median": statistics.median(encode_s) * 1e6,
        "first_record_of_process_ms": first[0] * 1e3 if first else None,
        "triton_put_folder_ms_median": statistics.median(triton_s) * 1e3,
        "listener_over_triton_put_median": statistics.median(ratio),
        "listener_over_triton_put_max": max(ratio),
        "record_bytes_median": statistics.median(
            len(json.dumps(keyparts.build_record(s, m, h, w, f), sort_keys=True, default=str))
            for s, m, h, w, f in calls
        ),
        "count": args.count,
        "repeat": args.repeat,
    }
    print(json.dumps(result, indent=2))
    out = ROOT / "bench" / "results" / "why_cost.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _triton_put(folder: Path, work: Path, repeat: int) -> float:
    """Median seconds of Triton's FileCacheManager writing this folder as `compile` does, a fresh folder each time."""
    from triton.runtime.cache import FileCacheManager

    group_file = next(folder.glob("__grp__*.json"))
    names = list(json.loads(group_file.read_text())["child_paths"])
    files = {n: (folder / n).read_bytes() for n in names}
    times = []
    for i in range(repeat):
        os.environ["TRITON_CACHE_DIR"] = str(work / f"put-{i}")
        manager = FileCacheManager(folder.name)
        started = time.perf_counter()
        group = {}
        for name, data in files.items():
            binary = name.endswith((".hsaco", ".cubin"))
            group[name] = manager.put(data if binary else data.decode(), name, binary=binary)
        manager.put_group(group_file.name[len("__grp__") :], group)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
