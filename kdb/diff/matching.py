"""Pairing the kernels of two snapshots.

Kernels are grouped by `identity` (or `identity_any_target` with `across_targets`, see
kdb/triton/identity.py). Within a group, every pair must satisfy the options rule ("equal, or each at
its own release's default"); pairs are made in passes of decreasing evidence (`PASSES`), each pairing
the kernels that have exactly one candidate under it, both ways. A kernel left over is only in A, only
in B, or ambiguous (several candidates, or its counterpart was taken by another kernel); `reason` says
which, and for ties names what tells the candidates apart, if anything. Nothing is ever paired by luck.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kdb.diff.model import Status
from kdb.diff.sides import Row, row_document
from kdb.triton.defaults import OptionDefaults
from kdb.triton.identity import options_compatible

STAGES: tuple[str, ...] = ("ttir", "ttgir", "llir", "isa")


@dataclass
class Pairing:
    """A pair (status None: its facts are compared next) or an unpaired kernel (status says how)."""

    status: Status | None
    name: str
    a: Row | None = None
    b: Row | None = None
    reason: str | None = None
    candidates: tuple[str, ...] = ()


def _options(k: dict[str, Any]) -> dict[str, Any]:
    if k.get("identity_options") is not None:  # recorded at ingest: no need to decode identity_parts
        return row_document(k, "identity_options") or {}
    parts = row_document(k, "identity_parts") or {}
    return parts.get("options") or {}


def _exact(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Every compared option has the same value on both sides (no release default needed)."""
    raw_a, raw_b = a.get("identity_options"), b.get("identity_options")
    if isinstance(raw_a, str) and raw_a == raw_b:
        return True  # the same options document (still undecoded)
    oa, ob = _options(a), _options(b)
    return bool(oa.get("backend") == ob.get("backend") and (oa.get("values") or {}) == (ob.get("values") or {}))


def _content(k: dict[str, Any]) -> tuple[Any, ...] | None:
    """The normalised stage digests: equal tuples mean the same code at every stage."""
    digests = tuple(k.get(f"{stage}_digest") for stage in STAGES)
    return digests if any(d is not None for d in digests) else None


def _def_file(k: dict[str, Any]) -> Any:
    return _options(k).get("def_file")


def _same_content(a: dict[str, Any], b: dict[str, Any]) -> bool:
    content = _content(a)
    return content is not None and content == _content(b)


def _same_file(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return _def_file(a) is not None and _def_file(a) == _def_file(b)


def _compatible_options(a: dict[str, Any], b: dict[str, Any], ctx: OptionDefaults) -> bool:
    raw_a = a.get("identity_options")
    if isinstance(raw_a, str) and raw_a == b.get("identity_options"):
        return True  # the same options document, still undecoded: equal values, nothing to look up
    return _compatible(a, b, ctx)[0]


# Evidence for a pair, strongest first. Every pass implies `_compatible_options` (identity equal,
# options equal or at their releases' defaults), so no pass pairs kernels the identity keeps apart.
# Identical code and the source file only break ties between candidates the identity cannot tell
# apart: Inductor writes one kernel into several modules, and one cache can hold a kernel compiled by
# two toolchains (same TTIR, another PTX version).
PASSES: tuple[tuple[str, Callable[[dict[str, Any], dict[str, Any], OptionDefaults], bool]], ...] = (
    ("identical code", lambda x, y, c: _same_content(x, y) and _compatible_options(x, y, c)),
    ("same options and source file", lambda x, y, c: _exact(x, y) and _same_file(x, y)),
    ("same options", lambda x, y, c: _exact(x, y)),
    (
        "options at release defaults, same source file",
        lambda x, y, c: _same_file(x, y) and _compatible_options(x, y, c),
    ),
    ("options at release defaults", _compatible_options),
)


def _what_differs(candidates: list[dict[str, Any]]) -> str:
    """Name what tells tied candidates apart, when the identity cannot."""
    apart = []
    if len({_def_file(c) for c in candidates}) > 1:
        apart.append("source file")
    if len({_options(c).get("def_line") for c in candidates}) > 1:
        apart.append("def line")
    contents = [_content(c) or (None,) * len(STAGES) for c in candidates]
    stages = [stage for i, stage in enumerate(STAGES) if len({c[i] for c in contents}) > 1]
    if stages:
        apart.append("code at " + "/".join(stages))
    if not apart:
        return "identical in every recorded respect"
    return "they differ only in " + ", ".join(apart)


def _compatible(a: dict[str, Any], b: dict[str, Any], ctx: OptionDefaults) -> tuple[bool, list[str]]:
    return options_compatible(_options(a), _options(b), a.get("triton_version"), b.get("triton_version"), ctx)


def learn_defaults(
    a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]], key: str, a_label: str = "A", b_label: str = "B"
) -> OptionDefaults:
    """What each side's release applied to options nobody set, learned from both sides (kdb/triton/defaults.py)."""
    return OptionDefaults.learn(
        [(k.get(key), _options(k), k.get("triton_version")) for k in a_rows],
        [(k.get(key), _options(k), k.get("triton_version")) for k in b_rows],
        a_label,
        b_label,
    )


