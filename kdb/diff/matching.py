"""Pairing the kernels of two snapshots.

Kernels are grouped by `identity` (or `identity_any_target` with `across_targets`, see
kdb/triton/identity.py). Within a group, pairs are made by the options rule ("equal, or each at its own
release's default"): first pairs whose options are exactly equal and unique both ways, then pairs
that are compatible and unique both ways. A kernel left over is only in A, only in B, or ambiguous
(several candidates, or its counterpart was taken by another kernel); `reason` says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kdb.diff.model import Status
from kdb.diff.sides import Row, row_document
from kdb.triton.identity import _UNKNOWN, TUNING_OPTIONS, option_default, options_compatible


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


def _effective_options(k: dict[str, Any]) -> dict[str, Any]:
    opts = _options(k)
    version = opts.get("triton_version") or k.get("triton_version")
    return {"backend": opts.get("backend"), "triton_version": version, "values": opts.get("values") or {}}


def _exact(a: dict[str, Any], b: dict[str, Any]) -> bool:
    raw_a, raw_b = a.get("identity_options"), b.get("identity_options")
    if isinstance(raw_a, str) and raw_a == raw_b:
        return True  # the same options document (still undecoded): the same backend and values
    oa, ob = _effective_options(a), _effective_options(b)
    if oa["backend"] == ob["backend"] and oa["values"] == ob["values"]:
        return True  # every option equal: no need to look up release defaults
    keys = set(oa["values"]) | set(ob["values"])
    if oa["backend"] != ob["backend"]:
        keys &= set(TUNING_OPTIONS.get(oa["backend"] or "", ())) & set(TUNING_OPTIONS.get(ob["backend"] or "", ()))
    for key in keys:
        va = oa["values"].get(key, option_default(oa["backend"], key, oa["triton_version"]))
        vb = ob["values"].get(key, option_default(ob["backend"], key, ob["triton_version"]))
        if va is _UNKNOWN or vb is _UNKNOWN or va != vb:
            return False
    return True


def _compatible(a: dict[str, Any], b: dict[str, Any]) -> tuple[bool, list[str]]:
    return options_compatible(_options(a), _options(b), a.get("triton_version"), b.get("triton_version"))


def _pair_unique(cands: dict[int, set[int]]) -> list[tuple[int, int]]:
    """Pairs (i, j) where j is i's only candidate and i is j's only candidate."""
    reverse: dict[int, set[int]] = {}
    for i, js in cands.items():
        for j in js:
            reverse.setdefault(j, set()).add(i)
    return [(i, next(iter(js))) for i, js in cands.items() if len(js) == 1 and len(reverse[next(iter(js))]) == 1]


def match(a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]], key: str) -> list[Pairing]:
    """Pair the kernels of A and B; return one Pairing per pair or unpaired kernel (facts not yet compared)."""
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
        paired_a: dict[int, int] = {}
        for test in (_exact, lambda x, y: _compatible(x, y)[0]):
            free_a = [i for i in range(len(ga)) if i not in paired_a]
            free_b = [j for j in range(len(gb)) if j not in paired_a.values()]
            cands = {i: {j for j in free_b if test(ga[i], gb[j])} for i in free_a}
            for i, j in _pair_unique(cands):
                paired_a[i] = j
        taken_b = set(paired_a.values())
        for i, j in paired_a.items():
            out.append(Pairing(None, ga[i]["name"], a=ga[i], b=gb[j]))
        for i, k in enumerate(ga):
            if i in paired_a:
                continue
            compat = [j for j in range(len(gb)) if _compatible(k, gb[j])[0]]
            out.append(_unpaired("a", k, gb, compat, taken_b))
        for j, k in enumerate(gb):
            if j in taken_b:
                continue
            compat = [i for i in range(len(ga)) if _compatible(ga[i], k)[0]]
            out.append(_unpaired("b", k, ga, compat, set(paired_a)))
    return out


def _unpaired(
    side: str, k: dict[str, Any], others: list[dict[str, Any]], compat: list[int], taken: set[int]
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
            reason = f"{len(compat)} candidates in {other} with compatible options"
        return Pairing(Status.AMBIGUOUS, k["name"], a=row_a, b=row_b, reason=reason, candidates=tuple(keys))
    if others:
        diffs = sorted({d for o in others for d in (_compatible(k, o)[1] if side == "a" else _compatible(o, k)[1])})
        reason = f"same identity as {len(others)} kernel(s) in {other}, options differ: {', '.join(diffs)}"
    else:
        reason = f"no kernel with this identity in {other}"
    return Pairing(Status.ONLY_IN_A if side == "a" else Status.ONLY_IN_B, k["name"], a=row_a, b=row_b, reason=reason)
