"""Link what a TorchInductor cache holds beside its Triton cache to the compiled kernel folders.

Computed once per ingest, from the stored bytes of the generated modules, `*.best_config`,
`*.kernel_perf` and `*.autotune.json` files, and from each kernel folder's facts (Triton JSON options,
the Python file in its TTIR locations, its TTIR tensor dimensions). A link is made only when exactly one
candidate fits; otherwise the row says `ambiguous` (with the candidates) or `missing` (with why).
"""

from __future__ import annotations

import json
import posixpath
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kdb.errors import ParseError
from kdb.triton.inductor import (
    InductorKernel,
    fits_shapes,
    parse_autotune_json,
    parse_best_config,
    parse_kernel_perf,
    parse_module,
    tile_of_blocks,
)

# the file kinds (kdb/ingest/walker.py) this module reads
INDUCTOR_KINDS = frozenset({"python", "best_config", "kernel_perf", "autotune"})
MAX_CANDIDATES_SHOWN = 4


@dataclass(frozen=True)
class FolderFacts:
    cache_key: str
    name: str
    num_warps: int | None
    num_stages: int | None
    num_ctas: int | None
    source_file: str | None
    tensor_shapes: tuple[tuple[int, ...], ...]


@dataclass
class InductorLinks:
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    found: dict[str, int] = field(default_factory=dict)  # what the ingest reports
    links: dict[str, Counter[str]] = field(default_factory=dict)  # link kind -> counts

    def add(self, table: str, **row: Any) -> None:
        self.rows.setdefault(table, []).append(row)


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _suffix_match(source_file: str, module_path: str) -> int:
    """How many trailing path components two paths share."""
    a, b = source_file.split("/")[::-1], module_path.split("/")[::-1]
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _shown(keys: list[str]) -> str:
    more = f" and {len(keys) - MAX_CANDIDATES_SHOWN} more" if len(keys) > MAX_CANDIDATES_SHOWN else ""
    return ", ".join(sorted(keys)[:MAX_CANDIDATES_SHOWN]) + more


def fits(folder: FolderFacts, config: dict[str, Any], *, squeezable: bool = False) -> bool:
    """The folder was compiled for this config: num_warps/num_stages/num_ctas equal where the config
    says, and its block sizes are the TTIR's tensor dimensions (kdb.triton.inductor.fits_shapes)."""
    for opt, have in (
        ("num_warps", folder.num_warps),
        ("num_stages", folder.num_stages),
        ("num_ctas", folder.num_ctas),
    ):
        want = config.get(opt)
        if want is not None and have is not None and want != have:
            return False
    return fits_shapes(config, list(folder.tensor_shapes), squeezable=squeezable)


def link_inductor(
    files: list[tuple[str, str, bytes]],  # (path relative to the ingested directory, kind, content)
    folders: list[FolderFacts],
) -> InductorLinks:
    out = InductorLinks()
    modules: dict[str, list[InductorKernel]] = {}
    perf: dict[str, float] = {}
    for path, kind, data in files:
        try:
            if kind == "python":
                kernels = parse_module(data)
                if kernels:
                    modules[path] = kernels
            elif kind == "kernel_perf":
                perf[path[: -len(".kernel_perf")] + ".py"] = parse_kernel_perf(data)
        except ParseError as exc:
            out.problems.append((path, str(exc)))
    for path, kernels in sorted(modules.items()):
        for k in kernels:
            out.add(
                "inductor_modules",
                path=path,
                kernel_name=k.name,
                heuristic=k.heuristic,
                def_line=k.line,
                size_hints=_dump(k.size_hints),
                triton_meta=_dump(k.triton_meta),
                inductor_meta=_dump(k.inductor_meta),
                configs=_dump(k.configs),
                kernel_perf_ms=perf.get(path),
            )
    folder_module = _link_folders(out, modules, folders) if modules else {}
    found = _Found(modules, perf, folders, folder_module, {f.cache_key: f for f in folders})
    best_configs = [(p, d) for p, k, d in files if k == "best_config"]
    autotune_files = [(p, d) for p, k, d in files if k == "autotune"]
    for path, data in sorted(best_configs):
        _link_best_config(out, path, data, found)
    for path, data in sorted(autotune_files):
        _link_autotune_json(out, path, data, folders)
    out.found = {
        "triton_caches": len({posixpath.dirname(f.cache_key) for f in folders}),
        "kernel_folders": len(folders),
        "generated_modules": len(modules),
        "best_configs": len(best_configs),
        "kernel_perf": len(perf),
        "autotune_files": len(autotune_files),
    }
    return out


