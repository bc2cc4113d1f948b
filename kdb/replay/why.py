"""`kdb diff A B --why`: which stage carries a changed kernel's change — the 2×2 stage swap, offline.

For each changed pair (a of A, b of B), A's stored LLIR is compiled by B's release's backend stages (AMD: LLIR →
AMDGCN → code object; NVIDIA: LLIR → PTX → cubin, and A's PTX → cubin with B's `ptxas` alone), in B's toolchain
(kdb/replay/in_toolchain.py, `stages` jobs), with B's kernel's options. The swap folders are ingested into a
temporary home and read like every snapshot, so their figures come from kdb's own analysis. Then:

* `triton`: B's backend on A's LLIR gives A's figures: Triton's lowering (TTIR → LLIR) changed them;
* `llvm`: it gives B's figures: the LLVM backend changed them (NVIDIA: and A's PTX through B's `ptxas` alone does
  not give B's);
* `ptxas` (NVIDIA): A's PTX through B's `ptxas` alone gives B's figures;
* `both`: neither A's nor B's figures;
* `unknown`: what kept the swap from being made (no toolchain for B's release, no LLIR stored, a stage that
  failed with its first error line, a figure kdb could not compute on the swap).

The figures that decide are the resources that changed from A to B (registers, spills, scratch/local, LDS/shared,
occupancy: COMPARED without code size and instruction count) that the verdict reads (the backend's roles), else
the other resources that changed, else code size and instruction count. Stage names and labels are made here: renderers print them as given.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdb.analysis.registry import roles_of
from kdb.diff.model import KernelDiff, KernelFacts, Why
from kdb.figures import BY_COLUMN, COMPARED
from kdb.replay import toolchains
from kdb.replay.plan import kernel_target
from kdb.replay.run import DEFAULT_TIMEOUT_S, Progress, ReplayRequest, _compile_all, _Job
from kdb.store.blobs import BlobStore

CODE_FIGURES: tuple[str, ...] = ("code_size", "instr_count")
RESOURCE_FIGURES: tuple[str, ...] = tuple(c for c in COMPARED if c not in CODE_FIGURES)
# Options of B's kernel JSON not passed to its backend: paths into the machine that compiled B.
_NOT_OPTIONS = ("extern_libs",)


@dataclass(frozen=True)
class SwapKind:
    key: str  # the JSON's figures key
    first: str  # the stored stage of A the swap starts from
    label: str  # how reports name the swap
    gives: str  # the stage named when it gives B's figures


# The swaps per backend (Triton's backend name), in the order they are judged.
SWAPS: dict[str, tuple[SwapKind, ...]] = {
    "hip": (SwapKind("swap_llvm", "llir", "B's LLVM on A's LLIR", "llvm"),),
    "cuda": (
        SwapKind("swap_llvm", "llir", "B's LLVM and ptxas on A's LLIR", "llvm"),
        SwapKind("swap_ptxas", "ptx", "B's ptxas on A's PTX", "ptxas"),
    ),
}
NOTHING_DECIDES = "no figure kdb compares differs between A and B (only the instruction mix or the code changed)"
ACROSS_REASON = "A and B are compiled for different targets ({a}, {b}): A's LLIR cannot be compiled for B's"


@dataclass(frozen=True)
class WhySource:
    """One side of the diff as a swap reads it: each kernel's replay_sources row (metadata, release, target, files)
    by cache key, and the blob store its files are in."""

    rows: Mapping[str, Mapping[str, Any]]
    store: BlobStore


@dataclass(frozen=True)
class WhyRequest:
    a: WhySource
    b: WhySource
    toolchains_root: Path  # the local home: its toolchains.json names the interpreter of each release
    work_root: Path  # a temporary folder is made (and removed) under it
    workers: int = 1
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass
class _Pair:
    kernel: KernelDiff
    backend: str | None = None
    release: str | None = None
    problem: str | None = None  # why no swap was made at all
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # swap key -> job
    failed: dict[str, str] = field(default_factory=dict)  # swap key -> why that swap has no figures
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)  # swap key -> the swap's figures


def explain(request: WhyRequest, kernels: Sequence[KernelDiff], progress: Progress | None = None) -> dict[int, Why]:
    """The Why of each changed pair among `kernels`, by its index there."""
    chains = toolchains.load(request.toolchains_root)
    request.work_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=request.work_root, prefix="why-"))
    try:
        pairs = {
            i: _plan(request, k, chains, work / "in" / str(i))
            for i, k in enumerate(kernels)
            if k.status.changed and k.a is not None and k.b is not None
        }
        _run(request, pairs, chains, progress)
        _analyse(request, pairs, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {i: judge(p) for i, p in pairs.items()}


def _stem(row: Mapping[str, Any]) -> str | None:
    """The name the kernel's files share (`NAME.json`, `NAME.llir`): its own name where a folder holds several."""
    names = [f["name"] for f in row["files"]]
    stems = [n[: -len(".json")] for n in names if n.endswith(".json") and not n.startswith("__grp__")]
    return row.get("name") if row.get("name") in stems else (stems[0] if stems else None)


