"""Loops in AMD kernels (issue 28), checked on every AMD kernel of the corpus against LLVM itself.

Oracles, independent of kdb's loop finder (kdb/analysis/loops.py builds its own control-flow graph from the
branches and labels, and never reads comments):
- LLVM's asm printer annotates every machine block of the `.amdgcn` it wrote with the depth its LoopInfo
  gives it (`.LBB0_3: ; =>This Inner Loop Header: Depth=1`, `; %bb.12: ; in Loop: Header=BB0_11 Depth=1`, the
  comment sometimes on the next line). Parsed here by a reader of its own. Triton 3.0 and 3.1 write the asm
  without these comments: the oracle cannot speak for them (asserted, so that a change is noticed).
- `llvm-objdump -d` of the code object gives the instructions that really run; scratch accesses are read off
  its text (`scratch_*`, and MUBUF `buffer_load/store … off, s[…]` of a kernel with a private segment), and
  lined up one to one with the asm (alignment padding shows as extra `s_nop 0`) to place each at the depth
  LLVM annotated. kdb's loop finder on the same disassembly (its path for a folder without `.amdgcn`) must
  give every instruction that depth too.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_amd_analysis import (
    HIP_SNAPSHOTS,
    OBJDUMP,
    READELF,
    SYMBOL_RE,
    Kernel,
    _folder,
    _release,
    _run,
    sampled,
    snapshot_kernels,
)

from kdb.analysis.amd.amdgcn import parse_amdgcn
from kdb.analysis.amd.disasm import parse_disassembly
from kdb.analysis.folder import analyze_folder
from kdb.analysis.loops import LOOP_WEIGHT

__all__ = ["snapshot_kernels"]  # the fixture, used by name

per_snapshot = pytest.mark.parametrize("snapshot", HIP_SNAPSHOTS)

FUNCTION_RE = re.compile(r"^\.type\s+([^\s,]+)\s*,\s*@function")
LABEL_RE = re.compile(r"^([A-Za-z_.$][\w.$]*):")
BLOCK_RE = re.compile(r"^(\.LBB\w+:|; %bb\.\d+:)")
DEPTH_RE = re.compile(r"(?:Loop Header: Depth=|in Loop: Header=\S+ Depth=)(\d+)")
INSTRUCTION_RE = re.compile(r"^([a-z][a-z0-9_.]*)(?:\s|$)")
# "	scratch_store_dword off, v1, s33 offset:4                // 000000001720: DC700004 007D0121"
OBJDUMP_RE = re.compile(r"^\s+(?P<mnemonic>[.a-z_][a-z0-9_.]*)(?P<operands>.*)//\s*(?P<address>[0-9A-F]{8,}):")


def llvm_depths(text: str) -> dict[str, list[tuple[str, int]]]:
    """Each function's instructions, in order, as (mnemonic, the loop depth LLVM annotated on its block)."""
    functions: set[str] = set()
    out: dict[str, list[tuple[str, int]]] = {}
    current: list[tuple[str, int]] | None = None
    depth, block_open = 0, False
    for raw in text.splitlines():
        line = raw.strip()
        if match := FUNCTION_RE.match(line):
            functions.add(match.group(1))
            continue
        match = LABEL_RE.match(line)
        if match and match.group(1) in functions:
            current, depth, block_open = out.setdefault(match.group(1), []), 0, True
            continue
        if current is None:
            continue
        if line.startswith(".Lfunc_end"):
            current = None
        elif BLOCK_RE.match(line):  # a new machine block: its depth is on this line or the comment lines after
            found = DEPTH_RE.search(line)
            depth, block_open = (int(found.group(1)) if found else 0), True
        elif line.startswith(";"):
            if block_open and (found := DEPTH_RE.search(line)):
                depth = int(found.group(1))
        elif (match := INSTRUCTION_RE.match(line)) and not line.startswith("."):
            current.append((match.group(1), depth))
            block_open = False
    return out


