"""Profile files as kdb reads them: pure functions of bytes, one record per distinct launch.

Two formats, told apart by their content (never by the file name), plain or gzipped (told by the gzip magic):

- torch.profiler's Chrome trace (`prof.export_chrome_trace`, Kineto): an object with `traceEvents`; every GPU
  kernel is an event with `cat: "kernel"`, its duration `dur` in microseconds (the Chrome trace format's unit,
  whatever `displayTimeUnit` says) and CUPTI's launch record in `args`: `grid`, `block`, `registers per thread`,
  `shared memory` (the dynamic shared memory of the launch), `stream`, `device`.
- Triton Proton's hatchet JSON (`proton.start(…, hook="triton")`, `proton.finalize()`): a list whose first item is
  the root frame of a call tree, each frame `{"frame": {"name", "type"}, "metrics": {...}, "children": [...]}`;
  a frame that ran on a GPU carries `count` (launches), `time (ns)` and `device_type`/`device_id`. Proton keeps
  only the kernel's name: nothing of the launch.

What cannot be read is a ParseError naming why, in one line.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kdb.errors import ParseError

TORCH_TRACE = "torch-trace"
PROTON_HATCHET = "proton-hatchet"
FORMATS = (TORCH_TRACE, PROTON_HATCHET)
GZIP_MAGIC = b"\x1f\x8b"
# Proton frames deeper than this are not a profile (a guard against a hostile file, not a real limit).
MAX_DEPTH = 200
# Magic numbers of files people pass by mistake, named in the error.
KNOWN_MAGIC = {
    b"\x89PNG": "a PNG image",
    b"%PDF": "a PDF document",
    b"PK\x03\x04": "a zip archive",
    b"\x7fELF": "an ELF binary",
    b"\xfd7zXZ": "an xz archive",
    b"\x28\xb5\x2f\xfd": "a zstd archive",
    b"SQLite format 3": "an SQLite database",
}


@dataclass(frozen=True)
class Launches:
    """Launches of one kernel with one launch record: how many, and their summed time."""

    name: str
    count: int
    total_ns: int
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    registers: int | None = None  # registers per thread the driver launched it with
    shared: int | None = None  # dynamic shared memory per block, bytes
    device: str | None = None


@dataclass(frozen=True)
class Profile:
    format: str
    gzipped: bool
    launches: list[Launches]  # one per distinct (name, launch record), in first-seen order

    @property
    def launch_count(self) -> int:
        return sum(launch.count for launch in self.launches)

    @property
    def total_ns(self) -> int:
        return sum(launch.total_ns for launch in self.launches)


def parse_profile(data: bytes) -> Profile:
    """Read a profile file's bytes: gzip or not, then JSON, then one of FORMATS by its shape."""
    gzipped = data[:2] == GZIP_MAGIC
    if gzipped:
        data = _gunzip(data)
    doc = _json(data)
    if isinstance(doc, dict) and "traceEvents" in doc:
        return Profile(TORCH_TRACE, gzipped, _torch_launches(doc))
    if isinstance(doc, list) and doc and isinstance(doc[0], dict) and "frame" in doc[0]:
        return Profile(PROTON_HATCHET, gzipped, _proton_launches(doc[0]))
    shape = f"an object with keys {', '.join(sorted(map(str, doc))[:5])}" if isinstance(doc, dict) else _kind(doc)
    raise ParseError(
        f"JSON, but not a profile kdb reads ({shape}): expected a torch.profiler trace (an object with "
        "traceEvents) or a Proton hatchet profile (a list whose first item is a frame tree)"
    )


def _gunzip(data: bytes) -> bytes:
    try:
        return gzip.decompress(data)
    except EOFError:
        raise ParseError("truncated gzip stream (the file ends before its end-of-stream marker)") from None
    except (OSError, zlib.error) as exc:
        raise ParseError(f"damaged gzip stream: {exc}") from None


