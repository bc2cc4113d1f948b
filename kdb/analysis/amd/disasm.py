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
import tempfile
from collections import Counter
from pathlib import Path

from kdb.analysis.amd.hsaco import parse_hsaco
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
    with tempfile.TemporaryDirectory(prefix="kdb-disasm-") as tmp:
        path = Path(tmp) / "kernel.hsaco"
        path.write_bytes(hsaco_bytes)
        try:
            proc = subprocess.run(
                [tool, "-d", f"--mcpu={arch.split(':', 1)[0]}", f"--disassemble-symbols={symbol}", str(path)],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
    if proc.returncode != 0:
        return None
    return count_mnemonics(proc.stdout, symbol, size)


def count_mnemonics(objdump_text: str, symbol: str, size: int) -> Counter[str] | None:
    """Count mnemonics printed under `<symbol>:` in llvm-objdump -d output, within `size` bytes of the
    symbol: objdump runs on to the next symbol, through the section's trailing padding. None if absent."""
    counts: Counter[str] = Counter()
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
        if match.group("address") is not None and int(match.group("address"), 16) >= start + size:
            inside = False
            continue
        mnemonic = match.group("mnemonic")
        # Undecodable words print as `.long 0x…` (or other data directives).
        counts[UNKNOWN if mnemonic.startswith(".") else mnemonic] += 1
    return counts if found else None