def _meta(row: Mapping[str, Any]) -> dict[str, Any]:
    meta = row.get("metadata")
    return json.loads(meta) if isinstance(meta, str) else dict(meta or {})


def _plan(request: WhyRequest, k: KernelDiff, chains: Mapping[str, toolchains.Toolchain], folder: Path) -> _Pair:
    assert k.a is not None and k.b is not None
    pair = _Pair(k)
    row_a, row_b = request.a.rows.get(k.a.cache_key), request.b.rows.get(k.b.cache_key)
    if row_a is None or row_b is None:
        pair.problem = "the kernel's stored files were not found"
        return pair
    meta_a, meta_b = _meta(row_a), _meta(row_b)
    target_a, target_b = kernel_target(meta_a, row_a), kernel_target(meta_b, row_b)
    pair.backend = row_b.get("backend")
    pair.release, chain_problem = _toolchain_of(row_b.get("triton_version"), chains)
    stem = _stem(row_a)
    if target_b is None or not row_b.get("triton_version"):
        pair.problem = "B's kernel records no target or Triton release (its JSON has none)"
    elif _gpu(target_a) != _gpu(target_b):
        pair.problem = ACROSS_REASON.format(a=_target_text(target_a), b=_target_text(target_b))
    elif pair.backend not in SWAPS:
        pair.problem = f"no stage swap is known for kernels of backend {pair.backend!r}"
    elif chain_problem is not None:
        pair.problem = chain_problem
    elif stem is None:
        pair.problem = "A's kernel folder has no Triton JSON"
    if pair.problem is not None:
        return pair
    assert target_b is not None and stem is not None and pair.backend is not None
    files = {f["name"]: f for f in row_a["files"]}
    options = {key: value for key, value in meta_b.items() if key not in _NOT_OPTIONS}
    for swap in SWAPS[pair.backend]:
        stored = files.get(f"{stem}.{swap.first}")
        if stored is None:
            pair.failed[swap.key] = f"no {swap.first.upper()} stored for A's kernel (the cache kept no .{swap.first})"
            continue
        at = folder / swap.key
        at.mkdir(parents=True)
        path = at / f"kernel.{swap.first}"
        path.write_bytes(request.a.store.get(stored["hash"], stored["size"]))
        pair.jobs[swap.key] = {
            "kind": "stages",
            "first": swap.first,
            "input": str(path),
            "name": stem,
            "target": target_b.as_job(),
            "options": options,
            "metadata": meta_a,
            "cache_dir": str(at / "cache"),
            "log": str(at / "log"),
        }
    return pair


