"""NVIDIA binary tools (cuobjdump, nvdisasm): where to find them, and SASS opcode counts.

Search order (every one located without importing anything, which would be slow and, for triton,
would initialise its backends):

1. ``$KDB_CUDA_BIN``: the user's explicit choice; when set, the only place looked (an empty folder
   turns SASS off);
2. NVIDIA's tool wheels that ``pip install 'kdb[nvidia]'`` brings (``nvidia-cuda-nvdisasm``,
   ``nvidia-cuda-cuobjdump``; 13.x put the tools in ``nvidia/cu13/bin/``, 12.x in
   ``nvidia/cuda_nvdisasm/bin/`` and ``nvidia/cuda_cuobjdump/bin/``): installed for kdb on purpose,
   and the newest, so they decode the newest architectures;
3. the ``triton`` wheel's own copies (``triton/backends/nvidia/bin/``; Triton 3.6 ships CUDA 12.8's,
   which cannot decode sm_103): a machine that compiled the kernels has them without a toolkit;
4. ``PATH`` (a system CUDA toolkit, often older than either wheel).

When one nvdisasm cannot decode an architecture, the next one found is tried for it.

SASS is counted from each kernel's raw ``.text`` section: ``nvdisasm -b SMxy`` reads a raw
instruction stream, so the code of many kernels is concatenated and disassembled by one process
(nvdisasm takes one file per call, and its cost is its start-up, ~0.25 s, not the instructions;
``cuobjdump -sass`` on a fatbin of many cubins was measured at ~0.4 s per cubin, no better).
The same listing gives each kernel's loop nest (``sass_loops``): in raw mode a branch names the address
it goes to in the concatenated stream, which kdb places relative to the kernel's own start.

This module runs subprocesses; the parsers (``kdb.analysis.nvidia.cubin``, ``ptx``) never do.
"""

from __future__ import annotations

import bisect
import importlib.util
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kdb.analysis.external import run_on_bytes
from kdb.analysis.loops import NEXT, Flow, LoopNest, Step, loop_nest
from kdb.errors import ParseError

ENV_VAR = "KDB_CUDA_BIN"
TOOL_TIMEOUT_S = 120

# A section header line of `nvdisasm -c`: `.text.add_one:`
SASS_SECTION_RE = re.compile(r"^\.text\.([$\w.]+):\s*$")
# An instruction line of `nvdisasm -c`:
#   `        /*00d0*/              @!P6 LDG.E R5, desc[UR4][R2.64] ;`
#   `        /*0040*/                   HFMA2.MMA R5, -RZ, RZ, 0, 0 ;`
#   `        /*0a40*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], RZ, !UPT ;`  (lower-case x)
SASS_INSTR_RE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+\{?\s*(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def triton_bin_dir() -> Path | None:
    """``triton/backends/nvidia/bin`` of the triton package the current interpreter would import."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "backends" / "nvidia" / "bin"
        if candidate.is_dir():
            return candidate
    return None


# Where NVIDIA's tool wheels (kdb[nvidia]) put their binaries, under the `nvidia` namespace package.
NVIDIA_WHEEL_BIN_DIRS = ("cu13/bin", "cuda_nvdisasm/bin", "cuda_cuobjdump/bin", "cu12/bin")
INSTALL_HINT = "pip install 'kdb[nvidia]'"


def nvidia_wheel_bin_dirs() -> list[Path]:
    """Bin folders of NVIDIA's CUDA tool wheels installed for the current interpreter."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [
        Path(location) / sub
        for location in spec.submodule_search_locations
        for sub in NVIDIA_WHEEL_BIN_DIRS
        if (Path(location) / sub).is_dir()
    ]


def find_tools(name: str) -> list[Path]:
    """Every executable NVIDIA tool of this name (``cuobjdump``, ``nvdisasm``), in search order."""
    env = os.environ.get(ENV_VAR)
    if env:
        candidate = Path(env) / name
        return [candidate] if candidate.is_file() and os.access(candidate, os.X_OK) else []
    dirs = nvidia_wheel_bin_dirs()
    wheel = triton_bin_dir()
    if wheel is not None:
        dirs.append(wheel)
    found: list[Path] = []
    for d in dirs:
        candidate = d / name
        if candidate.is_file() and os.access(candidate, os.X_OK) and candidate not in found:
            found.append(candidate)
    on_path = shutil.which(name)
    if on_path and Path(on_path) not in found:
        found.append(Path(on_path))
    return found


def find_tool(name: str) -> Path | None:
    """Path of the first executable NVIDIA tool (``cuobjdump``, ``nvdisasm``), or None when none is found."""
    tools = find_tools(name)
    return tools[0] if tools else None


def base_opcode(opcode: str) -> str:
    """``LDG.E.128`` -> ``LDG``."""
    return opcode.split(".", 1)[0]


# SASS opcode families (base opcode, before the first dot) -> group; the rest is 'other'.
SASS_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("matrix", ("HMMA", "IMMA", "DMMA", "BMMA", "HGMMA", "IGMMA", "QGMMA", "BGMMA", "UTCHMMA", "UTCQMMA", "UTCIMMA")),
    ("local", ("LDL", "STL")),
    ("shared", ("LDS", "STS", "LDSM", "STSM", "LDGSTS", "ATOMS", "UBLKCP", "UTMALDG", "UTMASTG", "SYNCS")),
    ("global", ("LDG", "STG", "ATOMG", "ATOM", "RED", "LD", "ST")),
    ("barrier", ("BAR", "MEMBAR", "WARPSYNC", "DEPBAR", "ERRBAR")),
    ("branch", ("BRA", "BRX", "JMP", "JMX", "EXIT", "RET", "CALL", "BSSY", "BSYNC", "BREAK", "WARPGROUP")),
    ("conversion", ("F2F", "F2I", "I2F", "I2I", "F2FP", "I2FP")),
    ("transcendental", ("MUFU",)),
)


