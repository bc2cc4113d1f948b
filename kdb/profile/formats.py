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

Each file also says which GPU ran its launches, where it keeps that: a torch trace's `deviceProperties` (Kineto
writes one entry per visible GPU: the CUDA build adds `regsPerMultiprocessor`, the ROCm build
`maxSharedMemoryPerMultiProcessor`) and a Proton profile's second item (`{"CUDA": {"0": {"arch": "90", …}}}`, HIP's
`arch` the first 6 characters of its `gcnArchName`). A file that names no device is read all the same.

Every number kdb keeps is bounded here (durations and counts fit the catalog's BIGINT, a launch record's figures
an int32), the JSON is at most MAX_PROFILE_BYTES after decompression, and what cannot be read is a ParseError
naming why, in one line.
"""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn, TypeGuard

from kdb.errors import ParseError

TORCH_TRACE = "torch-trace"
PROTON_HATCHET = "proton-hatchet"
FORMATS = (TORCH_TRACE, PROTON_HATCHET)
GZIP_MAGIC = b"\x1f\x8b"
# A profile of a long run is tens of MB of JSON; the file as given and its decompressed JSON are read up to this
# (parsing it takes about ten times as much memory), so neither a huge file nor a gzip bomb is read without bound.
MAX_PROFILE_BYTES = 256 << 20
# What the catalog keeps of a profile (launches, nanoseconds) is BIGINT; a launch record's figures are int32.
INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1
# An integer literal longer than this is no figure of a profile (Python refuses more than 4300 digits anyway).
MAX_INT_DIGITS = 40
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
# Kineto's deviceProperties: keys only its CUDA build writes, and only its ROCm build (libkineto/src/DeviceProperties.cpp)
CUDA_ONLY_KEYS = ("regsPerMultiprocessor", "sharedMemPerBlockOptin", "sharedMemPerMultiprocessor")
HIP_ONLY_KEYS = ("maxSharedMemoryPerMultiProcessor",)


@dataclass(frozen=True)
class Device:
    """The GPU a profile says ran its launches."""

    backend: str  # 'cuda' | 'hip', as the catalog's kernels.backend
    arch: str | None  # 'sm90' (as kernels.arch); HIP: 'gfx942', or its first 6 characters (Proton: 'gfx110')
    warp_size: int | None = None
    name: str | None = None  # 'NVIDIA H100 80GB HBM3'

    def describe(self) -> str:
        what = f"{self.backend} {self.arch or '(architecture not recorded)'}"
        return f"{self.name} ({what})" if self.name else what

    def runs(self, target: str) -> bool:
        """Whether code compiled for a snapshot target ('backend:arch:warp_size', snapshots.targets) is what this
        device runs: the same backend, the same architecture (HIP: one the device's recorded prefix names; CUDA:
        the same SM, `sm90a` being sm90's), the same warp size where both are known."""
        backend, _, rest = target.partition(":")
        arch, _, warp = rest.partition(":")
        if backend != self.backend:
            return False
        if self.arch is not None and arch:
            if self.backend == "cuda" and arch.rstrip("af") != self.arch:
                return False
            if self.backend == "hip" and not arch.startswith(self.arch):
                return False
        return not (self.warp_size is not None and warp.isdigit() and int(warp) != self.warp_size)


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
    backend: str | None = None  # 'cuda' | 'hip' of the device that ran them, where the file names it


@dataclass(frozen=True)
class Profile:
    format: str
    gzipped: bool
    launches: list[Launches]  # one per distinct (name, launch record), in first-seen order
    content_hash: str = ""  # sha256 of the JSON (the file decompressed): the same run, however it was compressed
    devices: tuple[Device, ...] = ()  # the devices the file says ran its launches, in first-seen order
    unnamed_launches: int = 0  # launches on a device the file does not describe

    @property
    def launch_count(self) -> int:
        return sum(launch.count for launch in self.launches)

    @property
    def total_ns(self) -> int:
        return sum(launch.total_ns for launch in self.launches)


def parse_profile(data: bytes) -> Profile:
    """Read a profile file's bytes: gzip or not, then JSON, then one of FORMATS by its shape."""
    gzipped = data[:2] == GZIP_MAGIC
    if len(data) > MAX_PROFILE_BYTES:
        raise ParseError(f"{len(data)} bytes, more than any profile kdb reads ({MAX_PROFILE_BYTES >> 20} MiB)")
    if gzipped:
        data = gunzip(data)
        if data[:2] == GZIP_MAGIC:
            raise ParseError("gzip inside gzip: the file was compressed twice (gunzip it once and import that)")
    content_hash = hashlib.sha256(data).hexdigest()
    doc = _json(data, gzipped)
    if isinstance(doc, dict) and "traceEvents" in doc:
        launches, devices, unnamed = _torch_launches(doc)
        return Profile(TORCH_TRACE, gzipped, launches, content_hash, devices, unnamed)
    if isinstance(doc, list) and doc and isinstance(doc[0], dict) and "frame" in doc[0]:
        launches, devices, unnamed = _proton_launches(doc[0], doc[1] if len(doc) > 1 else None)
        return Profile(PROTON_HATCHET, gzipped, launches, content_hash, devices, unnamed)
    shape = f"an object with keys {', '.join(sorted(map(str, doc))[:5])}" if isinstance(doc, dict) else _kind(doc)
    raise ParseError(
        f"JSON, but not a profile kdb reads ({shape}): expected a torch.profiler trace (an object with "
        "traceEvents) or a Proton hatchet profile (a list whose first item is a frame tree)"
    )


def gunzip(data: bytes, limit: int = MAX_PROFILE_BYTES) -> bytes:
    """The gzip stream's content (every member, as gzip reads them), refused once it passes `limit` bytes: a gzip
    bomb is never expanded further than that."""
    out = bytearray()
    rest = data
    while True:
        stream = zlib.decompressobj(wbits=31)  # one gzip member
        try:
            while not stream.eof:
                chunk = stream.decompress(rest, limit + 1 - len(out))
                out += chunk
                if len(out) > limit:
                    raise ParseError(
                        f"the gzip stream expands beyond {limit >> 20} MiB, more than any profile kdb reads "
                        f"({len(data)} bytes compressed: a gzip bomb?)"
                    )
                rest = stream.unconsumed_tail
                if not chunk and not rest:
                    raise ParseError("truncated gzip stream (the file ends before its end-of-stream marker)")
        except zlib.error as exc:
            raise ParseError(f"damaged gzip stream: {exc}") from None
        rest = stream.unused_data
        if not rest.strip(b"\0"):  # the end, or the zero padding gzip itself skips
            return bytes(out)
        if rest[:2] != GZIP_MAGIC:
            raise ParseError(f"damaged gzip stream: {len(rest)} bytes that are not gzip after its end")


def _refuse_constant(name: str) -> NoReturn:
    raise ParseError(f"not a number JSON allows: {name} (JSON has no NaN or infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ParseError(f"a number beyond the range of any real figure: {text[:40]}")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ParseError(f"an integer of {len(text.lstrip('-'))} digits, beyond any real figure")
    return int(text)


def _json(data: bytes, gzipped: bool) -> Any:
    for magic, what in KNOWN_MAGIC.items():
        if data.startswith(magic):
            raise ParseError(f"not a profile: {what}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if data.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] in (b"{", b"["):  # JSON text with a bad byte in it
            where = f"byte {exc.start} of the decompressed JSON" if gzipped else f"byte {exc.start}"
            raise ParseError(f"invalid UTF-8 at {where} (0x{data[exc.start]:02x}): JSON is UTF-8 text") from None
        raise ParseError(
            f"not a profile: binary data, neither JSON nor gzip (starts with {data[:8].hex(' ')})"
        ) from None
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    try:
        return json.loads(text, parse_float=_finite_float, parse_int=_bounded_int, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        # the scanner met the end of the text inside a value or a string: the file was cut
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise ParseError(f"truncated JSON: the text ends at {where} inside a value") from None
        raise ParseError(f"malformed JSON at {where}: {exc.msg}") from None
    except RecursionError:
        raise ParseError("malformed JSON: nested too deeply") from None


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)  # floats are finite: _finite_float


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


class _Sums:
    """Launches and nanoseconds summed per key, never past what the catalog's BIGINT holds."""

    def __init__(self) -> None:
        self.slots: dict[Any, list[int]] = {}
        self.launches = 0
        self.ns = 0

    def add(self, key: Any, count: int, ns: int) -> None:
        slot = self.slots.setdefault(key, [0, 0])
        slot[0] += count
        slot[1] += ns
        self.launches += count
        self.ns += ns
        if self.launches > INT64_MAX or self.ns > INT64_MAX:
            raise ParseError("the launches or their durations sum beyond 2**63 (a count, or nanoseconds): not a run")


# -- torch.profiler (Kineto) Chrome trace ------------------------------------------------------------------


def _torch_launches(doc: dict[str, Any]) -> tuple[list[Launches], tuple[Device, ...], int]:
    events = doc["traceEvents"]
    if not isinstance(events, list):
        raise ParseError(f"torch trace: traceEvents is {_kind(events)}, not a list")
    by_id = _kineto_devices(doc.get("deviceProperties"))
    sums = _Sums()
    for i, event in enumerate(events):
        if not isinstance(event, dict) or event.get("cat") != "kernel":
            continue
        name, dur, args = event.get("name"), event.get("dur"), event.get("args", {})
        if not isinstance(name, str) or not name:
            raise ParseError(f"torch trace: kernel event {i} has no name")
        what = f"torch trace: kernel event {i} ({name[:60]})"
        if not _is_number(dur):
            raise ParseError(f"{what} has no duration")
        if dur < 0:
            raise ParseError(f"{what} has a negative duration (dur {dur} µs)")
        if dur * 1000 > INT64_MAX:  # a float product may be infinite: compared before it is rounded
            raise ParseError(f"{what} has a duration beyond 2**63 ns (dur {dur} µs)")
        ns = round(dur * 1000)  # microseconds (with nanosecond decimals) -> ns
        if not isinstance(args, dict):
            raise ParseError(f"{what}: args is {_kind(args)}")
        device = args.get("device")
        key = (
            name,
            _dim3(args.get("grid"), "grid", what),
            _dim3(args.get("block"), "block", what),
            _int(args.get("registers per thread"), "registers per thread", what),
            _int(args.get("shared memory"), "shared memory", what),
            None if device is None else str(device)[:40],
        )
        sums.add(key, 1, ns)
    if not sums.slots:
        raise ParseError("torch trace without any GPU kernel event (cat: kernel): was CUDA activity recorded?")
    launches: list[Launches] = []
    devices: dict[Device, None] = {}  # an ordered set
    unnamed = 0
    for k, (n, ns) in sums.slots.items():
        gpu = by_id.get(k[5]) if k[5] is not None else None
        if gpu is None:
            unnamed += n
        else:
            devices.setdefault(gpu, None)
        launches.append(Launches(k[0], n, ns, k[1], k[2], k[3], k[4], k[5], gpu.backend if gpu else None))
    return launches, tuple(devices), unnamed


def _kineto_devices(props: Any) -> dict[str, Device]:
    """deviceProperties by device id (as a launch's `device` names it): what the trace says each GPU is."""
    out: dict[str, Device] = {}
    if not isinstance(props, list):
        return out
    for entry in props:
        if not isinstance(entry, dict) or entry.get("id") is None:
            continue
        name = entry.get("name") if isinstance(entry.get("name"), str) else None
        if any(key in entry for key in CUDA_ONLY_KEYS) or (name or "").startswith("NVIDIA"):
            backend = "cuda"
        elif any(key in entry for key in HIP_ONLY_KEYS) or (name or "").startswith("AMD"):
            backend = "hip"
        else:
            continue  # a GPU the trace does not place: no device rather than a guess
        major, minor = entry.get("computeMajor"), entry.get("computeMinor")
        small = all(type(v) is int and 0 <= v < 100 for v in (major, minor))
        # HIP's major.minor (9.4) does not name one processor (gfx940, gfx941, gfx942): only CUDA's is an arch
        arch = f"sm{major}{minor}" if backend == "cuda" and small else None
        warp = entry.get("warpSize")
        warp_size = warp if type(warp) is int and 0 < warp <= 1024 else None
        out[str(entry["id"])[:40]] = Device(backend, arch, warp_size, name[:100] if name else None)
    return out


def _int(value: Any, field: str, what: str) -> int | None:
    """A launch record's figure: None when the trace lacks it, an int32 when it has it, else the trace is refused."""
    if not _is_int(value):
        return None
    if not 0 <= value <= INT32_MAX:
        raise ParseError(f"{what}: {field} {value} is out of range (0 to {INT32_MAX})")
    return value


def _dim3(value: Any, field: str, what: str) -> tuple[int, int, int] | None:
    if isinstance(value, list) and len(value) == 3 and all(_is_int(v) for v in value):
        x, y, z = (_int(v, field, what) for v in value)
        assert x is not None and y is not None and z is not None
        return (x, y, z)
    return None


# -- Proton hatchet ---------------------------------------------------------------------------------------


def _proton_launches(root: dict[str, Any], metadata: Any) -> tuple[list[Launches], tuple[Device, ...], int]:
    by_id = _proton_devices(metadata)
    sums = _Sums()
    for node in _frames(root):
        metrics = node.get("metrics", {})
        if not isinstance(metrics, dict):
            raise ParseError(f"Proton profile: frame {_frame_name(node)[:60]!r} has metrics that are not an object")
        if "device_type" not in metrics:
            continue  # a scope or the root: no GPU time of its own
        name = _frame_name(node)
        what = f"Proton profile: GPU frame {name[:60]!r}"
        count, ns = metrics.get("count"), metrics.get("time (ns)")
        if not _is_int(count) or not _is_number(ns):
            raise ParseError(f"{what} has no count or time (ns)")
        if count < 0:
            raise ParseError(f"{what} has a negative count ({count})")
        if ns < 0:
            raise ParseError(f"{what} has a negative duration (time (ns) {ns})")
        if count > INT64_MAX or round(ns) > INT64_MAX:
            raise ParseError(f"{what}: count {count} or time (ns) {ns} beyond 2**63")
        if count == 0:
            continue
        device, kind = metrics.get("device_id"), metrics.get("device_type")
        key = (name, None if device is None else str(device)[:40], str(kind)[:20] if kind is not None else None)
        sums.add(key, count, round(ns))
    if not sums.slots:
        raise ParseError("Proton profile without any GPU frame (no metrics with a device_type)")
    launches: list[Launches] = []
    devices: dict[Device, None] = {}  # an ordered set
    unnamed = 0
    for (name, device, kind), (n, ns) in sums.slots.items():
        backend = kind.lower() if kind in ("CUDA", "HIP") else None
        gpu = by_id.get((kind, device)) or (Device(backend, None) if backend else None)
        if gpu is None:
            unnamed += n
        else:
            devices.setdefault(gpu, None)
        launches.append(Launches(name, n, ns, device=device, backend=backend))
    return launches, tuple(devices), unnamed


def _proton_devices(metadata: Any) -> dict[tuple[str, str], Device]:
    """Proton's device item by (device_type, device_id): `{"CUDA": {"0": {"arch": "90", …}}}`; CUDA's arch is
    major × 10 + minor, HIP's the first 6 characters of gcnArchName (triton/third_party/proton, Driver/GPU)."""
    out: dict[tuple[str, str], Device] = {}
    if not isinstance(metadata, dict):
        return out
    for kind, backend in (("CUDA", "cuda"), ("HIP", "hip")):
        entries = metadata.get(kind)
        if not isinstance(entries, dict):
            continue
        for device_id, entry in entries.items():
            arch = entry.get("arch") if isinstance(entry, dict) else None
            if not isinstance(arch, str) or not arch or len(arch) > 20:
                arch = None
            elif backend == "cuda":
                arch = f"sm{arch}" if arch.isdigit() else None
            out[(kind, str(device_id)[:40])] = Device(backend, arch)
    return out


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