def objdump_instructions(kernel: Kernel, arch: str) -> tuple[list[tuple[str, str]], str, int]:
    """(mnemonic, operands) of the kernel's function, in address order, as llvm-objdump decodes them; the whole
    output, and the function's size."""
    start = size = None
    for line in _run(READELF, "-s", "--wide", str(kernel.hsaco_path)).splitlines():
        if (match := SYMBOL_RE.match(line)) and match.group("name") == kernel.name:
            start, size = int(match.group("value"), 16), int(match.group("size"))
    assert start is not None and size is not None, kernel.folder.name
    out = []
    text = _run(OBJDUMP, "-d", f"--mcpu={arch}", str(kernel.hsaco_path))
    for line in text.splitlines():
        match = OBJDUMP_RE.match(line)
        if match and start <= int(match.group("address"), 16) < start + size:
            out.append((match.group("mnemonic"), match.group("operands").strip()))
    return out, text, size


def is_scratch(mnemonic: str, operands: str, private_segment: bool) -> bool:
    if mnemonic.startswith("scratch_"):
        return True
    # MUBUF through the scratch descriptor: no vaddr (`off`) and an SGPR quad resource; LDS-bound loads are DMA
    return (
        private_segment
        and mnemonic.startswith(("buffer_load", "buffer_store"))
        and re.match(r"^[^,]+,\s*off\s*,\s*s\[", operands) is not None
        and not re.search(r"\blds\b", operands)
        and "_lds" not in mnemonic
    )


def annotated(snapshot: str) -> bool:
    return _release(snapshot) >= (3, 2)


@per_snapshot
def test_loop_depth_of_every_instruction_equals_llvms_annotation(snapshot: str, snapshot_kernels) -> None:
    checked = instructions = in_loops = 0
    for kernel in sampled(snapshot, snapshot_kernels(snapshot)):
        text = kernel.text("amdgcn") or ""
        oracle = llvm_depths(text)[kernel.name]
        has_comments = "; -- End function" in text
        assert has_comments == annotated(snapshot), kernel.folder.name
        if not has_comments:
            continue  # no annotation to compare with (Triton 3.0/3.1)
        asm = next(k for k in parse_amdgcn(text).kernels if k.name == kernel.name)
        assert asm.loops.unresolved == 0 and asm.loops.irreducible == 0, kernel.folder.name
        assert list(asm.loops.depths) == [depth for _, depth in oracle], kernel.folder.name
        assert asm.loops.max_depth == max((d for _, d in oracle), default=0)
        checked += 1
        instructions += len(oracle)
        in_loops += sum(1 for _, d in oracle if d)
    if annotated(snapshot):
        assert checked > 0 and in_loops > 0, (checked, in_loops)  # the corpus has loops in every snapshot


@per_snapshot
def test_recorded_loop_columns_and_rows_agree_with_llvm(snapshot: str, snapshot_kernels) -> None:
    """The kernel_analysis columns and instr_mix_loop_counts rows an ingest records, from LLVM's annotation."""
    if not annotated(snapshot):
        pytest.skip("Triton 3.0/3.1 asm carries no loop annotation (asserted by the test above)")
    for kernel in sampled(snapshot, snapshot_kernels(snapshot)):
        json_file, files = _folder(kernel)
        out = analyze_folder("key", "digest", json_file, files)
        row = out.rows["kernel_analysis"][0]
        oracle = llvm_depths(kernel.text("amdgcn") or "")[kernel.name]
        mix = {(r["mnemonic"], r["grp"]): r["count"] for r in out.rows["instr_mix_counts"] if r["source"] == "amdgcn"}
        groups = {m: g for m, g in mix}
        loop_rows = out.rows.get("instr_mix_loop_counts", [])
        expected: dict[tuple[int, str], int] = {}
        for mnemonic, depth in oracle:
            if depth:
                expected[(depth, mnemonic)] = expected.get((depth, mnemonic), 0) + 1
        # buffer_* mnemonics may sit in two groups (scratch vs global): compare per mnemonic
        got: dict[tuple[int, str], int] = {}
        for r in loop_rows:
            assert r["source"] == "amdgcn" and r["loop_depth"] >= 1
            got[(r["loop_depth"], r["mnemonic"])] = got.get((r["loop_depth"], r["mnemonic"]), 0) + r["count"]
        assert got == expected, kernel.folder.name
        assert row["max_loop_depth"] == max((d for _, d in oracle), default=0)
        by_depth = json.loads(row["scratch_by_loop_depth"])
        assert sum(by_depth.values()) == row["scratch_instr_count"]
        assert row["scratch_instr_in_loops"] == sum(n for d, n in by_depth.items() if d != "0")
        assert row["loop_weighted_scratch"] == sum(n * LOOP_WEIGHT ** int(d) for d, n in by_depth.items())
        assert all(groups.get(r["mnemonic"]) is not None for r in loop_rows)


