"""Mnemonic counts from a code object through an external `llvm-objdump`, for kernels without `.amdgcn` text.

Not a parser: it runs a subprocess and uses a temporary file. Debian's default LLVM 14 objdump cannot
decode gfx94x, gfx950, gfx11 or gfx12, so only a recent one is accepted.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field

from kdb.analysis.amd.hsaco import parse_hsaco
from kdb.analysis.external import run_on_bytes
from kdb.analysis.loops import NEXT, Flow, LoopNest, Step, loop_nest
from kdb.errors import ParseError

# Preferred first; the bare name on PATH is Debian's default and too old unless it says otherwise.
OBJDUMP_CANDIDATES = ("/usr/lib/llvm-22/bin/llvm-objdump", "llvm-objdump-22", "llvm-objdump-19")
MIN_LLVM_MAJOR = 19
TIMEOUT_S = 120

# 0000000000001900 <mm_k>:
SYMBOL_HEADER_RE = re.compile(r"^(?P<address>[0-9a-fA-F]+) <(?P<name>[^>]+)>:\s*$")
# 	s_load_dwordx2 s[2:3], s[0:1], 0x0                         // 000000001900: C0060080 00000000
INSTRUCTION_LINE_RE = re.compile(
    r"^\s+(?P<mnemonic>[a-z_.][a-z0-9_.]*)\b(?P<rest>.*?)(?://\s*(?P<address>[0-9A-Fa-f]+):.*)?$"
)
# LLVM version 22.1.0
LLVM_VERSION_RE = re.compile(r"LLVM version (\d+)\.")

UNKNOWN = "unknown"
# `s_add_u32 s22, s22, 0x2ea68   // 000000005594: …`: a long branch's offset from the pc s_getpc_b64 read
LONG_OFFSET_RE = re.compile(r"^\s*s_add_u32\s+s\d+,\s*s\d+,\s*0x([0-9a-fA-F]{1,8})\b")
# `… // 00000000171C: BF820038 <matmul_kernel+0x100>`: a branch's target as objdump names it
TARGET_RE = re.compile(r"<(?P<symbol>[^>+]+)(?:\+0x(?P<offset>[0-9a-fA-F]+))?>\s*$")


@dataclass
class Disassembly:
    """One kernel's code as llvm-objdump decodes it."""

    counts: Counter[str] = field(default_factory=Counter)
    mnemonics: list[str] = field(default_factory=list)  # in address order
    steps: list[Step] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)  # branch target (byte offset) -> instruction index

    def loops(self) -> LoopNest | None:
        """The loop nest; None when a word could not be decoded (a branch may hide in it)."""
        if self.counts.get(UNKNOWN):
            return None
        return loop_nest(self.steps, self.labels)


@functools.cache
def find_objdump() -> str | None:
    """Path of an llvm-objdump able to decode every AMD target kdb knows (LLVM 19+), else None.
    KDB_LLVM_OBJDUMP, when set, is tried first."""
    override = os.environ.get("KDB_LLVM_OBJDUMP")
    for candidate in ((override,) if override else ()) + OBJDUMP_CANDIDATES + ("llvm-objdump",):
        path = candidate if os.path.isabs(candidate) and os.access(candidate, os.X_OK) else shutil.which(candidate)
        if path and _llvm_major(path) >= MIN_LLVM_MAJOR:
            return path
    return None


def _llvm_major(path: str) -> int:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    match = LLVM_VERSION_RE.search(out)
    return int(match.group(1)) if match else 0


def disassemble_mnemonics(
    hsaco_bytes: bytes, arch: str, symbol: str, objdump: str | None = None
) -> Counter[str] | None:
    """Mnemonic counts within `symbol`'s code; words the disassembler cannot decode count as 'unknown'.
    None when no capable llvm-objdump exists, the object has no such kernel, or objdump fails on it."""
    found = disassemble(hsaco_bytes, arch, symbol, objdump)
    return None if found is None else found.counts