def _toolchain_of(release: str | None, chains: Mapping[str, toolchains.Toolchain]) -> tuple[str | None, str | None]:
    """The registered toolchain of B's release, or why there is none. Triton 3.0-3.2 write no version in their
    JSON: kdb records the release family their cache names (`3.0-3.1`, `3.2`), and the one registered toolchain of
    that family is taken; none, or several, is said."""
    if not release or release in chains:
        return release, None
    add = f"`kdb toolchain add {release}` (or `kdb toolchain add {release} --python PATH` for an interpreter with it)"
    bounds = [toolchains.release_key(v)[:2] for v in re.findall(r"\d+\.\d+", release)]
    if not bounds or "+" in release or re.fullmatch(r"\d+\.\d+\.\d+", release):
        return None, f"no toolchain for B's Triton {release} is registered: run {add}"
    low, high = bounds[0], bounds[-1]
    fits = sorted((v for v in chains if low <= toolchains.release_key(v)[:2] <= high), key=toolchains.release_key)
    if len(fits) == 1:
        return fits[0], None
    family = f"B's kernels record only the release family {release} (those releases write no version in their JSON)"
    if fits:
        return None, f"{family}, and toolchains {', '.join(fits)} fit it: kdb cannot tell which compiled B"
    return None, f"{family}, and no toolchain of it is registered: run `kdb toolchain add VERSION` for the one of B"


def _gpu(target: Any) -> tuple[str, str] | None:
    """A target's backend and GPU, however its release spelled the CUDA capability (2.x `sm90`, 3.x `90`)."""
    if target is None:
        return None
    arch = str(target.arch).lower()
    return target.backend, re.sub(r"^sm_?|[a-z]$", "", arch) if target.backend == "cuda" else arch


def _target_text(target: Any) -> str:
    return f"{target.backend}:{target.arch}" if target is not None else "unknown"


def _run(
    request: WhyRequest,
    pairs: Mapping[int, _Pair],
    chains: Mapping[str, toolchains.Toolchain],
    progress: Progress | None,
) -> None:
    """Each release's swap jobs in its toolchain; a failed job's first error line is its swap's reason."""
    by_release: dict[str, list[_Job]] = {}
    for i, pair in pairs.items():
        for key, job in pair.jobs.items():
            job["id"] = f"{i}:{key}"
            by_release.setdefault(str(pair.release), []).append(_Job(job["id"], pair.kernel.name, job))
    for release, jobs in sorted(by_release.items()):
        run = ReplayRequest("", release, "", workers=request.workers, timeout_s=request.timeout_s)
        results = _compile_all(chains[release], jobs, run, progress)
        for done in jobs:
            index, key = done.cache_key.split(":", 1)
            result = results.get(done.cache_key) or {"ok": False, "error": "the toolchain process ended first"}
            if not result.get("ok"):
                pairs[int(index)].failed[key] = f"failed: {result.get('error') or 'no error line'}"
                pairs[int(index)].jobs.pop(key)


def _analyse(request: WhyRequest, pairs: Mapping[int, _Pair], work: Path) -> None:
    """Ingest every swap folder into a temporary home and read its figures as a diff reads any snapshot's."""
    from kdb.diff.sides import load_side
    from kdb.ingest.snapshot import IngestRequest, ingest
    from kdb.store.catalog import Catalog
    from kdb.store.home import Home

    cache = work / "cache"
    cache.mkdir()
    folders: dict[str, tuple[int, str]] = {}
    for i, pair in pairs.items():
        for key, job in pair.jobs.items():
            name = f"{i}-{key}"
            shutil.move(str(Path(job["cache_dir"]) / "swap"), cache / name)
            folders[name] = (i, key)
    if not folders:
        return
    home = Home(work / "home")
    ingest(home, IngestRequest(cache, "why", workers=max(1, request.workers)))
    with Catalog.open(home.catalog, read_only=True) as catalog:
        side = load_side(catalog.diffs, home.store, "why", "why")
        facts = {row["cache_key"]: KernelFacts.from_row(row) for row in side.kernels}
    for name, (i, key) in folders.items():
        found = facts.get(name)
        if found is None:
            pairs[i].failed[key] = "kdb found no kernel in the swap's folder"
            continue
        pairs[i].figures[key] = {c: found.get(c) for c in COMPARED}
        missing = [c for c in _decided(pairs[i].kernel) if found.get(c) is None]
        if missing:
            label = BY_COLUMN[missing[0]].label
            pairs[i].failed[key] = f"kdb could not compute the swap's {label} ({found.why_unknown(missing[0])})"