def sass_group(opcode: str) -> str:
    base = base_opcode(opcode)
    for group, bases in SASS_GROUPS:
        if base in bases:
            return group
    return "other"


def parse_nvdisasm(text: str) -> dict[str, Counter[str]]:
    """Full SASS opcodes per kernel from ``nvdisasm -c`` output (predicates dropped, modifiers kept)."""
    out: dict[str, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in text.splitlines():
        sec = SASS_SECTION_RE.match(line)
        if sec:
            current = out.setdefault(sec.group(1), Counter())
            continue
        if current is None:
            continue
        ins = SASS_INSTR_RE.match(line)
        if ins:
            current[ins.group(1)] += 1
    return out


def sass_by_kernel(cubin: bytes) -> dict[str, Counter[str]] | None:
    """SASS opcode counts per kernel via nvdisasm; None when no nvdisasm here can decode the arch.

    Raises ParseError when nvdisasm rejects the bytes.
    """
    tool = find_tool("nvdisasm")
    if tool is None:
        return None
    # -c: code sections only; -ndf: skip dataflow analysis (same listing, half the time).
    try:
        proc = run_on_bytes(cubin, "kernel.cubin", lambda path: [str(tool), "-c", "-ndf", path], TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ParseError(f"nvdisasm took longer than {TOOL_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        if "Cannot decode architecture" in proc.stderr:
            # An nvdisasm older than the cubin (CUDA 12.8 cannot read sm_103): no tool for this arch.
            return None
        reason = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[0]
        raise ParseError(f"nvdisasm could not read the cubin: {reason}")
    return parse_nvdisasm(proc.stdout)


@dataclass(frozen=True)
class SassResult:
    """One kernel's SASS opcode counts, or why there are none (``reason``; ``error`` when nvdisasm failed);
    with the counts, the loop nest of its control flow and the instructions inside loops."""

    counts: Counter[str] | None
    reason: str | None = None
    error: bool = False
    loops: LoopNest | None = None  # depths[i]: loop depth of the kernel's i-th instruction (in address order)
    loop_mix: dict[tuple[int, str, str], int] = field(default_factory=dict)  # (depth >= 1, opcode, group) -> count


# An instruction line of `nvdisasm -b SMxy` (raw mode): its byte offset, guard predicate, opcode and operands.
#   `        /*0060*/               @P1 BRA 0x200 ;`   (raw mode: a branch names the address it goes to)
#   `        /*0180*/                   BRA.U !UP0, 0x130 ;`
RAW_INSTR_RE = re.compile(
    r"^\s*/\*([0-9a-f]+)\*/\s+\{?\s*(@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)([^;\n]*)", re.MULTILINE
)
# A predicate operand (`BRA.U !UP0, 0x130`): the branch is taken where it holds.
PRED_OPERAND_RE = re.compile(r"^\s*(!?)U?P([T\d])\s*,")
# The last address of a branch's operands.
ADDRESS_RE = re.compile(r"0x([0-9a-f]+)\s*$")


def sass_step(guard: str | None, opcode: str, operands: str) -> tuple[Flow, int | None]:
    """What one SASS instruction of `nvdisasm -b` does to control flow, and the address a branch goes to.

    BRA goes to the address it names: conditionally under a guard (`@P1 BRA`) or a predicate operand
    (`BRA.U !UP0, 0x130`), unless that predicate is the constant true PT. BRX and JMX jump to a register's
    address, JMP to an absolute one (which raw code cannot place): indirect. EXIT, RET and KILL end the thread
    unless guarded (then they may fall through). CALL returns to the next instruction; BPT.TRAP is followed by
    the code nvdisasm's own control-flow graph continues with (`-bbcfg` keeps it in the trap's block), and
    the convergence barrier instructions (BSSY, BSYNC, BREAK, WARPSYNC) fall through.
    """
    if guard is not None:
        guard = guard.strip()
        if guard.endswith("PT"):
            if guard.startswith("@!"):
                return Flow.NEXT, None  # never executes
            guard = None
    base = opcode.split(".", 1)[0]
    if base == "BRA":
        conditional = guard is not None
        pred = PRED_OPERAND_RE.match(operands)
        if pred is not None:
            if pred.group(2) != "T":
                conditional = True
            elif pred.group(1):
                return Flow.NEXT, None  # !PT: never taken
        found = ADDRESS_RE.search(operands)
        flow = Flow.BRANCH if conditional else Flow.JUMP
        if found is None:
            return Flow.INDIRECT, None
        return flow, int(found.group(1), 16)
    if base in ("BRX", "JMX", "JMP"):
        return Flow.INDIRECT, None
    if base in ("EXIT", "RET", "KILL"):
        return (Flow.NEXT if guard is not None else Flow.EXIT), None
    return Flow.NEXT, None


# Opcodes that may change control flow (the rest fall through).
FLOW_OPCODES = ("BRA", "BRX", "JMX", "JMP", "EXIT", "RET", "KILL")


def sass_loops(instructions: list[tuple[int, str | None, str, str]], start: int, size: int) -> SassResult:
    """Counts, loop nest and loop mix of one kernel from its instructions, in address order: (address in the
    disassembled stream, guard, opcode, operands). Branch targets are addresses of that stream; the kernel
    occupies [start, start + size), and a branch out of it is one kdb cannot follow."""
    opcodes = [opcode for _, _, opcode, _ in instructions]
    addresses = [at for at, _, _, _ in instructions]
    steps = [NEXT] * len(instructions)
    labels: dict[str, int] = {}
    for i, opcode in enumerate(opcodes):
        if not opcode.startswith(FLOW_OPCODES):
            continue
        _, guard, _, operands = instructions[i]
        flow, target = sass_step(guard, opcode, operands)
        if flow is Flow.NEXT:
            continue
        if target is None:
            steps[i] = Step(flow)
        else:
            found = bisect.bisect_left(addresses, target)
            if 0 <= target - start < size and found < len(addresses) and addresses[found] == target:
                label = f"{target - start:x}"
                labels[label] = found
            else:
                label = f"outside {target:x}"  # no instruction of this kernel starts there: unresolved
            steps[i] = Step(flow, label)
        if i + 1 < len(steps):
            # A block ends after every branch, as in nvdisasm's own control-flow graph (-bbcfg): a loop's
            # closing `BRA.U !UP0` and the EXIT after it are two blocks, and so are `@P0 BRA` and a `BRA` after
            # it (SASS has no machine blocks with two terminators, as LLVM's `@%p bra; bra.uni` is in PTX).
            labels.setdefault(f"@{i + 1}", i + 1)
    nest = loop_nest(steps, labels)
    inside = Counter((depth, opcode) for depth, opcode in zip(nest.depths, opcodes, strict=True) if depth)
    mix = {(depth, opcode, sass_group(opcode)): n for (depth, opcode), n in inside.items()}
    return SassResult(Counter(opcodes), loops=nest, loop_mix=mix)


# nvdisasm's messages for an architecture it does not know (too old a tool for the cubin).
UNKNOWN_ARCH = ("Cannot decode architecture", "is not defined for option", "not a valid value", "Unsupported")


def sass_of_code(items: list[tuple[str, bytes]]) -> list[SassResult]:
    """SASS opcode counts of raw kernel code, ``(arch, .text bytes)`` each (arch as ``nvdisasm -b``
    spells it: ``SM90a``), with one nvdisasm process per architecture for the whole list."""
    results: list[SassResult] = [SassResult(None, f"no nvdisasm found ({INSTALL_HINT})")] * len(items)
    tools = find_tools("nvdisasm")
    if not tools:
        return results
    by_arch: dict[str, list[int]] = {}
    for i, (arch, _) in enumerate(items):
        by_arch.setdefault(arch, []).append(i)
    for arch, indices in by_arch.items():
        codes = [items[i][1] for i in indices]
        for i, result in zip(indices, _sass_arch(tools, arch, codes), strict=True):
            results[i] = result
    return results


# nvdisasm's memory grows with its input (measured: 54 MB for one kernel, 89 MB for 1 MB of code, 180 MB
# for 3.5 MB), so one process reads at most about this much code; a few more start-ups (~0.2 s each)
# against a bounded ingest memory.
SASS_CHUNK_BYTES = 512 * 1024


def _sass_arch(tools: list[Path], arch: str, codes: list[bytes]) -> list[SassResult]:
    results: list[SassResult] = []
    chunk: list[bytes] = []
    size = 0
    for code in codes:
        if chunk and size + len(code) > SASS_CHUNK_BYTES:
            results += _sass_chunk(tools, arch, chunk)
            chunk, size = [], 0
        chunk.append(code)
        size += len(code)
    return results + (_sass_chunk(tools, arch, chunk) if chunk else [])


def _sass_chunk(tools: list[Path], arch: str, codes: list[bytes]) -> list[SassResult]:
    reason = f"no nvdisasm here can decode {arch}"
    for tool in tools:
        out = _sass_raw(tool, arch, codes)
        if out is None:  # this nvdisasm does not know the architecture: try the next one
            continue
        if isinstance(out, list):
            return out
        if len(codes) == 1:
            return [SassResult(None, out, error=True)]
        # The batch failed: disassemble one by one, so that only the bad kernel goes without SASS.
        return [r for code in codes for r in _sass_chunk([tool], arch, [code])]
    return [SassResult(None, reason)] * len(codes)


def _sass_raw(tool: Path, arch: str, codes: list[bytes]) -> list[SassResult] | str | None:
    """Counts per code; a reason string when nvdisasm failed; None when it cannot decode ARCH."""
    starts: list[int] = []
    offset = 0
    for code in codes:
        starts.append(offset)
        offset += len(code)
    try:
        proc = run_on_bytes(
            b"".join(codes), "code.bin", lambda path: [str(tool), "-b", arch, path], TOOL_TIMEOUT_S + len(codes)
        )
    except subprocess.TimeoutExpired:
        return f"nvdisasm took longer than {TOOL_TIMEOUT_S + len(codes)} s"
    if proc.returncode != 0:
        if any(m in proc.stderr for m in UNKNOWN_ARCH):
            return None
        return (
            "nvdisasm could not read the code: "
            + (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[0]
        )
    listed: list[list[tuple[int, str | None, str, str]]] = [[] for _ in codes]
    for m in RAW_INSTR_RE.finditer(proc.stdout):
        at = int(m.group(1), 16)
        listed[bisect.bisect_right(starts, at) - 1].append((at, m.group(2), m.group(3), m.group(4)))
    return [
        sass_loops(found, start, len(code))
        if found
        else SassResult(None, "nvdisasm listed no instructions", error=True)
        for found, start, code in zip(listed, starts, codes, strict=True)
    ]