def _link_folders(
    out: InductorLinks, modules: dict[str, list[InductorKernel]], folders: list[FolderFacts]
) -> dict[str, tuple[str, str]]:
    """Kernel folder -> (module path, kernel name): by the Python file its TTIR locations name (the
    module sharing the most trailing path components), else by a kernel name only one module defines."""
    by_base: dict[str, list[str]] = {}
    by_name: dict[str, list[str]] = {}
    for path, kernels in modules.items():
        by_base.setdefault(posixpath.basename(path), []).append(path)
        for k in kernels:
            by_name.setdefault(k.name, []).append(path)
    linked: dict[str, tuple[str, str]] = {}
    counts: Counter[str] = Counter()
    for f in folders:
        module: str | None = None
        detail: str | None = "no generated module defines this kernel"
        link = "missing"
        candidates: list[str] = []
        if f.source_file:
            scored = [
                (_suffix_match(f.source_file, p), p)
                for p in by_base.get(posixpath.basename(f.source_file), [])
                if any(k.name == f.name for k in modules[p])
            ]
            best = max((s for s, _ in scored), default=0)
            candidates = [p for s, p in scored if s == best and best > 0]
        if len(candidates) == 1:
            link, module, detail = "source_file", candidates[0], None
        elif len(candidates) > 1:
            link, detail = "ambiguous", f"{len(candidates)} modules match {f.source_file}: {_shown(candidates)}"
        elif len(by_name.get(f.name, [])) == 1:
            link, module, detail = "kernel_name", by_name[f.name][0], "the TTIR names no module of this snapshot"
        elif by_name.get(f.name):
            link, detail = "ambiguous", f"{len(by_name[f.name])} modules define {f.name}: {_shown(by_name[f.name])}"
        counts[link] += 1
        if module is not None:
            linked[f.cache_key] = (module, f.name)
        out.add(
            "kernel_modules",
            cache_key=f.cache_key,
            module_path=module,
            kernel_name=f.name if module is not None else None,
            link=link,
            detail=detail,
        )
    out.links["kernel_module"] = counts
    return linked


def _by_config(
    config: dict[str, Any], candidates: list[FolderFacts], what: str, squeezable: bool = False
) -> tuple[str | None, str, str | None]:
    """(cache_key, link, detail) for the one candidate folder the config fits. When several fit, the
    one whose largest tile is made of the config's block sizes alone (a matmul's BLOCK_M x BLOCK_N
    accumulator), if exactly one is."""
    fitting = [f for f in candidates if fits(f, config, squeezable=squeezable)]
    fit = [f.cache_key for f in fitting]
    if len(fit) == 1:
        return fit[0], "config", None
    exact = [f.cache_key for f in fitting if tile_of_blocks(config, list(f.tensor_shapes))]
    if len(exact) == 1:
        return exact[0], "config", f"{len(fit)} folders fit; only this one's largest tile is the block sizes"
    if fit:
        return None, "ambiguous", f"{len(fit)} folders of {what} fit this config: {_shown(fit)}"
    return None, "missing", f"none of the {len(candidates)} folders of {what} fits this config"


@dataclass(frozen=True)
class _Found:
    """What linking a best config looks up: the generated modules (path -> their kernels), their kernel_perf times
    (module path -> ms), the kernel folders (and by cache key), and the (module path, kernel name) each folder was
    linked to."""

    modules: dict[str, list[InductorKernel]]
    perf: dict[str, float]
    folders: list[FolderFacts]
    folder_module: dict[str, tuple[str, str]]
    by_cache_key: dict[str, FolderFacts]


