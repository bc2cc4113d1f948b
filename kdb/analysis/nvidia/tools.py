"""NVIDIA binary tools (cuobjdump, nvdisasm): where to find them, and SASS opcode counts.

Triton wheels ship both tools under ``triton/backends/nvidia/bin/``, so a machine that compiled the
kernels usually has them even without a CUDA toolkit. Search order: ``$KDB_CUDA_BIN``, the active
interpreter's installed ``triton`` package (located without importing it, which would be slow and
would initialise its backends), then ``PATH``.

This module runs subprocesses; the parsers (``kdb.analysis.nvidia.cubin``, ``ptx``) never do.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

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


def find_tool(name: str) -> Path | None:
    """Path of an executable NVIDIA tool (``cuobjdump``, ``nvdisasm``), or None when none is found."""
    dirs: list[Path] = []
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append(Path(env))
    wheel = triton_bin_dir()
    if wheel is not None:
        dirs.append(wheel)
    for d in dirs:
        candidate = d / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    return Path(found) if found else None


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
    with tempfile.TemporaryDirectory(prefix="kdb-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            proc = subprocess.run(
                [str(tool), "-c", "-ndf", str(path)],
                capture_output=True,
                text=True,
                timeout=TOOL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ParseError(f"nvdisasm took longer than {TOOL_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        if "Cannot decode architecture" in proc.stderr:
            # An nvdisasm older than the cubin (CUDA 12.8 cannot read sm_103): no tool for this arch.
            return None
        reason = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[0]
        raise ParseError(f"nvdisasm could not read the cubin: {reason}")
    return parse_nvdisasm(proc.stdout)
