"""Normalised text of a compiler stage (TTIR, TTGIR, LLIR, AMDGPU asm, PTX), for deciding whether it changed.

Paths, `loc(...)` locations, debug info, SSA value names, labels and PTX register numbers are made
neutral: the same IR compiled on another machine, from another checkout, or renumbered by a pass
compares equal. Pure functions of text.
"""

from __future__ import annotations

import hashlib
import json
import re

from kdb.parsers.mlir_text import matching_paren

_QUOTED_PATH = re.compile(r'"(?:[^"\\\n]|\\.)*/(?:[^"\\\n]|\\.)*"')


def _strip_locs(line: str) -> str:
    """Remove every `loc(...)` (balanced) from an MLIR line."""
    out, i = [], 0
    while True:
        j = line.find("loc(", i)
        if j < 0 or (j > 0 and (line[j - 1].isalnum() or line[j - 1] in "_.")):
            if j < 0:
                out.append(line[i:])
                break
            out.append(line[i:j + 4])
            i = j + 4
            continue
        out.append(line[i:j])
        close = matching_paren(line, j + 3)
        i = (len(line) if close is None else close) + 1
    return re.sub(r"\s+(?=[,)]|$)", "", "".join(out))


class _Renamer:
    def __init__(self, pattern: str, prefix: str) -> None:
        self.re = re.compile(pattern)
        self.prefix = prefix
        self.names: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        def sub(m: re.Match[str]) -> str:
            name = m.group(0)
            if name not in self.names:
                self.names[name] = f"{self.prefix}{len(self.names)}"
            return self.names[name]

        return self.re.sub(sub, text)


def _normalise_mlir(text: str) -> str:
    ssa = _Renamer(r"%[\w$.-]+(?:#\d+)?", "%v")
    blocks = _Renamer(r"\^[\w$.-]+", "^bb")
    out = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("#loc", "//")):
            continue
        s = _strip_locs(s)
        s = _QUOTED_PATH.sub('"<path>"', s)
        out.append(blocks(ssa(s)))
    return "\n".join(out)


# `, !dbg !42` or ` !dbg !42` at the end of an LLVM IR instruction
_DBG_ATTACHMENT = re.compile(r",?\s*!dbg\s+!\d+")


def _normalise_llir(text: str) -> str:
    ssa = _Renamer(r"%[\w$.-]+", "%v")
    meta = _Renamer(r"![0-9]+\b", "!m")
    labels = _Renamer(r"^\d+(?=:)", "L")
    out = []
    for line in text.splitlines():
        s = line.split(";", 1)[0].rstrip() if not line.lstrip().startswith('"') else line.rstrip()
        st = s.strip()
        if not st or st.startswith(("!", "source_filename", "; ModuleID")):
            continue
        if "llvm.dbg." in st or st.startswith("#dbg_"):
            continue
        st = _DBG_ATTACHMENT.sub("", st)
        st = _QUOTED_PATH.sub('"<path>"', st)
        st = labels(st)
        out.append(meta(ssa(st)))
    return "\n".join(out)


def _normalise_asm(text: str, comment: str) -> str:
    labels = _Renamer(r"(?:\.L|\$L)[\w$.]+", ".L")
    regs = _Renamer(r"%(?:r|rd|f|fd|p|rs|h|hh|b)\d+\b", "%r") if comment == "//" else None
    out = []
    in_debug = False
    for line in text.splitlines():
        s = line.split(comment, 1)[0].strip()
        if not s:
            continue
        if s.startswith((".section", ".text", ".data")):
            in_debug = ".debug" in s
            if in_debug:
                continue
        if in_debug:
            if comment == "//" and s == "}":
                in_debug = False
            continue
        if s.startswith((".loc", ".file", ".cfi_", ".ident")) or s.startswith("$L__tmp") and s.endswith(":"):
            continue
        s = _QUOTED_PATH.sub('"<path>"', s)
        s = labels(s)
        if regs:
            s = regs(s)
        out.append(re.sub(r"\s+", " ", s))
    return "\n".join(out)


def normalise_stage(text: str, kind: str) -> str:
    """Text with paths, locations, debug info, SSA names, labels (and PTX register numbers) made neutral."""
    if kind in ("ttir", "ttgir", "source"):
        return _normalise_mlir(text)
    if kind == "llir":
        return _normalise_llir(text)
    if kind == "amdgcn":
        return _normalise_asm(text, ";")
    if kind == "ptx":
        return _normalise_asm(text, "//")
    return text


# Keys of Triton's JSON that change with every release or machine without the compilation changing.
VOLATILE_METADATA = frozenset({"hash", "triton_version", "extern_libs", "name"})


def metadata_view(doc: object) -> object:
    if not isinstance(doc, dict):
        return doc
    return {k: v for k, v in doc.items() if k not in VOLATILE_METADATA}


def metadata_digest(doc: object) -> str:
    """SHA-256 of Triton's JSON without its volatile keys: equal digests mean the options did not change."""
    return hashlib.sha256(json.dumps(metadata_view(doc), sort_keys=True, default=str).encode()).hexdigest()


STAGE_KINDS = {"ttir": ("ttir",), "ttgir": ("ttgir",), "llir": ("llir",), "isa": ("amdgcn", "ptx")}


def stage_digest(text: str, kind: str) -> str:
    """SHA-256 of the normalised text: equal digests mean the stage did not change."""
    return hashlib.sha256(normalise_stage(text, kind).encode()).hexdigest()
