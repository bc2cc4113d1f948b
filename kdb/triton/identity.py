"""Identity of a kernel specialization across Triton releases, rebuilt from its TTIR and JSON.

Cache folder names change with every release, so `kdb diff` matches kernels by a key built from
what the artifacts say about the specialization (see shared/reference/triton-cache.md, "What
identifies the same kernel specialization"):

* the kernel name;
* the target `backend:arch:warp_size` (only in `identity`, not in `identity_any_target`);
* for each argument of the public `tt.func`: its normalised type (`!tt.ptr<bf16>` -> `ptr<bf16>`),
  its `tt.*` attributes (divisibility, ...), and the sorted set of source-line offsets, relative to
  the `def` line, of the ops that use it (locations resolved through `#locN` aliases, names and
  call sites, keeping only lines of the kernel's own file);
* the sorted set of tensor shapes in the TTIR;
* the sorted set of integer constants in the TTIR (`arith.constant N : iK`, `dense<N> : tensor<..xiK>`);
* num_warps and num_ctas.

Tuning options whose default changed between releases (num_stages, waves_per_eu, kpack,
matrix_instr_nonkdim, ...) are kept in `parts["options"]` but not hashed: `options_compatible`
compares them as "equal, or each at its own release's default" (kdb/triton/options.py).

Paths, SSA value names and argument names never enter the key. Pure functions, no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from kdb.errors import ParseError
from kdb.triton.kernel_json import KernelMeta
from kdb.triton.mlir_text import matching_paren, split_top
from kdb.triton.options import TUNING_OPTIONS

# where kdb/diff/matching.py has always found it
from kdb.triton.options import options_compatible as options_compatible

IDENTITY_VERSION = 2

# -- TTIR scanning ----------------------------------------------------------------------------------
_ALIAS_DEF = re.compile(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$")
_FUNC_HEAD = re.compile(r"^\s*tt\.func\s+(public\s+)?@([\w$.]+)\s*\(")
_FILE_LOC = re.compile(r'^"((?:[^"\\]|\\.)*)":(\d+):(\d+)')
_NAME_LOC = re.compile(r'^"((?:[^"\\]|\\.)*)"\s*\(')
_TENSOR = re.compile(r"tensor<((?:\d+x)+)")
_INT_CONST = re.compile(r"arith\.constant\s+(-?\d+)\s*:\s*(i\d+)\b")
_DENSE_INT = re.compile(r"arith\.constant\s+dense<(-?\d+)>\s*:\s*tensor<(?:\d+x)+(i\d+)>")
_TRAILING_LOC = re.compile(r"\bloc\((.*)\)\s*$")
MAX_LOC_DEPTH = 64


def _matching_paren(text: str, open_at: int) -> int:
    close = matching_paren(text, open_at)
    if close is None:
        raise ParseError("TTIR: unbalanced parentheses")
    return close


class _Locs:
    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases

    def resolve(self, body: str, depth: int = 0) -> list[tuple[str, int]]:
        """(file, line) candidates of a location body (the text inside `loc(...)`), innermost-caller first."""
        if depth > MAX_LOC_DEPTH:
            raise ParseError("TTIR: location aliases nest too deeply (a cycle?)")
        body = body.strip()
        if body.startswith("#loc"):
            target = self.aliases.get(body)
            if target is None:
                raise ParseError(f"TTIR: undefined location alias {body}")
            return self.resolve(target, depth + 1)
        if body.startswith("loc(") and body.endswith(")"):
            return self.resolve(body[4:-1], depth + 1)
        if body == "unknown" or not body:
            return []
        if body.startswith("callsite("):
            inner = body[len("callsite(") : _matching_paren(body, len("callsite"))]
            parts = split_top(inner, " at ")
            if len(parts) != 2:
                raise ParseError("TTIR: malformed callsite location")
            # The caller (B in `callsite(A at B)`) is where the kernel's own code is.
            return self.resolve(parts[1], depth + 1) + self.resolve(parts[0], depth + 1)
        if body.startswith("fused"):
            start = body.find("[")
            if start < 0:
                return []
            end = body.rfind("]")
            out: list[tuple[str, int]] = []
            for piece in split_top(body[start + 1 : end], ","):
                out += self.resolve(piece, depth + 1)
            return out
        m = _FILE_LOC.match(body)
        if m:
            return [(m.group(1), int(m.group(2)))]
        m = _NAME_LOC.match(body)
        if m:
            open_at = m.end() - 1
            return self.resolve(body[open_at + 1 : _matching_paren(body, open_at)], depth + 1)
        return []


def _func_signature(lines: list[str]) -> tuple[int, str, str]:
    """(line index, kernel name, argument text) of the public tt.func."""
    candidates = [(i, m) for i, line in enumerate(lines) if (m := _FUNC_HEAD.match(line))]
    if not candidates:
        raise ParseError("TTIR: no tt.func found")
    public = [(i, m) for i, m in candidates if m.group(1)]
    i, m = (public or candidates)[0]
    line = lines[i]
    open_at = m.end() - 1
    close = _matching_paren(line, open_at)
    return i, m.group(2), line[open_at + 1 : close]


def _parse_args(arg_text: str) -> list[dict[str, Any]]:
    args: list[dict[str, Any]] = []
    if not arg_text.strip():
        return args
    for piece in split_top(arg_text, ","):
        piece = piece.strip()
        m = re.match(r"^(%[\w$.-]+)\s*:\s*", piece)
        if not m:
            raise ParseError(f"TTIR: cannot read function argument {piece[:60]!r}")
        rest = piece[m.end() :]
        loc = None
        lm = _TRAILING_LOC.search(rest)
        if lm:
            loc = lm.group(1)
            rest = rest[: lm.start()].strip()
        attrs: dict[str, str] = {}
        brace = rest.find("{")
        if brace >= 0 and rest.endswith("}"):
            attr_text = rest[brace + 1 : -1]
            rest = rest[:brace].strip()
            for item in split_top(attr_text, ","):
                key, sep, value = item.partition("=")
                key = key.strip()
                if key.startswith("tt."):
                    value = value.strip()
                    value = re.sub(r"\s*:\s*i\d+$", "", value) if sep else "true"
                    attrs[key] = value
        args.append({"ssa": m.group(1), "type": normalise_type(rest), "attrs": attrs, "loc": loc})
    return args


_DEFAULT_ADDRESS_SPACE = re.compile(r"(ptr<[^<>]*?),\s*1>")


def normalise_type(text: str) -> str:
    """`!tt.ptr<f32, 1>` (2.3 spells out the global address space) and `!tt.ptr<f32>` -> `ptr<f32>`."""
    text = re.sub(r"!tt\.", "", text.strip())
    while True:  # innermost first: ptr<ptr<f32, 1>, 1>
        shorter = _DEFAULT_ADDRESS_SPACE.sub(r"\1>", text)
        if shorter == text:
            return text
        text = shorter


# Argument attributes that say how the caller specialised the kernel (a multiple of 16). Every other
# `tt.*` attribute on an argument is a hint a backend adds or not depending on the release (HIP's
# `tt.pointer_range` since 3.2/3.6, `tt.max_divisibility`, ...): kept in `parts`, never in the key.
SPECIALISATION_ATTRS = frozenset({"tt.divisibility"})


def _body_range(lines: list[str], head: int) -> tuple[int, int, str | None]:
    """Body lines (start, end exclusive) of the function whose header is at `head`, and its own loc."""
    depth = 0
    for j in range(head, len(lines)):
        stripped = lines[j].strip()
        depth += _brace_delta(stripped)
        if j > head and depth <= 0:
            m = _TRAILING_LOC.search(stripped)
            return head + 1, j, m.group(1) if m else None
    raise ParseError("TTIR: function body is not closed")


def _brace_delta(line: str) -> int:
    # Strings in TTIR lines (locations) never hold braces in practice; strip them anyway.
    line = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)
    return line.count("{") - line.count("}")


def _uses(lines: list[str], start: int, end: int, names: list[str]) -> dict[int, list[str]]:
    """For each argument index, the loc bodies of the ops that use it.

    Ops with regions (`scf.for ... {`) carry their loc on the closing line (`} loc(...)`), so uses on
    an opening line are attributed when its matching close is reached.
    """
    patterns = [re.compile(r"(?<![\w$.%-])" + re.escape(n) + r"(?![\w$.-])") for n in names]
    out: dict[int, list[str]] = {i: [] for i in range(len(names))}
    stack: list[list[int]] = []
    for j in range(start, end):
        line = lines[j]
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        code = _TRAILING_LOC.sub("", stripped)
        used = [i for i, p in enumerate(patterns) if p.search(code)]
        delta = _brace_delta(stripped)
        if stripped.startswith("}"):
            if stripped.endswith("{"):  # `} else {` / `} do {`: same op, next region
                if stack:
                    stack[-1].extend(used)
                continue
            pending = stack.pop() if stack else []
            m = _TRAILING_LOC.search(stripped)
            for i in pending + used:
                if m:
                    out[i].append(m.group(1))
            continue
        if delta > 0:
            stack.append(used)
            continue
        m = _TRAILING_LOC.search(stripped)
        if m:
            for i in used:
                out[i].append(m.group(1))
    return out


def ttir_facts(ttir: str) -> dict[str, Any]:
    """Every target-independent component read from the TTIR text."""
    lines = ttir.splitlines()
    aliases: dict[str, str] = {}
    for line in lines:
        m = _ALIAS_DEF.match(line.strip())
        if m:
            aliases[m.group(1)] = m.group(2)
    locs = _Locs(aliases)
    head, name, arg_text = _func_signature(lines)
    args = _parse_args(arg_text)
    body_start, body_end, func_loc = _body_range(lines, head)
    # The def line: the function's own location, else the first argument's.
    def_file = def_line = None
    for body in [func_loc] + [a["loc"] for a in args]:
        if body:
            resolved = locs.resolve(body)
            if resolved:
                def_file, def_line = resolved[0]
                break
    uses = _uses(lines, body_start, body_end, [a["ssa"] for a in args])
    arg_parts = []
    for i, a in enumerate(args):
        offsets: set[int] = set()
        for body in uses[i]:
            for loc_file, loc_line in locs.resolve(body):
                if loc_file == def_file and def_line is not None:
                    offsets.add(loc_line - def_line)
                    break
        attrs = dict(sorted(a["attrs"].items()))
        arg_parts.append(
            {
                "type": a["type"],
                "attrs": {k: v for k, v in attrs.items() if k in SPECIALISATION_ATTRS},
                "hints": {k: v for k, v in attrs.items() if k not in SPECIALISATION_ATTRS},
                "use_lines": sorted(offsets),
            }
        )
    body_text = "\n".join(lines[head : body_end + 1])
    shapes = sorted(
        {m.group(1)[:-1] for m in _TENSOR.finditer(body_text)},
        key=lambda s: (s.count("x"), [int(d) for d in s.split("x")]),
    )
    consts = {(int(v), t) for v, t in _INT_CONST.findall(body_text)}
    consts |= {(int(v), t) for v, t in _DENSE_INT.findall(body_text)}
    return {
        "func_name": name,
        "args": arg_parts,
        "tensor_shapes": shapes,
        "int_constants": [f"{v}:{t}" for v, t in sorted(consts, key=lambda c: (c[1], c[0]))],
        "has_def_line": def_line is not None,
        # Where the kernel is defined: a tie-breaker between candidates, never part of the key (a file
        # can be renamed or moved between two snapshots; Inductor's module names change with torch).
        "def_file": def_file.replace("\\", "/").rsplit("/", 1)[-1] if def_file else None,
        "def_line": def_line,
    }


_SPLAT_INT = re.compile(r"arith\.constant\s+dense<(-?\d+)>\s*:\s*tensor<((?:\d+x)+)(i\d+)>")


def problem_constants(ttir: str) -> frozenset[str]:
    """The integer splat constants of a TTIR with the axes they lie along (`512:i32:nx1`): where the problem's
    sizes and strides (folded into a template's body) show, block sizes only as which axes are not 1. A block
    size can fold a bound check away (XBLOCK=1 needs no mask), so a config may show a subset of its op's. The
    same of the text as stored and normalised (kdb/triton/normalize.py keeps every constant)."""
    return frozenset(
        f"{v}:{t}:" + "x".join("1" if d == "1" else "n" for d in dims[:-1].split("x"))
        for v, dims, t in _SPLAT_INT.findall(ttir)
    )


def _hash(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return isinstance(value, (int, str, float, bool)) or value is None


def meta_options(meta: KernelMeta) -> dict[str, Any]:
    backend = meta.backend
    values = {
        key: meta.raw[key] for key in TUNING_OPTIONS.get(backend or "", ()) if key in meta.raw and _plain(meta.raw[key])
    }
    return {"backend": backend, "arch": meta.arch, "triton_version": meta.triton_version, "values": values}


# 2.3 names a kernel `<function>_<suffix>`, the suffix spelling its specialisation per argument
# (`0d1d2c3`: <index>, c = equal to 1, d = divisible by 16, e = by 8); every later release uses the
# function's name, which is also what every file of the folder is named after.
_MANGLED_23 = re.compile(r"^(?P<name>.+?)_(?:\d+c?d?e?)+$")


def canonical_kernel_name(name: str | None, file_stem: str | None = None) -> str | None:
    if not name:
        return name
    m = _MANGLED_23.match(name)
    if m and m.group("name") == file_stem:
        return m.group("name")
    return name


# Warp size by backend where a release's JSON does not say (2.3): NVIDIA warps are always 32 lanes.
DEFAULT_WARP_SIZE = {"cuda": 32}


def kernel_identity(ttir: str | None, meta: KernelMeta, file_stem: str | None = None) -> dict[str, Any] | None:
    """The identity of one kernel folder, or None without TTIR. Raises ParseError on TTIR it cannot read.

    `file_stem`: the name the folder's files carry (`add_kernel` for `add_kernel.json`), which tells a
    2.3 mangled name from a kernel really called `f_0d`."""
    if ttir is None:
        return None
    facts = ttir_facts(ttir)
    warp = meta.warp_size or DEFAULT_WARP_SIZE.get(meta.backend or "")
    target = f"{meta.backend}:{meta.arch}:{warp}"
    hashed = {
        "v": IDENTITY_VERSION,
        "name": canonical_kernel_name(meta.name, file_stem),
        "args": [{k: v for k, v in a.items() if k != "hints"} for a in facts["args"]],
        "tensor_shapes": facts["tensor_shapes"],
        "int_constants": facts["int_constants"],
        "num_warps": meta.num_warps,
        "num_ctas": meta.num_ctas if meta.num_ctas is not None else 1,
    }
    options = {
        **meta_options(meta),
        "identity_version": IDENTITY_VERSION,
        "def_file": facts["def_file"],
        "def_line": facts["def_line"],
    }
    parts = {
        **hashed,
        "target": target,
        "options": options,
        "func_name": facts["func_name"],
        "hints": [a["hints"] for a in facts["args"]],
        # what splits an autotune group (kdb/diff/groups.py), read here once rather than from every TTIR per diff
        "problem_constants": sorted(problem_constants(ttir)),
    }
    return {
        "identity": _hash({**hashed, "target": target}),
        "identity_any_target": _hash(hashed),
        "parts": parts,
    }
