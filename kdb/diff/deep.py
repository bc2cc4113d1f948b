"""The deep view of `kdb diff --kernel` and `kdb report`: for each chosen kernel, its facts, mix and loop mix A
vs B, the metadata changes (deepdiff) and the ISA and stage diffs. Returns the model; never prints."""

from __future__ import annotations

import difflib
import fnmatch
import json
from typing import Any

from kdb.diff.isa import diff_text
from kdb.diff.model import DiffOptions, DiffResult, KernelDeepView, KernelDiff
from kdb.diff.sides import Row, Side, row_document
from kdb.errors import UsageError


def select(result: DiffResult, pattern: str) -> list[KernelDiff]:
    """The kernels a --kernel pattern names: a name, a glob of names, or a prefix (4+ characters, any case) of
    either side's cache key or of its folder name (the last part of a nested key), as `kdb show --kernel`
    takes it: every key the reports print selects its kernel."""
    prefix = pattern.upper() if len(pattern) >= 4 else None
    out = []
    for kd in result.kernels:
        keys = [k.upper() for k in (kd.a_cache_key, kd.b_cache_key) if k]
        if (
            kd.name == pattern
            or fnmatch.fnmatchcase(kd.name, pattern)
            or (prefix and any(k.startswith(prefix) or k.rsplit("/", 1)[-1].startswith(prefix) for k in keys))
        ):
            out.append(kd)
    return out


# Metadata that differs between any two compilations and says nothing about the kernel: its cache hash,
# absolute paths (extern_libs, the cache directory), and the compiler's own version strings.
NOISE_KEYS = frozenset({"hash", "extern_libs", "cache_dir", "triton_version", "path", "file_path"})


def without_noise(doc: Any) -> Any:
    """`doc` without the NOISE_KEYS and without absolute paths (strings starting with `/`)."""
    if isinstance(doc, dict):
        return {
            k: without_noise(v)
            for k, v in doc.items()
            if k not in NOISE_KEYS and not (isinstance(v, str) and v.startswith("/"))
        }
    if isinstance(doc, list):
        return [without_noise(v) for v in doc if not (isinstance(v, str) and v.startswith("/"))]
    return doc


def _deepdiff(a: Any, b: Any) -> dict[str, Any]:
    a, b = without_noise(a), without_noise(b)
    if a == b:  # most pairs: deepdiff takes ~40 ms to say so
        return {}
    from deepdiff import DeepDiff

    return json.loads(DeepDiff(a, b, ignore_order=False, verbose_level=2).to_json())


def _loop_rows(
    a: list[tuple[int, str, str, int]], b: list[tuple[int, str, str, int]]
) -> tuple[list[dict[str, Any]], tuple[bool, bool]]:
    """Both sides' mix per loop depth, row by (depth, mnemonic, group), changed rows first, deepest first."""
    ca = {(d, m, g): n for d, m, g, n in a}
    cb = {(d, m, g): n for d, m, g, n in b}
    rows: list[dict[str, Any]] = []
    for d, m, g in set(ca) | set(cb):
        na, nb = ca.get((d, m, g), 0), cb.get((d, m, g), 0)
        rows.append({"loop_depth": d, "mnemonic": m, "grp": g, "a": na, "b": nb, "delta": nb - na})
    rows.sort(key=lambda r: (r["delta"] == 0, -r["loop_depth"], -abs(r["delta"]), r["grp"], r["mnemonic"]))
    return rows, (bool(a), bool(b))


def deep_views(
    result: DiffResult,
    kernel_rows: dict[int, tuple[Row | None, Row | None]],
    sides: tuple[Side, Side],
    options: DiffOptions,
) -> list[KernelDeepView]:
    pattern, limit = options.kernel or "", options.limit
    chosen = select(result, pattern)
    if not chosen:
        raise UsageError(f"no kernel named or matching {pattern!r} in either snapshot")
    return views_of(result, kernel_rows, *sides, chosen[:limit] if limit is not None else chosen, options.raw_isa)


