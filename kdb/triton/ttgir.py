"""Triton GPU IR (`NAME.ttgir`): module attributes, layout kinds used, and layout-related op counts.

The dialect prefix is `triton_gpu.` up to Triton 3.2 and `ttg.` from 3.3 (shared/reference/triton-cache.md).
"""

from __future__ import annotations

import re
from typing import Any

from kdb.errors import ParseError

MAX_TEXT_CHARS = 512 * 1024 * 1024

# module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, ttg.target = "hip:gfx942", ...} {
MODULE_RE = re.compile(r"^\s*module\s+attributes\s*\{(?P<attrs>.*)\}\s*\{?\s*$", re.MULTILINE)
# "triton_gpu.num-warps" = 4 : i32        ttg.target = "hip:gfx942"        ttg.shared = 16384 : i32
MODULE_ATTR_RE = re.compile(
    r'"?(?P<prefix>ttg|triton_gpu)\.(?P<key>[\w-]+)"?\s*=\s*(?:"(?P<str>[^"]*)"|(?P<int>-?\d{1,19})(?:\s*:\s*i\d+)?)'
)
# #mma = #ttg.amd_mfma<{version = 3, ...}>      #triton_gpu.slice<{dim = 1, parent = #blocked}>
LAYOUT_RE = re.compile(r"#(?:ttg|triton_gpu)\.(?P<kind>\w+)<")
#     %2 = ttg.convert_layout %1 : tensor<1024xf32, #blocked> -> tensor<1024xf32, #blocked1> loc(#loc12)
CONVERT_LAYOUT_RE = re.compile(r"\b(?:ttg|triton_gpu)\.convert_layout\b")
#     %3 = ttg.local_alloc %2 : (tensor<128x64xf16, #blocked>) -> !ttg.memdesc<128x64xf16, #shared, #smem>
LOCAL_ALLOC_RE = re.compile(r"\b(?:ttg|triton_gpu)\.local_alloc\b")

# Module attributes typed in the result; any other `ttg.*` module attribute is kept under 'attributes'.
_TYPED_ATTRS = {
    "num-warps": "num_warps",
    "num-ctas": "num_ctas",
    "threads-per-warp": "threads_per_warp",
    "shared": "shared",
    "target": "target",
}


def parse_ttgir(text: str) -> dict[str, Any]:
    """Return num_warps, num_ctas, threads_per_warp, shared, target (None when absent), prefix
    ('ttg' or 'triton_gpu'), attributes (every module attribute of the dialect), layouts (sorted kinds),
    convert_layout_count and local_alloc_count. Raises ParseError when there is no module."""
    if not isinstance(text, str):
        raise ParseError("TTGIR is not text")
    if len(text) > MAX_TEXT_CHARS:
        raise ParseError(f"TTGIR of {len(text)} characters is larger than any real module")
    module = MODULE_RE.search(text)
    if module is None:
        raise ParseError("no `module attributes {...}` line in TTGIR")
    result: dict[str, Any] = {name: None for name in _TYPED_ATTRS.values()}
    attributes: dict[str, int | str] = {}
    prefix: str | None = None
    for match in MODULE_ATTR_RE.finditer(module.group("attrs")):
        prefix = prefix or match.group("prefix")
        value: int | str = match.group("str") if match.group("str") is not None else int(match.group("int"))
        attributes[match.group("key")] = value
        typed = _TYPED_ATTRS.get(match.group("key"))
        # `target` is the one string among the typed attributes; a wrongly typed value stays None.
        if typed is not None and isinstance(value, str) == (typed == "target"):
            result[typed] = value
    if prefix is None:
        raise ParseError("TTGIR module has no triton_gpu/ttg attributes")
    result["prefix"] = prefix
    result["attributes"] = attributes
    result["layouts"] = sorted({m.group("kind") for m in LAYOUT_RE.finditer(text)})
    result["convert_layout_count"] = len(CONVERT_LAYOUT_RE.findall(text))
    result["local_alloc_count"] = len(LOCAL_ALLOC_RE.findall(text))
    return result