@pytest.mark.llvm
@per_snapshot
def test_scratch_counts_equal_objdump(snapshot: str, snapshot_kernels) -> None:
    """Scratch instructions per kernel, and those inside loops, counted on llvm-objdump's disassembly and placed
    at the depth LLVM annotated."""
    kernels = sampled(snapshot, snapshot_kernels(snapshot))

    def disassemble(kernel: Kernel) -> tuple[list[tuple[str, str]], str, int]:
        return objdump_instructions(kernel, kernel.meta["target"]["arch"])

    with ThreadPoolExecutor(max_workers=4) as pool:
        disassembled = list(pool.map(disassemble, kernels))
    checked = with_scratch = loop_checked = undecodable = 0
    for kernel, (dis, text, size) in zip(kernels, disassembled, strict=True):
        json_file, files = _folder(kernel)
        row = analyze_folder("key", "digest", json_file, files).rows["kernel_analysis"][0]
        if any(m.startswith(".") for m, _ in dis) or "<unknown>" in " ".join(o for _, o in dis):
            undecodable += 1  # Debian's LLVM 22 cannot decode some gfx12 true16 instructions (test_amd_analysis)
            continue
        private = (row["scratch_bytes"] or 0) > 0
        flags = [is_scratch(m, o, private) for m, o in dis]
        assert row["scratch_instr_count"] == sum(flags), kernel.folder.name
        checked += 1
        with_scratch += bool(sum(flags))
        if not annotated(snapshot):
            continue
        oracle = llvm_depths(kernel.text("amdgcn") or "")[kernel.name]
        depths = _line_up(oracle, [m for m, _ in dis])
        assert depths is not None, f"{kernel.folder.name}: disassembly and asm differ"
        assert row["scratch_instr_in_loops"] == sum(1 for f, d in zip(flags, depths, strict=True) if f and d)
        # kdb's own loop finder on the disassembly (the path of a kernel whose folder has no .amdgcn)
        decoded = parse_disassembly(text, kernel.name, size)
        assert decoded is not None
        nest = decoded.loops()
        assert nest is not None and list(nest.depths) == depths, kernel.folder.name
        loop_checked += 1
    assert checked > 0 and undecodable < len(kernels)
    if annotated(snapshot):
        assert loop_checked == checked > 0, (loop_checked, checked)


def _line_up(asm: list[tuple[str, int]], disassembled: list[str]) -> list[int] | None:
    """The annotated depth of each disassembled instruction: the same sequence as the asm but for alignment
    padding (`s_nop 0` the assembler inserts for `.p2align`), which takes the depth of what follows it."""
    out: list[int] = []
    i = 0
    for mnemonic in disassembled:
        if i < len(asm) and asm[i][0] == mnemonic:
            out.append(asm[i][1])
            i += 1
        elif mnemonic == "s_nop":
            out.append(asm[i][1] if i < len(asm) else 0)
        else:
            return None
    return out if i == len(asm) else None