def _json(data: bytes) -> Any:
    for magic, what in KNOWN_MAGIC.items():
        if data.startswith(magic):
            raise ParseError(f"not a profile: {what}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError(
            f"not a profile: binary data, neither JSON nor gzip (starts with {data[:8].hex(' ')})"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        # the scanner met the end of the text inside a value or a string: the file was cut
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise ParseError(f"truncated JSON: the text ends at {where} inside a value") from None
        raise ParseError(f"malformed JSON at {where}: {exc.msg}") from None
    except RecursionError:
        raise ParseError("malformed JSON: nested too deeply") from None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


# -- torch.profiler (Kineto) Chrome trace ------------------------------------------------------------------


def _torch_launches(doc: dict[str, Any]) -> list[Launches]:
    events = doc["traceEvents"]
    if not isinstance(events, list):
        raise ParseError(f"torch trace: traceEvents is {_kind(events)}, not a list")
    found: dict[tuple[Any, ...], list[int]] = {}
    for i, event in enumerate(events):
        if not isinstance(event, dict) or event.get("cat") != "kernel":
            continue
        name, dur, args = event.get("name"), _number(event.get("dur")), event.get("args", {})
        if not isinstance(name, str) or not name:
            raise ParseError(f"torch trace: kernel event {i} has no name")
        if dur is None or dur < 0:
            raise ParseError(f"torch trace: kernel event {i} ({name[:60]}) has no duration")
        if not isinstance(args, dict):
            raise ParseError(f"torch trace: kernel event {i} ({name[:60]}): args is {_kind(args)}")
        key = (
            name,
            _dim3(args.get("grid")),
            _dim3(args.get("block")),
            _int(args.get("registers per thread")),
            _int(args.get("shared memory")),
            None if args.get("device") is None else str(args.get("device")),
        )
        slot = found.setdefault(key, [0, 0])
        slot[0] += 1
        slot[1] += round(dur * 1000)  # microseconds (with nanosecond decimals) -> ns
    if not found:
        raise ParseError("torch trace without any GPU kernel event (cat: kernel): was CUDA activity recorded?")
    return [Launches(k[0], n, ns, k[1], k[2], k[3], k[4], k[5]) for k, (n, ns) in found.items()]


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value == value
    return value if ok else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _dim3(value: Any) -> tuple[int, int, int] | None:
    if isinstance(value, list) and len(value) == 3 and all(_int(v) is not None for v in value):
        return (value[0], value[1], value[2])
    return None


# -- Proton hatchet ---------------------------------------------------------------------------------------


def _proton_launches(root: dict[str, Any]) -> list[Launches]:
    found: dict[tuple[str, str | None], list[int]] = {}
    for node in _frames(root):
        metrics = node.get("metrics", {})
        if not isinstance(metrics, dict):
            raise ParseError(f"Proton profile: frame {_frame_name(node)[:60]!r} has metrics that are not an object")
        if "device_type" not in metrics:
            continue  # a scope or the root: no GPU time of its own
        count, ns = _int(metrics.get("count")), _number(metrics.get("time (ns)"))
        name = _frame_name(node)
        if count is None or ns is None or ns < 0:
            raise ParseError(f"Proton profile: GPU frame {name[:60]!r} has no count or time (ns)")
        if count == 0:
            continue
        device = metrics.get("device_id")
        slot = found.setdefault((name, None if device is None else str(device)), [0, 0])
        slot[0] += count
        slot[1] += round(ns)
    if not found:
        raise ParseError("Proton profile without any GPU frame (no metrics with a device_type)")
    return [Launches(name, n, ns, device=device) for (name, device), (n, ns) in found.items()]


def _frame_name(node: dict[str, Any]) -> str:
    frame = node.get("frame")
    name = frame.get("name") if isinstance(frame, dict) else None
    if not isinstance(name, str):
        raise ParseError("Proton profile: a frame without a name")
    return name


def _frames(root: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict) or "frame" not in node:
            raise ParseError("Proton profile: a child that is not a frame")
        if depth > MAX_DEPTH:
            raise ParseError(f"Proton profile: frames nested deeper than {MAX_DEPTH}")
        yield node
        children = node.get("children", [])
        if not isinstance(children, list):
            raise ParseError(f"Proton profile: children of {_frame_name(node)[:60]!r} are not a list")
        stack.extend((child, depth + 1) for child in reversed(children))