def _deep_mix(side: Side, row: Row, mix_source: str | None) -> list[tuple[str, str, int]]:
    """A deep view's mix of one side: its own (instr_source) one, or the source both sides were compared by."""
    if mix_source is None:
        return side.mix_of(row["cache_key"])
    return side.source_mix_of(mix_source, row["cache_key"]) if mix_source else []


def views_of(
    result: DiffResult,
    kernel_rows: dict[int, tuple[Row | None, Row | None]],
    sa: Side,
    sb: Side,
    chosen: list[KernelDiff],
    raw_isa: bool = False,
) -> list[KernelDeepView]:
    views = []
    # documents and mixes of every chosen kernel in one query per side (a report asks for 50 of them)
    pairs = [kernel_rows[id(kd)] for kd in chosen]
    sa.load_documents([a for a, _ in pairs if a])
    sb.load_documents([b for _, b in pairs if b])
    sa.load_mix([a["cache_key"] for a, _ in pairs if a])
    sb.load_mix([b["cache_key"] for _, b in pairs if b])
    for kd in chosen:
        row_a, row_b = kernel_rows[id(kd)]
        a, b = row_a or {}, row_b or {}
        if a:
            sa.load_documents([a])
        if b:
            sb.load_documents([b])
        # Keyed by (mnemonic, group): one mnemonic can count in two groups of a kernel (a MUBUF load
        # from scratch and one from global memory), and each keeps its own row.
        mix_a = {(m, g): c for m, g, c in _deep_mix(sa, a, kd.mix_source)} if a else {}
        mix_b = {(m, g): c for m, g, c in _deep_mix(sb, b, kd.mix_source)} if b else {}
        rows: list[dict[str, Any]] = []
        for mn, grp in sorted(set(mix_a) | set(mix_b)):
            ca, cb = mix_a.get((mn, grp), 0), mix_b.get((mn, grp), 0)
            rows.append({"mnemonic": mn, "grp": grp, "a": ca, "b": cb, "delta": cb - ca})
        rows.sort(key=lambda r: (-abs(r["delta"]), r["grp"], r["mnemonic"]))
        loops = kd.mix_source is None  # sides of two mix sources: only one side's loop mix is kept
        loop_rows, loop_known = _loop_rows(
            sa.loop_mix_of(a["cache_key"]) if a and loops else [], sb.loop_mix_of(b["cache_key"]) if b and loops else []
        )
        ta, kind_a = sa.stage_text(a["cache_key"], "isa") if a else (None, None)
        tb, kind_b = sb.stage_text(b["cache_key"], "isa") if b else (None, None)
        if raw_isa:  # the files as the compiler wrote them
            ta = sa.raw_text(a["cache_key"], kind_a) if a and kind_a else None
            tb = sb.raw_text(b["cache_key"], kind_b) if b and kind_b else None
        else:
            ta = diff_text(ta, kind_a) if ta is not None else None
            tb = diff_text(tb, kind_b) if tb is not None else None
        isa = "".join(
            difflib.unified_diff(
                ((ta or "") + "\n").splitlines(keepends=True) if ta else [],
                ((tb or "") + "\n").splitlines(keepends=True) if tb else [],
                fromfile=f"{result.a_label}:{a.get('cache_key', '-')}/{kd.name}",
                tofile=f"{result.b_label}:{b.get('cache_key', '-')}/{kd.name}",
                n=3,
                lineterm="\n",
            )
        )
        if isa and not isa.endswith("\n"):
            isa += "\n"
        views.append(
            KernelDeepView(
                kernel=kd,
                triton_json_diff=_deepdiff(row_document(a, "triton_metadata"), row_document(b, "triton_metadata")),
                co_metadata_diff=_deepdiff(row_document(a, "co_metadata"), row_document(b, "co_metadata")),
                mix_rows=rows,
                isa_diff=isa,
                isa_kind=kind_a or kind_b,
                isa_raw=raw_isa,
                loop_rows=loop_rows,
                loop_known=loop_known,
            )
        )
    return views