def disassemble(hsaco_bytes: bytes, arch: str, symbol: str, objdump: str | None = None) -> Disassembly | None:
    """`symbol`'s code as llvm-objdump decodes it (disassemble_mnemonics says when it is None)."""
    tool = objdump or find_objdump()
    if tool is None:
        return None
    try:
        kernels = parse_hsaco(hsaco_bytes).kernels
    except ParseError:
        return None
    size = next((k.code_size for k in kernels if k.name == symbol), None)
    if size is None:
        return None
    mcpu = arch.split(":", 1)[0]
    try:
        proc = run_on_bytes(
            hsaco_bytes,
            "kernel.hsaco",
            lambda path: [tool, "-d", f"--mcpu={mcpu}", f"--disassemble-symbols={symbol}", path],
            TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return parse_disassembly(proc.stdout, symbol, size)


def count_mnemonics(objdump_text: str, symbol: str, size: int) -> Counter[str] | None:
    """Count mnemonics printed under `<symbol>:` in llvm-objdump -d output (parse_disassembly)."""
    found = parse_disassembly(objdump_text, symbol, size)
    return None if found is None else found.counts


def parse_disassembly(objdump_text: str, symbol: str, size: int) -> Disassembly | None:
    """The instructions printed under `<symbol>:` in llvm-objdump -d output, within `size` bytes of the
    symbol: objdump runs on to the next symbol, through the section's trailing padding. None if absent."""
    out = Disassembly()
    at: dict[str, int] = {}  # byte offset in the kernel -> instruction index
    pc: int | None = None  # a long branch (s_getpc_b64 / s_add_u32 literal / s_setpc_b64): the pc it reads
    far: int | None = None  # and the target it computes
    inside = found = False
    start = 0
    for line in objdump_text.splitlines():
        header = SYMBOL_HEADER_RE.match(line)
        if header:
            inside = header.group("name") == symbol
            if inside:
                found, start = True, int(header.group("address"), 16)
            continue
        if not inside or not line.strip() or line.lstrip().startswith(";"):
            continue
        match = INSTRUCTION_LINE_RE.match(line)
        if match is None:
            continue
        address = match.group("address")
        if address is not None and int(address, 16) >= start + size:
            inside = False
            continue
        mnemonic = match.group("mnemonic")
        # Undecodable words print as `.long 0x…` (or other data directives).
        mnemonic = UNKNOWN if mnemonic.startswith(".") else mnemonic
        out.counts[mnemonic] += 1
        if address is not None:
            at[str(int(address, 16) - start)] = len(out.steps)
        out.mnemonics.append(mnemonic)
        step = _step(mnemonic, line, symbol)
        if mnemonic.startswith("s_getpc"):  # the address after it is what the long branch adds its offset to
            pc = None if address is None else int(address, 16) + 4 - start
        elif mnemonic.startswith("s_add_u32") and pc is not None and (offset := LONG_OFFSET_RE.search(line)):
            far = pc + _signed32(int(offset.group(1), 16))
        elif mnemonic.startswith("s_setpc") and far is not None:
            step = Step(Flow.JUMP, str(far))
        if not mnemonic.startswith(("s_getpc", "s_add_u32", "s_addc_u32")):
            pc = far = None  # the three instructions of a long branch come together, or not at all
        out.steps.append(step)
    # only branch targets start blocks, as labels do in the asm (an address on every instruction would split
    # a block's terminators apart)
    out.labels = {s.target: at[s.target] for s in out.steps if s.target is not None and s.target in at}
    return out if found else None


def _signed32(value: int) -> int:
    return value - (1 << 32) if value & (1 << 31) else value


def _step(mnemonic: str, line: str, symbol: str) -> Step:
    """What one decoded instruction does to control flow; a branch's target is the `<symbol+0xOFF>` objdump
    prints, as the byte offset in the kernel (the labels of parse_disassembly)."""
    if not mnemonic.startswith("s_"):
        return NEXT
    if mnemonic == "s_branch" or mnemonic.startswith("s_cbranch_"):
        if mnemonic.startswith(("s_cbranch_join", "s_cbranch_g_fork", "s_cbranch_i_fork")):
            return Step(Flow.INDIRECT)
        target = TARGET_RE.search(line)
        where = None
        if target is not None and target.group("symbol") == symbol:
            where = str(int(target.group("offset") or "0", 16))
        return Step(Flow.JUMP if mnemonic == "s_branch" else Flow.BRANCH, where)
    if mnemonic.startswith("s_endpgm"):
        return Step(Flow.EXIT)
    if mnemonic.startswith("s_setpc"):
        return Step(Flow.INDIRECT)  # unless parse_disassembly reads it as a long branch (s_getpc / s_add_u32)
    return NEXT
