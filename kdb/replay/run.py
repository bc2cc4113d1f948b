"""`kdb replay TAG --triton VERSION --tag NEW`: compile every kernel of a snapshot from its stored TTIR with another
Triton release, offline, and ingest what it wrote as a snapshot of its own.

Why the TTIR: it is the last stage every later release accepts (3.6.0's `.source` is refused by 3.8.0 for 23 of
28 kernels, its TTGIR by 3.7.1 for 80 of 80; its TTIR compiles under both and gives the real compile's figures:
shared/reference/replay-and-cache-keys.md). The new snapshot is a Triton cache like any other (the toolchain's
own folders), plus `kdb-replay.json` at its top: which kernel of TAG each folder was compiled from, with which
options, and what could not be replayed. A kernel that cannot be (no TTIR stored, the compiler refuses it, a crash,
a time-out) is a problem of the new snapshot with the compiler's first error line, never silently absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdb.errors import InputError, TagError, ToolchainError
from kdb.ingest.snapshot import IngestRequest, IngestSummary, ingest
from kdb.replay import toolchains
from kdb.replay.plan import (
    PointerPlan,
    Target,
    jit_marks_pointer_range,
    kernel_target,
    parse_target,
    plan_options,
    specialize_ttir,
)
from kdb.store.catalog import Catalog
from kdb.store.home import Home

WORKER = Path(__file__).with_name("in_toolchain.py")
PROVENANCE_NAME = "kdb-replay.json"
DEFAULT_TIMEOUT_S = 600.0
# (kernels done, kernels) as compiles finish
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ReplayRequest:
    source_tag: str
    version: str
    new_tag: str
    target: str | None = None
    workers: int = 1
    timeout_s: float = DEFAULT_TIMEOUT_S
    cache_keys: Sequence[str] | None = None  # only these kernels of the source (bisect); None: every one
    replace: bool = False


@dataclass(frozen=True)
class ReplayOutcome:
    tag: str
    source_tag: str
    triton: str
    kernels: int  # kernels of the source asked for
    replayed: int
    failed: list[dict[str, Any]]  # {cache_key, name, reason}
    dropped: dict[str, int]  # option the release lacks -> kernels
    defaulted: dict[str, int]  # option at its release's default (the replaying release's default applied) -> kernels
    assumed: dict[str, int]  # option whose default kdb does not know, kept -> kernels
    seconds: float
    compile_seconds: float
    ingest: IngestSummary | None = None
    mapping: dict[str, str] = field(default_factory=dict)  # source cache key -> replayed folder
    # kernels whose pointer arguments were marked `tt.pointer_range = 32` as the replaying release's JIT marks them
    # (each tensor assumed under 2 GB): kdb/replay/plan.py specialize_ttir
    pointer_range_marked: int = 0


@dataclass
class _Job:
    cache_key: str
    name: str
    job: dict[str, Any] | None  # None: nothing to compile (the reason says why)
    reason: str | None = None
    defaulted: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    pointer_range_marked: bool = False


@dataclass(frozen=True)
class _Spec:
    target: Target | None  # --target, else each kernel's own
    version: str  # the release replayed with


def replay(
    home: Home, local_root: Path, request: ReplayRequest, progress: Progress | None = None, into: Home | None = None
) -> ReplayOutcome:
    """Replay `request.source_tag` of `home` with the toolchain of `request.version` (registered in `local_root`);
    the result is ingested into `into` (bisect: a scratch home), else into `home`."""
    started = time.monotonic()
    chain = toolchains.get(local_root, request.version)
    target_home = into or home
    if not request.replace and target_home.has_catalog():
        with Catalog.open(target_home.catalog, read_only=True) as catalog:
            if catalog.snapshot_id(request.new_tag) is not None:
                raise TagError(f"tag {request.new_tag!r} exists already (use --replace to overwrite it)")
    with Catalog.open(home.catalog, read_only=True) as catalog:
        rows = catalog.queries.replay_sources(request.source_tag)
    if request.cache_keys is not None:
        wanted = set(request.cache_keys)
        rows = [r for r in rows if r["cache_key"] in wanted]
    target = parse_target(request.target) if request.target else None
    (home.root / "tmp").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=home.root / "tmp", prefix="replay-"))
    try:
        spec = _Spec(target, chain.version)
        jobs = [_job_of(home, row, spec, work / "in" / f"{i}") for i, row in enumerate(rows)]
        compile_started = time.monotonic()
        results = _compile_all(chain, [j for j in jobs if j.job is not None], request, progress)
        compile_seconds = time.monotonic() - compile_started
        out = work / "cache"
        out.mkdir()
        mapping, failed, dropped = _collect(jobs, results, out)
        provenance = _provenance(request, chain.version, jobs, mapping, failed)
        (out / PROVENANCE_NAME).write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n")
        summary = None
        if mapping:
            labels = {"replay_of": request.source_tag, "replay_triton": chain.version}
            if request.target:
                labels["replay_target"] = target.arch if target else request.target
            problems = [(f"{f['cache_key']}/{f['name']}", f["cache_key"], "replay", f["reason"]) for f in failed]
            summary = ingest(
                target_home,
                IngestRequest(
                    out,
                    request.new_tag,
                    labels=labels,
                    replace=request.replace,
                    workers=request.workers,
                    problems=problems,
                ),
            )
        elif rows:
            first = failed[0]["reason"] if failed else "nothing compiled"
            raise ToolchainError(
                f"no kernel of {request.source_tag} could be replayed with Triton {chain.version} "
                f"({len(failed)} failed; first: {first})"
            )
        else:
            raise InputError(f"{request.source_tag}: no kernel to replay")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ReplayOutcome(
        request.new_tag,
        request.source_tag,
        chain.version,
        len(rows),
        len(mapping),
        failed,
        dict(dropped),
        _count(j.defaulted for j in jobs),
        _count(j.assumed for j in jobs),
        time.monotonic() - started,
        compile_seconds,
        summary,
        mapping,
        sum(j.pointer_range_marked for j in jobs),
    )


def _count(lists: Any) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for names in lists:
        counts.update(names)
    return dict(sorted(counts.items()))


def _job_of(home: Home, row: dict[str, Any], spec: _Spec, folder: Path) -> _Job:
    meta = json.loads(row["metadata"]) if isinstance(row["metadata"], str) else dict(row["metadata"] or {})
    name = row["name"] or "?"
    files = {f["name"]: f for f in row["files"]}
    stems = [n[: -len(".json")] for n in files if n.endswith(".json") and not n.startswith("__grp__")]
    ttir = next((f"{s}.ttir" for s in stems if f"{s}.ttir" in files), None)
    ttir = ttir or next((n for n in files if n.endswith(".ttir")), None)
    source = kernel_target(meta, row)
    if ttir is None:
        return _Job(row["cache_key"], name, None, "no TTIR stored for this kernel (the cache kept no .ttir)")
    if source is None:
        return _Job(row["cache_key"], name, None, "the kernel's target is not recorded (no `target` in its JSON)")
    plan = plan_options(meta, source, row["triton_version"])
    target = spec.target or source
    folder.mkdir(parents=True)
    path = folder / "kernel.ttir"
    text = home.store.get(files[ttir]["hash"], files[ttir]["size"]).decode("utf-8", "replace")
    pointers = PointerPlan(jit_marks_pointer_range(target.backend, spec.version))
    text, marked = specialize_ttir(text, source, row["triton_version"], pointers)
    path.write_text(text)
    job = {
        "id": row["cache_key"],
        "kind": "compile",
        "ttir": str(path),
        "stored_as": f"{row['cache_key']}/{ttir}",
        "target": target.as_job(),
        "options": plan.options,
        # the dot precisions the kernel's release allowed: a dot at that release's unset default takes the replaying
        # release's (in_toolchain.py)
        "source_dot_precisions": meta.get("allowed_dot_input_precisions"),
        "cache_dir": str(folder / "cache"),
        "log": str(folder / "log"),
    }
    return _Job(row["cache_key"], name, job, None, plan.defaulted, plan.assumed, marked)


def _compile_all(
    chain: toolchains.Toolchain, jobs: list[_Job], request: ReplayRequest, progress: Progress | None
) -> dict[str, dict[str, Any]]:
    """Run the jobs in `request.workers` toolchain processes; each job's result line by its id."""
    results: dict[str, dict[str, Any]] = {}
    shares = _balanced(jobs, max(1, request.workers))
    lock = threading.Lock()

    def run_share(share: list[_Job]) -> None:
        payload = json.dumps({"jobs": [j.job for j in share], "timeout_s": request.timeout_s})
        # the toolchain's own complaints (an import that fails there) go to a file, read when it dies early
        with tempfile.TemporaryFile("w+") as errors:
            with subprocess.Popen(
                [chain.python, str(WORKER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
                env=toolchains.compile_env(),
            ) as proc:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(payload)
                proc.stdin.close()
                for line in proc.stdout:
                    _take(line, results, lock)
                    if progress:
                        progress(len(results), len(jobs))
            errors.seek(0)
            last = (errors.read().strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        for j in share:
            with lock:
                results.setdefault(j.cache_key, {"ok": False, "error": f"the toolchain process died: {last}"[:400]})

    threads = [threading.Thread(target=run_share, args=(share,)) for share in shares if share]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _balanced(jobs: list[_Job], workers: int) -> list[list[_Job]]:
    """The jobs dealt to `workers` toolchain processes, largest input first, each to the process with the fewest
    input bytes so far: a compile's time grows with its TTIR (correlation 0.58 over 40 Inductor kernels, 0.09 to
    1.7 s each), and a process dealt the big ones in turn leaves the other CPUs idle at the end (bench/replay_bench.py)."""
    sizes = {id(j): _input_bytes(j) for j in jobs}
    shares: list[list[_Job]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for j in sorted(jobs, key=lambda j: sizes[id(j)], reverse=True):
        least = loads.index(min(loads))
        shares[least].append(j)
        loads[least] += sizes[id(j)]
    return shares


def _input_bytes(job: _Job) -> int:
    path = (job.job or {}).get("ttir") or (job.job or {}).get("input")
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def _take(line: str, results: dict[str, dict[str, Any]], lock: threading.Lock) -> None:
    try:
        result = json.loads(line)
    except ValueError:
        return
    if isinstance(result, dict) and "id" in result:
        with lock:
            results[result["id"]] = result


def _collect(
    jobs: list[_Job], results: dict[str, dict[str, Any]], out: Path
) -> tuple[dict[str, str], list[dict[str, Any]], Counter[str]]:
    """Move each compiled folder into `out`; the failures with their reasons; options dropped."""
    mapping: dict[str, str] = {}
    failed: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    for j in jobs:
        if j.job is None:
            failed.append({"cache_key": j.cache_key, "name": j.name, "reason": j.reason})
            continue
        result = results.get(j.cache_key) or {"ok": False, "error": "the toolchain process ended before this kernel"}
        dropped.update(result.get("dropped") or [])
        folders = [p for p in Path(j.job["cache_dir"]).iterdir()] if Path(j.job["cache_dir"]).is_dir() else []
        if not result.get("ok") or len(folders) != 1:
            reason = result.get("error") or f"the compile left {len(folders)} cache folders, not one"
            reason = reason.replace(j.job["ttir"], j.job["stored_as"])  # the file as the snapshot names it
            failed.append({"cache_key": j.cache_key, "name": j.name, "reason": reason})
            continue
        folder = folders[0]
        if not (out / folder.name).exists():  # two kernels of the source may compile to one key
            _relocate_group_files(folder, out / folder.name)
            os.replace(folder, out / folder.name)
        mapping[j.cache_key] = folder.name
    return mapping, failed, dropped


def _relocate_group_files(folder: Path, final: Path) -> None:
    """Triton's group files name their children by absolute path: point them at the folder's final place."""
    for group in folder.glob("__grp__*.json"):
        doc = json.loads(group.read_text())
        if not isinstance(doc.get("child_paths"), dict):  # 2.x: a list of file names, nothing to point
            continue
        doc["child_paths"] = {k: str(final / Path(v).name) for k, v in doc.get("child_paths", {}).items()}
        group.write_text(json.dumps(doc))


def _provenance(
    request: ReplayRequest, version: str, jobs: list[_Job], mapping: dict[str, str], failed: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "replay_of": request.source_tag,
        "triton": version,
        "target": request.target,
        "python": sys.version.split()[0],
        "kernels": [
            {
                "from": j.cache_key,
                "name": j.name,
                "folder": mapping.get(j.cache_key),
                "options": (j.job or {}).get("options"),
                "defaulted": j.defaulted,
                "assumed": j.assumed,
                "pointer_range_marked": j.pointer_range_marked,
            }
            for j in jobs
        ],
        "failed": failed,
    }
