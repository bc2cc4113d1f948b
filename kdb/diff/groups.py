"""Autotune groups: kernels that share their identity except the tuning parameters (issue 40).

A kernel's identity (kdb/triton/identity.py) hashes its name, its arguments (type, specialisation, the source
lines that use each), the tensor shapes and integer constants of its TTIR, num_warps and num_ctas, with the
target. Block sizes (constexprs such as BLOCK_M or XBLOCK) only reach the TTIR as tensor shapes and integer
constants, and num_warps/num_stages/waves_per_eu/... are options: the *group* identity keeps the name, the
arguments, num_ctas and the target, and leaves those out. Candidates of one autotuned op get one group.

Templates fold their problem sizes into the body (Inductor's `triton_mm`: one name and signature for every
M/N/K), so the kernels of one such identity are split further by the splat constants of their TTIR and the
axes they lie along (problem_constants). Known limit: two problems whose sizes and strides are the same values
on the same axes (a product and its transpose, M and N swapped) stay one group. Pure functions, no I/O.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdb.diff.model import DiffResult, KernelDiff, Status
from kdb.triton.identity import problem_constants as ttir_problem_constants

GROUP_ID_LENGTH = 12


def group_identity(row: Mapping[str, Any]) -> str | None:
    """The group identity of a kernel row (its `identity_args`, `identity_num_ctas`, name and target), or None
    where the catalog has no identity for it."""
    args = row.get("identity_args")
    if args is None:
        return None
    if isinstance(args, str):  # as the catalog gives it: the configs of one op share the text, hashed once
        return _group_identity(
            args,
            row.get("name"),
            row.get("identity_num_ctas"),
            row.get("backend"),
            row.get("arch"),
            row.get("warp_size"),
        )
    return _identity_of(args, row.get("name"), row.get("identity_num_ctas"), row)


@functools.lru_cache(maxsize=1 << 14)
def _group_identity(args: str, name: Any, num_ctas: Any, backend: Any, arch: Any, warp_size: Any) -> str:
    row = {"backend": backend, "arch": arch, "warp_size": warp_size}
    return _identity_of(json.loads(args), name, num_ctas, row)


def _identity_of(args: Any, name: Any, num_ctas: Any, row: Mapping[str, Any]) -> str:
    plain = [{k: v for k, v in a.items() if k != "hints"} for a in args if isinstance(a, dict)]
    doc = {
        "name": name,
        "args": plain,
        "num_ctas": num_ctas,
        "target": f"{row.get('backend')}:{row.get('arch')}:{row.get('warp_size')}",
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:GROUP_ID_LENGTH]


def problem_constants(ttir: str | None) -> frozenset[str] | None:
    """The integer splat constants of a TTIR with the axes they lie along (kdb/triton/identity.py, which records
    them at ingest in identity_parts), None without a TTIR."""
    return None if ttir is None else ttir_problem_constants(ttir)


def _components(sigs: list[frozenset[str] | None]) -> list[int]:
    """Each member's component: two members join where one's constants are a subset of the other's (unknown
    constants join every member). Members with equal constants always join: the pairs are tried between the
    distinct constant sets only (an op's configs mostly share theirs)."""
    distinct: dict[frozenset[str] | None, int] = {}
    index = [distinct.setdefault(s, len(distinct)) for s in sigs]
    if len(distinct) < len(sigs):
        part = _components(list(distinct))
        return [part[i] for i in index]
    parent = list(range(len(sigs)))

    def find(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i, si in enumerate(sigs):
        for j in range(i):
            sj = sigs[j]
            if si is None or sj is None or si <= sj or sj <= si:
                parent[find(i)] = find(j)
    return [find(i) for i in range(len(sigs))]


def group_map(
    rows: Iterable[Mapping[str, Any]], constants_of: Callable[[Mapping[str, Any]], frozenset[str] | None]
) -> dict[str, str]:
    """cache_key -> group identity of a side's kernel rows (those with an identity). Kernels of one identity
    less tuning are split further by their problem constants (`constants_of`: problem_constants of a kernel
    row's TTIR, asked only for identities that two or more kernels share), so that templates of one
    name and signature but different problem sizes are not one group. The id of such a part hashes the union
    of its members' constants, the same on both sides of a diff where the releases fold alike."""
    coarse: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        gid = group_identity(row)
        if gid is not None:
            coarse.setdefault(gid, []).append(row)
    out = {}
    for gid, members in coarse.items():
        if len(members) == 1:
            out[members[0]["cache_key"]] = gid
            continue
        sigs = [constants_of(row) for row in members]
        parts = _components(sigs)
        union: dict[int, set[str]] = {}
        for part, sig in zip(parts, sigs, strict=True):
            union.setdefault(part, set()).update(sig or ())
        ids = {
            part: hashlib.sha256(json.dumps([gid, sorted(consts)]).encode()).hexdigest()[:GROUP_ID_LENGTH]
            for part, consts in union.items()
        }
        for key, part in zip((row["cache_key"] for row in members), parts, strict=True):
            out[key] = ids[part]
    return out


def kernel_group(r: DiffResult, k: KernelDiff) -> str | None:
    """The group identity of a kernel of a diff: side A's, else side B's."""
    for key in (k.a_cache_key, k.b_cache_key):
        if key is not None and key in r.group_of:
            return r.group_of[key]
    return None


@dataclass(frozen=True)
class Group:
    """An autotune group of two or more kernels of a diff, its members in report order (worst first)."""

    id: str
    name: str
    members: tuple[KernelDiff, ...]

    @property
    def worst(self) -> KernelDiff:
        return self.members[0]

    @property
    def counts(self) -> dict[str, int]:
        """Members per status label (every label with at least one), and `worse` (regressed + mixed)."""
        counts: dict[str, int] = {}
        for k in self.members:
            counts[k.status.label] = counts.get(k.status.label, 0) + 1
        counts["worse"] = sum(1 for k in self.members if k.status.worse)
        return counts

    @property
    def caption(self) -> str:
        """`3 of 8 configs regressed` (regressed or mixed), else `8 configs`."""
        n, worse = len(self.members), self.counts["worse"]
        return f"{worse} of {n} configs regressed" if worse else f"{n} configs"


def groups(r: DiffResult) -> list[Group]:
    """The groups of two or more kernels, in the order of their worst (first listed) member."""
    members: dict[str, list[KernelDiff]] = {}
    for k in r.kernels:
        gid = kernel_group(r, k)
        if gid is not None:
            members.setdefault(gid, []).append(k)
    return [Group(gid, ks[0].name, tuple(ks)) for gid, ks in members.items() if len(ks) > 1]


def group_document(r: DiffResult, g: Group) -> dict[str, Any]:
    """A group in the JSON report: id, name, member keys, counts and the worst member's key."""
    return {
        "id": g.id,
        "name": g.name,
        "members": [r.key_of(k) for k in g.members],
        "counts": g.counts,
        "worst": r.key_of(g.worst),
        "winner": next((r.key_of(k) for k in g.members if is_winner(r, k)), None),
    }


def figure_range(members: Iterable[KernelDiff], column: str, side: str) -> str:
    """`64` or `64–128`: the range of one figure over a group's members on one side (empty when unknown)."""
    values = [
        v for k in members if (f := getattr(k, side)) is not None and isinstance(v := f.get(column), (int, float))
    ]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}–{hi}"


def range_cell(members: Iterable[KernelDiff], column: str) -> str:
    """A figure's range over a group's paired members: `a`, or `a→b` when the sides' ranges differ."""
    paired = [k for k in members if k.status.paired or k.status is Status.SAME]
    a, b = figure_range(paired, column, "a"), figure_range(paired, column, "b")
    return a if a == b else f"{a or '-'}→{b or '-'}"


def collapsed(r: DiffResult, shown: list[KernelDiff]) -> tuple[list[KernelDiff], dict[int, Group]]:
    """The table's kernels with each group's shown members replaced by one row: its autotune winner where kdb knows
    it (is_autotune_best), else its first (worst) one; and the group of each row that stands for one (by id() of
    the kernel). Kernels of no group are kept as they are."""
    by_gid = {g.id: g for g in groups(r)}
    # each group's row: its winner where kdb knows it (and it is shown), else its first shown member
    stands: dict[str, KernelDiff] = {}
    for k in shown:
        gid = kernel_group(r, k)
        if gid in by_gid and (gid not in stands or (is_winner(r, k) and not is_winner(r, stands[gid]))):
            stands[gid] = k
    out: list[KernelDiff] = []
    standing: dict[int, Group] = {}
    for k in shown:
        gid = kernel_group(r, k)
        if gid not in by_gid:
            out.append(k)
        elif stands[gid] is k:
            out.append(k)
            standing[id(k)] = by_gid[gid]
    return out, standing


def is_winner(r: DiffResult, k: KernelDiff) -> bool:
    """The kernel's folder (B's, else A's) was compiled for an autotune winner (is_autotune_best)."""
    key = k.b_cache_key or k.a_cache_key
    return key is not None and key in r.autotune_best


def expanded(r: DiffResult, shown: list[KernelDiff]) -> list[KernelDiff]:
    """The table's kernels with each group's shown members listed together, at the rank of its first one."""
    by_gid = {g.id: g for g in groups(r)}
    keep = {id(k) for k in shown}
    out: list[KernelDiff] = []
    seen: set[str] = set()
    for k in shown:
        gid = kernel_group(r, k)
        if gid is None or gid not in by_gid:
            out.append(k)
            continue
        if gid in seen:
            continue
        seen.add(gid)
        out += [m for m in by_gid[gid].members if id(m) in keep]
    return out


def groups_line(r: DiffResult) -> str | None:
    """`groups: 951 kernels in 120 rows: 40 autotune groups of 871 kernels, …` (None without a group)."""
    gs = groups(r)
    if not gs:
        return None
    grouped = sum(len(g.members) for g in gs)
    rows = len(r.kernels) - grouped + len(gs)
    return (
        f"groups: {len(r.kernels)} kernels = {len(gs)} autotune group{'s' * (len(gs) != 1)} of {grouped} kernels "
        f"(one row each; --expand lists their members) + {rows - len(gs)} single kernels"
    )