def _pair_unique(cands: dict[int, set[int]]) -> list[tuple[int, int]]:
    """Pairs (i, j) where j is i's only candidate and i is j's only candidate."""
    reverse: dict[int, set[int]] = {}
    for i, js in cands.items():
        for j in js:
            reverse.setdefault(j, set()).add(i)
    return [(i, next(iter(js))) for i, js in cands.items() if len(js) == 1 and len(reverse[next(iter(js))]) == 1]


def match(
    a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]], key: str, ctx: OptionDefaults | None = None
) -> list[Pairing]:
    """Pair the kernels of A and B; return one Pairing per pair or unpaired kernel (facts not yet compared).
    `ctx`: the defaults learned from both sides (`learn_defaults`), learned here when not given."""
    if ctx is None:
        ctx = learn_defaults(a_rows, b_rows, key)
    out: list[Pairing] = []
    groups: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for k in a_rows:
        if k.get(key) is None:
            out.append(Pairing(Status.ONLY_IN_A, k["name"], a=k, reason="no identity (no readable TTIR)"))
        else:
            groups.setdefault(k[key], ([], []))[0].append(k)
    for k in b_rows:
        if k.get(key) is None:
            out.append(Pairing(Status.ONLY_IN_B, k["name"], b=k, reason="no identity (no readable TTIR)"))
        else:
            groups.setdefault(k[key], ([], []))[1].append(k)
    for ga, gb in groups.values():
        if len(ga) == 1 and len(gb) == 1 and _compatible_options(ga[0], gb[0], ctx):
            # The common group: one kernel a side. Every pass implies the last one, so the passes pair
            # these two exactly when the last one holds; no need to run the other four.
            out.append(Pairing(None, ga[0]["name"], a=ga[0], b=gb[0]))
            continue
        paired_a: dict[int, int] = {}
        for _evidence, test in PASSES:
            free_a = [i for i in range(len(ga)) if i not in paired_a]
            free_b = [j for j in range(len(gb)) if j not in paired_a.values()]
            cands = {i: {j for j in free_b if test(ga[i], gb[j], ctx)} for i in free_a}
            for i, j in _pair_unique(cands):
                paired_a[i] = j
        taken_b = set(paired_a.values())
        for i, j in paired_a.items():
            out.append(Pairing(None, ga[i]["name"], a=ga[i], b=gb[j]))
        for i, k in enumerate(ga):
            if i in paired_a:
                continue
            compat = [j for j in range(len(gb)) if _compatible(k, gb[j], ctx)[0]]
            out.append(_unpaired("a", k, gb, compat, taken_b, ctx))
        for j, k in enumerate(gb):
            if j in taken_b:
                continue
            compat = [i for i in range(len(ga)) if _compatible(ga[i], k, ctx)[0]]
            out.append(_unpaired("b", k, ga, compat, set(paired_a), ctx))
    return out


def _unpaired(
    side: str, k: dict[str, Any], others: list[dict[str, Any]], compat: list[int], taken: set[int], ctx: OptionDefaults
) -> Pairing:
    other = "B" if side == "a" else "A"
    row_a, row_b = (k, None) if side == "a" else (None, k)
    if compat:
        keys = [others[j]["cache_key"] for j in compat]
        if all(j in taken for j in compat):
            reason = f"its counterpart in {other} ({', '.join(keys)}) is paired with another kernel (folder reused?)"
        elif len(compat) == 1:
            reason = f"its only candidate in {other} ({keys[0]}) is also a candidate of other kernels"
        else:
            reason = (
                f"{len(compat)} candidates in {other} with the same identity and compatible options "
                f"({_what_differs([others[j] for j in compat])})"
            )
        return Pairing(Status.AMBIGUOUS, k["name"], a=row_a, b=row_b, reason=reason, candidates=tuple(keys))
    if others:
        diffs = sorted(
            {d for o in others for d in (_compatible(k, o, ctx)[1] if side == "a" else _compatible(o, k, ctx)[1])}
        )
        reason = f"same identity as {len(others)} kernel(s) in {other}, options differ: {', '.join(diffs)}"
    else:
        reason = f"no kernel with this identity in {other}"
    return Pairing(Status.ONLY_IN_A if side == "a" else Status.ONLY_IN_B, k["name"], a=row_a, b=row_b, reason=reason)
