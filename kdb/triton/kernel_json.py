"""The metadata JSON Triton writes beside each kernel (`NAME.json`), across releases 2.3–3.9."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kdb.errors import ParseError

# Folder-name encodings of the cache key, one per release family (see shared/reference/triton-cache.md).
FOLDER_FAMILIES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^[0-9a-f]{32}$"), "2.3"),  # md5 hex: 5f1c…
    (re.compile(r"^[0-9a-f]{64}$"), "3.0-3.1"),  # sha256 hex
    (re.compile(r"^[A-Za-z0-9_-]{43}$"), "3.2"),  # sha256 base64url, unpadded
    (re.compile(r"^[A-Z2-7]{52}$"), "3.3+"),  # sha256 base32, unpadded: O2EEWR4B…
)
# Only this much of a metadata JSON is ever read: real ones are a few KB.
MAX_JSON_BYTES = 16 * 1024 * 1024


def release_family(folder: str) -> str | None:
    for pattern, family in FOLDER_FAMILIES:
        if pattern.match(folder):
            return family
    return None


@dataclass(frozen=True)
class KernelMeta:
    name: str
    backend: str | None  # 'hip' or 'cuda'
    arch: str | None  # 'gfx942', 'sm90'
    warp_size: int | None
    num_warps: int | None
    num_stages: int | None
    num_ctas: int | None
    waves_per_eu: int | None
    matrix_instr_nonkdim: int | None
    kpack: int | None
    shared: int | None
    triton_version: str | None
    hash: str | None
    raw: dict[str, Any]


# The catalog's kernel_folders columns: INTEGER, `shared` BIGINT. A figure beyond them is no real kernel's, and
# would stop the commit (DuckDB's conversion error): the file is refused as a problem instead.
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)


def _int(value: Any, key: str = "", bounds: tuple[int, int] = INT32) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if not bounds[0] <= value <= bounds[1]:
            raise ParseError(f"metadata JSON: {key or 'a figure'} {value} is out of range ({bounds[0]} to {bounds[1]})")
        return value
    return None


def _target(raw: dict[str, Any]) -> tuple[str | None, str | None, int | None]:
    target = raw.get("target")
    # 3.x: {"backend": "hip", "arch": "gfx942", "warp_size": 64}; 2.3: a list ["cuda", 80] or [80]
    if isinstance(target, dict):
        backend, arch, warp = target.get("backend"), target.get("arch"), target.get("warp_size")
    elif isinstance(target, list) and target:
        backend = target[0] if isinstance(target[0], str) else "cuda"
        arch = target[1] if len(target) > 1 and isinstance(target[0], str) else target[0]
        warp = target[2] if len(target) > 2 else None
    else:
        backend = raw.get("backend_name")
        arch, warp = raw.get("arch"), raw.get("warp_size")
    if isinstance(arch, int) or isinstance(arch, str) and arch.isdigit():
        arch = f"sm{arch}"
    if backend is not None and not isinstance(backend, str):
        backend = None
    if arch is not None and not isinstance(arch, str):
        arch = None
    return backend, arch, _int(warp, "warp_size") or _int(raw.get("warp_size"), "warp_size")


def parse_kernel_json(data: bytes) -> KernelMeta:
    if len(data) > MAX_JSON_BYTES:
        raise ParseError(f"metadata JSON is {len(data)} bytes, larger than any Triton writes")
    if not data.strip():
        raise ParseError("metadata JSON is empty")
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"metadata is not valid JSON ({str(exc).splitlines()[0][:80]})") from None
    if not isinstance(raw, dict):
        raise ParseError(f"metadata JSON is a {type(raw).__name__}, not an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ParseError("metadata JSON has no kernel 'name'")
    backend, arch, warp = _target(raw)
    version = raw.get("triton_version")
    return KernelMeta(
        name=name,
        backend=backend,
        arch=arch,
        warp_size=warp,
        num_warps=_int(raw.get("num_warps"), "num_warps"),
        num_stages=_int(raw.get("num_stages"), "num_stages"),
        num_ctas=_int(raw.get("num_ctas"), "num_ctas"),
        waves_per_eu=_int(raw.get("waves_per_eu"), "waves_per_eu"),
        matrix_instr_nonkdim=_int(raw.get("matrix_instr_nonkdim"), "matrix_instr_nonkdim"),
        kpack=_int(raw.get("kpack"), "kpack"),
        shared=_int(raw.get("shared"), "shared", INT64),
        triton_version=version if isinstance(version, str) else None,
        hash=raw.get("hash") if isinstance(raw.get("hash"), str) else None,
        raw=raw,
    )
