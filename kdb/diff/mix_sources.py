"""Like with like (issue 37): a paired kernel's instruction figures compared from one source both sides have.

A kernel's instruction count, mix and loop facts come from the source its analysis chose (`instr_source`): SASS or
PTX on NVIDIA (PTX where a snapshot was ingested --no-sass, or nvdisasm failed), the .amdgcn text or llvm-objdump's
disassembly on AMD. Two sources count different instructions, so a diff across them reports changes no compile
made (a `--no-sass` snapshot against a SASS one: every kernel `neutral`, `any-change` fired on identical folders).
Such a pair is compared through the source both sides keep (a SASS side keeps its PTX mix too), or its instruction
figures are not compared at all; the assumption lines say which, per target and pair of sources.
"""

from __future__ import annotations

import dataclasses

from kdb.diff.matching import Pairing
from kdb.diff.model import KernelDiff
from kdb.diff.sides import Row, Side

# The figures read from a kernel's instruction mix.
MIX_FACTS = ("instr_count", "instr_groups", "instr_mix_digest")
# Loop facts are recorded for the instr_source only (kdb/analysis/model.py): the other source's are not kept.
LOOP_MIX_FACTS = ("max_loop_depth", "scratch_instr_in_loops", "loop_weighted_scratch", "scratch_by_loop_depth")
SOURCE_NAMES = {"sass": "SASS", "ptx": "PTX", "amdgcn": "the .amdgcn asm", "llvm-objdump": "llvm-objdump's disassembly"}


@dataclasses.dataclass(frozen=True)
class CommonMix:
    """A paired kernel whose sides' mixes come from different sources, seen through one source both have."""

    source: str  # the source compared on both sides; "" when no source is common (no instruction figure compared)
    a: Row  # the side's row with the instruction figures of `source` (None without one) and no loop facts
    b: Row
    mnemonics_a: dict[str, int]
    mnemonics_b: dict[str, int]


def sources_differ(a: Row | None, b: Row | None) -> bool:
    return a is not None and b is not None and a.get("instr_source") != b.get("instr_source")


def like_with_like(pairs: list[Pairing], sa: Side, sb: Side) -> dict[int, CommonMix]:
    """For each pair (by id) whose sides' analyses chose different mix sources: its instruction figures from the
    source both sides have — A's source where B has it too, else B's (PTX, which a SASS side keeps as well) —, or
    none at all; loop facts from either source are left out (one side's are not kept)."""
    wanted: dict[str, tuple[list[str], list[str]]] = {}  # source -> (A's keys, B's keys) to fetch
    for p in pairs:
        assert p.a is not None and p.b is not None
        for source in (p.a.get("instr_source"), p.b.get("instr_source")):
            if source:
                keys_a, keys_b = wanted.setdefault(source, ([], []))
                keys_a.append(p.a["cache_key"])
                keys_b.append(p.b["cache_key"])
    for source, (keys_a, keys_b) in wanted.items():
        sa.load_source_mix(source, keys_a)
        sb.load_source_mix(source, keys_b)
    out = {}
    for p in pairs:
        a, b = p.a, p.b
        assert a is not None and b is not None
        source, rows_a, rows_b = "", [], []
        for candidate in (a.get("instr_source"), b.get("instr_source")):
            if candidate:
                ra, rb = sa.source_mix_of(candidate, a["cache_key"]), sb.source_mix_of(candidate, b["cache_key"])
                if ra and rb:
                    source, rows_a, rows_b = candidate, ra, rb
                    break
        out[id(p)] = CommonMix(
            source,
            _seen_as(a, source, rows_a),
            _seen_as(b, source, rows_b),
            _mnemonic_counts(rows_a),
            _mnemonic_counts(rows_b),
        )
    return out


def _seen_as(row: Row, source: str, mix: list[tuple[str, str, int]]) -> Row:
    """A kernel row whose instruction figures are those of `source`'s mix (none when source is "")."""
    groups: dict[str, int] = {}
    for _, group, count in mix:
        groups[group] = groups.get(group, 0) + count
    seen = {**row, **dict.fromkeys(MIX_FACTS + LOOP_MIX_FACTS)}
    seen["instr_source"] = source or None
    if source:
        seen["instr_count"] = sum(groups.values())
        seen["instr_groups"] = groups
    return seen


def _mnemonic_counts(mix: list[tuple[str, str, int]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for mnemonic, _, count in mix:  # a mnemonic in two groups (MUBUF scratch and global) counts once, summed
        counts[mnemonic] = counts.get(mnemonic, 0) + count
    return counts


def like_with_like_lines(
    sa: Side, sb: Side, kernels: list[KernelDiff], rows: dict[int, tuple[Row | None, Row | None]]
) -> tuple[str, ...]:
    """One line per target and pair of sources whose kernels were compared like with like: what was compared."""
    groups: dict[tuple[str, str, str, str], int] = {}  # (target, source, A's, B's) -> kernels
    for kd in kernels:
        if kd.mix_source is None:
            continue
        a, b = rows[id(kd)]
        assert a is not None and b is not None
        target = _target_text(a) if _target_text(a) == _target_text(b) else f"{_target_text(a)} → {_target_text(b)}"
        key = (target, kd.mix_source, _source_text(a), _source_text(b))
        groups[key] = groups.get(key, 0) + 1
    lines = []
    for (target, source, text_a, text_b), n in sorted(groups.items()):
        kernels_text = f"{n} kernel{'s' * (n != 1)}"
        sides = f"A ({sa.label}): {text_a}; B ({sb.label}): {text_b}"
        if source:
            lines.append(
                f"{target}: instruction counts and mix of {kernels_text} compared as {SOURCE_NAMES.get(source, source)} "
                f"on both sides, loop depths not compared ({sides})"
            )
        else:
            lines.append(f"{target}: instructions of {kernels_text} not compared: no source both sides have ({sides})")
    return tuple(lines)


def _target_text(row: Row) -> str:
    return f"{row.get('backend')} {row.get('arch') or 'unknown target'}"


def _source_text(row: Row) -> str:
    """`SASS`, `PTX (no SASS: skipped (--no-sass))`: the side's mix source and why it is not the best one."""
    source = row.get("instr_source")
    text = SOURCE_NAMES.get(source, str(source)) if source else "no instruction mix"
    note = row.get("instr_note")
    return f"{text} ({note})" if note else text