def _decided(k: KernelDiff) -> tuple[str, ...]:
    """The figures whose change the stage is asked for: those the verdict reads (the backend's spills, resources
    and occupancy) that changed; else the other resources that changed; else code size and instruction count."""
    assert k.a is not None and k.b is not None
    roles = roles_of(k.a.backend)
    verdict = {*roles.verdict_spills, *roles.verdict_resources, *roles.occupancy_columns()}
    tiers = (tuple(c for c in RESOURCE_FIGURES if c in verdict), RESOURCE_FIGURES, CODE_FIGURES)
    for group in tiers:
        changed = tuple(c for c in group if k.a.get(c) is not None and k.a.get(c) != k.b.get(c))
        if changed:
            return changed
    return ()


def _same(figures: Mapping[str, Any], side: KernelFacts, columns: Sequence[str]) -> bool:
    return all(figures.get(c) == side.get(c) for c in columns)


def _values(figures: Mapping[str, Any], columns: Sequence[str]) -> str:
    return ", ".join(f"{BY_COLUMN[c].label} {figures.get(c)}{BY_COLUMN[c].unit}" for c in columns)


def judge(pair: _Pair) -> Why:
    """The stage of one pair from its swaps' figures (pure once the swaps are made)."""
    k = pair.kernel
    assert k.a is not None and k.b is not None
    sets: dict[str, Mapping[str, Any] | None] = {"a": {c: k.a.get(c) for c in COMPARED}}
    swaps = SWAPS.get(pair.backend or "", ())
    labels = {"a": "A", **{s.key: s.label for s in swaps}, "b": "B"}
    for s in swaps:
        sets[s.key] = pair.figures.get(s.key) if s.key not in pair.failed else None
    sets["b"] = {c: k.b.get(c) for c in COMPARED}
    decided = _decided(k)
    if pair.problem is not None:
        return Why("unknown", pair.problem, sets, labels, decided)
    if not decided:
        return Why("unknown", NOTHING_DECIDES, sets, labels, decided)
    stage, reason = _stage(pair, swaps, decided)
    return Why(stage, reason, sets, labels, decided)


def _stage(pair: _Pair, swaps: Sequence[SwapKind], decided: Sequence[str]) -> tuple[str, str]:
    k = pair.kernel
    assert k.a is not None and k.b is not None
    a_values, b_values = _values(k.a.values, decided), _values(k.b.values, decided)
    release = f"Triton {pair.release}"
    made = {s.key: pair.figures[s.key] for s in swaps if s.key not in pair.failed}
    # the narrowest swap that gives B's figures names the stage: B's ptxas alone before B's LLVM and ptxas
    for s in reversed(swaps):
        if s.key in made and _same(made[s.key], k.b, decided):
            narrower = [n for n in swaps[swaps.index(s) + 1 :] if n.key in pair.failed]
            if narrower:
                return "unknown", (
                    f"{s.label} ({release}) gives B's {b_values}; whether {narrower[0].label} alone does is unknown: "
                    f"{pair.failed[narrower[0].key]}"
                )
            return s.gives, f"{s.label} ({release}) gives B's {b_values}: {_STAGE_WORDS[s.gives]} changed them"
    first = swaps[0]
    if first.key not in made:
        return "unknown", f"{first.label} ({release}): {pair.failed[first.key]}"
    if _same(made[first.key], k.a, decided):
        other = [s for s in swaps[1:] if s.key in made and not _same(made[s.key], k.a, decided)]
        if not other:
            return "triton", f"{first.label} ({release}) gives A's {a_values}: {_STAGE_WORDS['triton']} changed them"
        return "both", (
            f"{first.label} ({release}) gives A's {a_values}, but {other[0].label} gives "
            f"{_values(made[other[0].key], decided)} (B: {b_values})"
        )
    return "both", (
        f"{first.label} ({release}) gives {_values(made[first.key], decided)}, neither A's ({a_values}) nor B's "
        f"({b_values}): Triton's lowering and the backend both changed them"
    )


_STAGE_WORDS = {
    "triton": "Triton's lowering to LLIR",
    "llvm": "the LLVM backend",
    "ptxas": "ptxas",
}
