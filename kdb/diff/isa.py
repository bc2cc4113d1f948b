"""The ISA text the deep view diffs: the stage text (kdb/triton/normalize.py: comments, debug lines, paths gone,
labels and PTX registers numbered) with what a recompile renames without changing an instruction made neutral,
so a hunk shows the instructions that changed, not a register allocation shifted by one.

- registers renamed per register file by first use: AMD `v7`, `s[4:5]`, `a[0:15]`, `ttmp3`; NVIDIA PTX `%r12`
  (already numbered by first use across files by the stage text);
- branch targets and label definitions stripped to `.L`: one block inserted renumbers every later label;
- addresses and encodings (`// 000000001234: D2...`, `/*0a80*/`) stripped where a disassembly carries them.

What stays: mnemonics, immediates, offsets, modifiers, directives. NVIDIA's SASS-diff tooling normalises the same
way for the same reason. Pure functions of text.
"""

from __future__ import annotations

import re

# AMD GCN/CDNA/RDNA register operands: VGPR, SGPR, AGPR, trap temporaries; single or a range.
_AMD_REGISTER = re.compile(r"(?<![\w.$%@])(v|s|a|ttmp)(\d+|\[\d+:\d+\])(?![\w:])")
_PTX_REGISTER = re.compile(r"%r\d+\b")
_LABEL = re.compile(r"(?<![\w$])\.L\d+\b")
# `/*0a80*/` (SASS offsets), `; 000000001234: D2...` or `// 000000001234: ...` (objdump addresses and encodings)
_ADDRESS = re.compile(r"/\*[0-9a-fA-F]{4,}\*/|(?:;|//)\s*[0-9a-fA-F]{8,}:.*$", re.MULTILINE)


def _rename_amd(text: str) -> str:
    # one split of the whole text (tokens at odd positions: class, index), names looked up in a dict per class
    parts = _AMD_REGISTER.split(text)
    classes, indices = parts[1::3], parts[2::3]
    tables: dict[str, dict[str, str]] = {}
    names = []
    for cls, index in zip(classes, indices, strict=True):
        table = tables.get(cls)
        if table is None:
            table = tables[cls] = {}
        name = table.get(index)
        if name is None:
            n = len(table)
            name = table[index] = f"{cls}[r{n}]" if index[0] == "[" else f"{cls}r{n}"
        names.append(name)
    out = parts[0::3]
    return "".join(x for pair in zip(out, [*names, ""], strict=True) for x in pair)


def _rename_ptx(text: str) -> str:
    table: dict[str, str] = {}
    return _PTX_REGISTER.sub(lambda m: table.setdefault(m.group(0), f"%r{len(table)}"), text)


def diff_text(text: str, kind: str | None) -> str:
    """`text` (a stage text of kind amdgcn or ptx) with registers renamed by first use, branch targets,
    addresses and encodings stripped: equal for two compilations that differ only in those."""
    text = _ADDRESS.sub("", text)
    text = _LABEL.sub(".L", text)
    if kind == "amdgcn":
        text = _rename_amd(text)
    elif kind == "ptx":
        text = _rename_ptx(text)
    return "\n".join(line.rstrip() for line in text.split("\n"))