def _link_best_config(out: InductorLinks, path: str, data: bytes, found: _Found) -> None:
    modules, folders, folder_module = found.modules, found.folders, found.folder_module
    try:
        best = parse_best_config(data)
    except ParseError as exc:
        out.problems.append((path, str(exc)))
        return
    # The winner's module sits in the same directory (torch names the file after a hash of the module's
    # own name and torch's version, which cannot be recomputed here); a template never has one, and the
    # config's block sizes are constexpr parameters of the kernel.
    directory = posixpath.dirname(path)
    here = [(p, k) for p, ks in modules.items() if posixpath.dirname(p) == directory for k in ks]
    tuned = [(p, k) for p, k in here if k.heuristic != "template" and _takes(k, best.config)]
    module, kernel = tuned[0] if len(tuned) == 1 else (None, None)
    row: dict[str, Any] = {
        "source": "best_config",
        "path": path,
        "entry": 0,
        "kernel_name": kernel.name if kernel else None,
        "module_path": module,
        "config": _dump(best.config),
        "time_ms": found.perf.get(module) if module else None,
        "tuning_ms": best.time_taken_ms,
        "is_best": True,
        "found_by_coordesc": best.found_by_coordesc,
        "triton_cache_hash": best.triton_cache_hash,
    }
    if best.triton_cache_hash:
        keys = [f.cache_key for f in folders if posixpath.basename(f.cache_key) == best.triton_cache_hash]
        if len(keys) == 1:
            row.update(cache_key=keys[0], link="hash")
            if kernel is None and keys[0] in folder_module:
                row.update(module_path=folder_module[keys[0]][0], kernel_name=folder_module[keys[0]][1])
        elif keys:
            row.update(link="ambiguous", link_detail=f"{len(keys)} Triton caches hold {best.triton_cache_hash}")
        else:
            row.update(link="missing", link_detail=f"triton_cache_hash {best.triton_cache_hash} is not in the snapshot")
    elif kernel is None:
        reason = (
            f"{len(tuned)} tuned kernels in {directory or '.'}" if tuned else f"no tuned kernel in {directory or '.'}"
        )
        row.update(link="ambiguous" if tuned else "missing", link_detail=f"no single generated module: {reason}")
    else:
        # Triton's cache key hashes the kernel's source, not its file: a folder compiled from an identical
        # kernel of another module (whose path its TTIR names) is this module's too.
        same = {(p, k.name) for p, ks in modules.items() for k in ks if k.source_digest == kernel.source_digest}
        candidates = [found.by_cache_key[key] for key, pk in folder_module.items() if pk in same]
        meta = kernel.inductor_meta if isinstance(kernel.inductor_meta, dict) else {}
        key, link, detail = _by_config(
            best.config, candidates, f"{kernel.name} ({module})", squeezable=meta.get("no_x_dim") is True
        )
        row.update(cache_key=key, link=link, link_detail=detail)
    out.links.setdefault("best_config", Counter())[row["link"]] += 1
    out.add("autotune_results", **row)


def _takes(kernel: InductorKernel, config: dict[str, Any]) -> bool:
    """The config's kwargs are constexpr parameters of the kernel (when its signature is known)."""
    meta = kernel.triton_meta if isinstance(kernel.triton_meta, dict) else {}
    signature = meta.get("signature")
    if not isinstance(signature, dict):
        return True
    return all(signature.get(k) == "constexpr" for k in config.get("kwargs") or {})


def _link_autotune_json(out: InductorLinks, path: str, data: bytes, folders: list[FolderFacts]) -> None:
    try:
        key, entries = parse_autotune_json(data)
    except ParseError as exc:
        out.problems.append((path, str(exc)))
        return
    name = posixpath.basename(path)[: -len(".autotune.json")]
    # the kernel's folders in the same Triton cache (the autotune file sits in a folder of that cache)
    cache_root = posixpath.dirname(posixpath.dirname(path))
    candidates = [f for f in folders if f.name == name and posixpath.dirname(f.cache_key) == cache_root]
    for i, e in enumerate(entries):
        cache_key, link, detail = _by_config(e.config, candidates, name)
        out.links.setdefault("autotune_json", Counter())[link] += 1
        out.add(
            "autotune_results",
            source="autotune_json",
            path=path,
            entry=i,
            kernel_name=name,
            key=_dump(key),
            config=_dump(e.config),
            time_ms=e.timings[0] if e.timings else None,
            timings=_dump(e.timings),
            is_best=e.is_best,
            cache_key=cache_key,
            link=link,
            link_detail=detail,
        )
