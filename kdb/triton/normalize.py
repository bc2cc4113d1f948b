"""Normalised text of a compiler stage (TTIR, TTGIR, LLIR, AMDGPU asm, PTX), for deciding whether it changed.

Paths, `loc(...)` locations, debug info, SSA value names, labels and PTX register numbers are made
neutral: the same IR compiled on another machine, from another checkout, or renumbered by a pass
compares equal. Pure functions of text.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable

from kdb.triton.mlir_text import matching_paren

_QUOTED_PATH = re.compile(r'"(?:[^"\\\n]|\\.)*/(?:[^"\\\n]|\\.)*"')


# `loc(#loc12)`: nearly every location Triton prints; anything else goes through the balanced scanner.
_SIMPLE_LOC = re.compile(r"(?<![\w.])loc\(#[\w.$-]*\)")
# whitespace left before `,` `)` or the end of a line once a location is gone
_LOC_GAP = re.compile(r"[^\S\n]+(?=[,)]|$)", re.MULTILINE)
# runs of blanks other than one plain space (those need no change: most of them, in assembly)
_BLANKS = re.compile(r"[^\S\n]{2,}|[^\S \n]")


def _strip_locs(text: str) -> str:
    """Remove every `loc(...)` (balanced) from MLIR text."""
    text = _SIMPLE_LOC.sub("", text)
    if "loc(" in text:
        text = "\n".join(_strip_complex_locs(line) if "loc(" in line else line for line in text.split("\n"))
    return _LOC_GAP.sub("", text)


def _strip_complex_locs(line: str) -> str:
    out, i = [], 0
    while True:
        j = line.find("loc(", i)
        if j < 0 or (j > 0 and (line[j - 1].isalnum() or line[j - 1] in "_.")):
            if j < 0:
                out.append(line[i:])
                break
            out.append(line[i : j + 4])
            i = j + 4
            continue
        out.append(line[i:j])
        close = matching_paren(line, j + 3)
        i = (len(line) if close is None else close) + 1
    return "".join(out)


def _renamer(pattern: str, prefix: str, flags: int = 0):
    """Rename every match to prefix + its order of first appearance (the same name keeps its new name).

    Works on the whole text with one split, so the per-name work runs in C, not in a callback.
    """
    regex = re.compile(f"({pattern})", flags)

    def rename(text: str) -> str:
        parts = regex.split(text)
        names = parts[1::2]
        if not names:
            return text
        table = {name: f"{prefix}{i}" for i, name in enumerate(dict.fromkeys(names))}
        parts[1::2] = map(table.__getitem__, names)
        return "".join(parts)

    return rename


_MLIR_SSA = _renamer(r"%[\w$.-]+(?:#\d+)?", "%v")
_MLIR_BLOCKS = _renamer(r"\^[\w$.-]+", "^bb")
_LLIR_SSA = _renamer(r"%[\w$.-]+", "%v")
_LLIR_META = _renamer(r"![0-9]+\b", "!m")
_LLIR_LABEL = re.compile(r"\d+(?=:)")
_ASM_LABELS = _renamer(r"(?:\.L|\$L)[\w$.]+", ".L")
_PTX_REGS = _renamer(r"%(?:r|rd|f|fd|p|rs|h|hh|b)\d+\b", "%r")


def _normalise_mlir(text: str) -> str:
    kept = [s for s in (line.strip() for line in text.splitlines()) if s and not s.startswith(("#loc", "//"))]
    body = _QUOTED_PATH.sub('"<path>"', _strip_locs("\n".join(kept)))
    return _MLIR_BLOCKS(_MLIR_SSA(body))


# `, !dbg !42` or ` !dbg !42` at the end of an LLVM IR instruction. The literal form LLVM prints is
# removed first: a pattern that starts with a literal is searched for in C, the general one is slow.
_DBG_ATTACHMENT = re.compile(r",?\s*!dbg\s+!\d+")
_DBG_PRINTED = re.compile(r", !dbg !\d+")


def _normalise_llir(text: str) -> str:
    kept = []
    labels: dict[str, str] = {}
    for line in text.splitlines():
        st = (line.split(";", 1)[0] if not line.lstrip().startswith('"') else line).strip()
        if not st or st.startswith(("!", "source_filename", "#dbg_")) or "llvm.dbg." in st:
            continue
        if st[0].isdigit() and (label := _LLIR_LABEL.match(st)):  # `7:` starts a basic block
            name = labels.setdefault(label.group(0), f"L{len(labels)}")
            st = name + st[label.end() :]
        kept.append(st)
    # Line filtering leaves no line starting with `!`, so the attachment pattern cannot span lines.
    body = _DBG_PRINTED.sub("", "\n".join(kept))
    if "!dbg" in body:  # `define ... !dbg !4 {`: a handful of lines
        body = "\n".join(_DBG_ATTACHMENT.sub("", ln) if "!dbg" in ln else ln for ln in body.split("\n"))
    body = _QUOTED_PATH.sub('"<path>"', body)
    return _LLIR_META(_LLIR_SSA(body))


def _normalise_asm(text: str, comment: str) -> str:
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
        out.append(s)
    body = _ASM_LABELS(_QUOTED_PATH.sub('"<path>"', "\n".join(out)))
    if comment == "//":
        body = _PTX_REGS(body)
    return _BLANKS.sub(" ", body)


def normalise_stage_pure(text: str, kind: str) -> str:
    """normalise_stage in Python: the reference the compiled path (kdb/_speedups.c) reproduces byte for byte,
    and what runs where that is not built, is turned off, or hands a text back (non-ASCII, CRLF, ...)."""
    if kind in ("ttir", "ttgir", "source"):
        return _normalise_mlir(text)
    if kind == "llir":
        return _normalise_llir(text)
    if kind == "amdgcn":
        return _normalise_asm(text, ";")
    if kind == "ptx":
        return _normalise_asm(text, "//")
    return text


def _compiled_normaliser() -> Callable[[str, str], str | None] | None:
    """kdb._speedups.normalise_stage (issue #31), unless it is not built or $KDB_PURE_PYTHON is 1."""
    if os.environ.get("KDB_PURE_PYTHON") == "1":
        return None
    try:
        import kdb._speedups
    except ImportError:
        return None
    return kdb._speedups.normalise_stage


_COMPILED_NORMALISE = _compiled_normaliser()
# Whether normalise_stage runs the compiled path (kdb/_speedups.c) rather than the pure-Python reference.
COMPILED = _COMPILED_NORMALISE is not None


def normalise_stage(text: str, kind: str) -> str:
    """Text with paths, locations, debug info, SSA names, labels (and PTX register numbers) made neutral."""
    if _COMPILED_NORMALISE is not None:
        out = _COMPILED_NORMALISE(text, kind)
        if out is not None:
            return out
    return normalise_stage_pure(text, kind)


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
