"""What SASS costs an ingest beyond nvdisasm's own time, on the real H100 caches of the corpus.

    python bench/sass_overhead.py [--repeat 3] [--caches gpt2]

For each cache, in this process and on one worker (`workers=1`: every nvdisasm runs in this process's
tree, one at a time), fastest of --repeat: a first ingest with SASS and one without (`--no-sass`), each
into a fresh home. The nvdisasm processes of the SASS ingest are timed where kdb starts them
(kdb.analysis.nvidia.tools calls `subprocess.run`): wall time of each call, summed. The issue's target:
(ingest with SASS - ingest without) <= 1.2 x nvdisasm's own time, i.e. kdb's handling of the SASS
(extracting each kernel's code, writing it, parsing the listing, loop nests, the rows) adds at most 20%.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from real_bench import real_caches, unpack  # noqa: E402

from kdb.analysis.model import AnalysisOptions  # noqa: E402
from kdb.analysis.nvidia import tools  # noqa: E402
from kdb.ingest.snapshot import IngestRequest, ingest  # noqa: E402
from kdb.store.home import Home  # noqa: E402

_RUN = subprocess.run  # the real one: tools.subprocess is this very module, patched below


class TimedRun:
    """subprocess.run as kdb's nvidia tools module sees it, timing every call."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return _RUN(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1


def one_ingest(cache: Path, sass: bool) -> tuple[float, float, int]:
    home_dir = Path(tempfile.mkdtemp(prefix="kdb-sass-bench-"))
    timer = TimedRun()
    tools.subprocess.run = timer  # type: ignore[attr-defined]
    try:
        started = time.perf_counter()
        ingest(Home(home_dir), IngestRequest(cache, "a", workers=1, options=AnalysisOptions(sass=sass)))
        return time.perf_counter() - started, timer.seconds, timer.calls
    finally:
        tools.subprocess.run = _RUN  # type: ignore[attr-defined]
        shutil.rmtree(home_dir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--caches", nargs="*", default=[])
    ap.add_argument("--work", type=Path, default=BENCH / ".data" / "sass")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if tools.find_tool("nvdisasm") is None:
        print("no nvdisasm found: pip install 'kdb[nvidia]'", file=sys.stderr)
        return 2
    rows = []
    for name, archive in real_caches().items():
        if not name.startswith("h100/") or (args.caches and not any(c in name for c in args.caches)):
            continue
        cache = unpack(archive, args.work / "caches" / name)
        with_sass = min((one_ingest(cache, True) for _ in range(args.repeat)), key=lambda r: r[0])
        without = min(one_ingest(cache, False)[0] for _ in range(args.repeat))
        added = with_sass[0] - without
        row = {
            "cache": name,
            "ingest_sass_s": round(with_sass[0], 3),
            "ingest_no_sass_s": round(without, 3),
            "sass_added_s": round(added, 3),
            "nvdisasm_s": round(with_sass[1], 3),
            "nvdisasm_calls": with_sass[2],
            "added_over_nvdisasm": round(added / with_sass[1], 3) if with_sass[1] else None,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(
        "\n| real cache | ingest with SASS | without | SASS adds | nvdisasm itself (calls) | adds / nvdisasm | target |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['cache']} | {r['ingest_sass_s']:.2f} s | {r['ingest_no_sass_s']:.2f} s | {r['sass_added_s']:.2f} s "
            f"| {r['nvdisasm_s']:.2f} s ({r['nvdisasm_calls']}) | {r['added_over_nvdisasm']:.2f}x | <= 1.2x |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
