"""NVIDIA analysis checked against NVIDIA's own tools on every kernel of every CUDA corpus snapshot.

Oracles, each read here by a small parser of its own (independent of the code under test):
- ``cuobjdump --dump-resource-usage``: registers, stack, static shared, local, constant bank 0;
- ``cuobjdump -lelf``: the architecture name (``add_one.sm_90a.cubin``);
- ``cuobjdump -elf``: the names of every ``.nv.info.<kernel>`` attribute, in order;
- ``cuobjdump -sass``: the SASS opcode counts nvdisasm gives us;
- Triton's JSON (num_warps, target) for the launch bounds recorded in PTX and cubin;
- ``tests/nvidia_fixtures/occupancy_sm90.json``: the CUDA driver's occupancy on a real H100/H200.

The tools come from a Triton wheel (``triton/backends/nvidia/bin``; expected: triton 3.6.0, which
ships cuobjdump/nvdisasm 12.8) found without importing triton, or from ``$KDB_CUDA_BIN``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import struct
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import oracle_cache
import pytest
import sampling
from conftest import CORPUS, compiled_kernels, load_manifest
from elf_oracle import assert_elf64_reads_as_pyelftools

from kdb.analysis.model import LaunchShape
from kdb.analysis.nvidia import occupancy as nv_occupancy
from kdb.analysis.nvidia import tools as nvtools
from kdb.analysis.nvidia.cubin import parse_cubin
from kdb.analysis.nvidia.ptx import GROUPS, parse_ptx
from kdb.errors import ParseError

FIXTURES = Path(__file__).resolve().parent / "nvidia_fixtures"
OCCUPANCY_FIXTURE = FIXTURES / "occupancy_sm90.json"


def _cuda_snapshots() -> list[str]:
    if not (CORPUS / "manifest.json").exists():
        return []
    snapshots = load_manifest()["snapshots"]
    return sorted(name for name, entry in snapshots.items() if entry.get("backend") == "cuda")


def _tool_dirs() -> list[Path]:
    """The oracle's own lookup: $KDB_CUDA_BIN alone when set, else NVIDIA's 13.x tool wheels (kdb[nvidia], in the
    test extra: the only ones that read ABI-8 cubins whole, sm_100/sm_120 and Triton 3.9's sm_90a) followed by the
    installed triton wheel's copies (12.8: cuobjdump 13.5 says "does not contain device code" of some CUDA 12.3
    sm_90a cubins of Triton 2.3.1; each file is read by the first tool that reads it)."""
    env = os.environ.get("KDB_CUDA_BIN")
    if env:
        return [Path(env)] if (Path(env) / "cuobjdump").is_file() else []
    found = []
    for package, sub in (("nvidia", "cu13/bin"), ("triton", "backends/nvidia/bin")):
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            candidate = Path(location) / sub
            if (candidate / "cuobjdump").is_file() and (candidate / "nvdisasm").is_file():
                found.append(candidate)
    return found


def _tool_release(tools: Path) -> tuple[int, int]:
    """(major, minor) of a cuobjdump (`cuobjdump --version`: "... release 13.5, V13.5.37")."""
    out = subprocess.run([str(tools / "cuobjdump"), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


CUDA_SNAPSHOTS = _cuda_snapshots()
TOOL_DIRS = _tool_dirs()
TOOLS = TOOL_DIRS[0] if TOOL_DIRS else None
RELEASES = {d: _tool_release(d) for d in TOOL_DIRS}
TOOLS_RELEASE = RELEASES[TOOLS] if TOOLS else (0, 0)
needs_corpus = pytest.mark.skipif(not CUDA_SNAPSHOTS, reason="corpus/manifest.json lists no CUDA snapshot")
needs_tools = pytest.mark.nvidia_tools  # skipped (or failed in CI) without the tools: tests/conftest.py
per_snapshot = pytest.mark.parametrize("snapshot", CUDA_SNAPSHOTS or ["<no corpus>"])


@dataclass(frozen=True)
class Kernel:
    folder: Path
    name: str

    @property
    def cubin_path(self) -> Path:
        return self.folder / f"{self.name}.cubin"

    @property
    def cubin(self) -> bytes:
        return self.cubin_path.read_bytes()

    @property
    def ptx(self) -> str:
        return (self.folder / f"{self.name}.ptx").read_text()

    @property
    def meta(self) -> dict:
        return json.loads((self.folder / f"{self.name}.json").read_text())

    @property
    def symbol(self) -> str:
        """The kernel's name in the cubin and PTX: the function's name, except in 2.3 (`<function>_<suffix>`)."""
        return self.meta["name"]


@pytest.fixture(scope="session")
def snapshot_kernels(unpack_snapshot):
    found: dict[str, list[Kernel]] = {}

    def kernels(snapshot: str) -> list[Kernel]:
        if snapshot not in found:
            found[snapshot] = [Kernel(p.parent, p.stem) for p in compiled_kernels(unpack_snapshot(snapshot), ".cubin")]
        return found[snapshot]

    return kernels


def _uses_local_memory(cubin) -> bool:
    """The entry kernel has a local or stack frame (ptxas 13 puts spills in the stack: t3.8.0-sm120)."""
    entry = next(k for k in cubin.kernels if k.is_entry)
    return entry.local_size > 0 or entry.stack_size > 0


def sampled(snapshot: str, kernels: list[Kernel], *, by_local_memory: bool = False) -> list[Kernel]:
    """The kernels an oracle check runs on: every kernel in the sweep, a sample of every family otherwise (with
    `by_local_memory`, of every family with and without local memory, as the cubin says: a check that needs
    spilling kernels gets them)."""
    trait = (lambda k: _uses_local_memory(parse_cubin(k.cubin))) if by_local_memory else None
    return sampling.kernels(kernels, snapshot, folder=lambda k: k.folder, name=lambda k: k.name, trait=trait)


# ---- independent readers of cuobjdump output ---------------------------------------------------------------

# " Function add_one:"  then  "  REG:16 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:928 TEXTURE:0 SURFACE:0 SAMPLER:0"
RESOURCE_RE = re.compile(
    r"^\s*Function (?P<name>\S+):\s*\n\s*REG:(?P<reg>\d+) STACK:(?P<stack>\d+) SHARED:(?P<shared>\d+) "
    r"LOCAL:(?P<local>\d+) CONSTANT\[0\]:(?P<const0>\d+)",
    re.MULTILINE,
)
# "ELF file    1: add_one.sm_90a.cubin"
LELF_RE = re.compile(r"^ELF file\s+\d+:\s+\S+\.(?P<arch>sm_\w+)\.cubin$", re.MULTILINE)
# "\tAttribute:\tEIATTR_KPARAM_INFO"
ATTRIBUTE_RE = re.compile(r"^\s+Attribute:\s+(EIATTR_\w+)")
# "        /*00d0*/              @!P6 LDG.E R5, desc[UR4][R2.64] ;   /* 0x... */"
SASS_LINE_RE = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?P<text>[^;]*);")


def _run(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout


def cuobjdump_answer(*args: str) -> tuple[str, tuple[int, int]]:
    """The output of the first cuobjdump of TOOL_DIRS that reads the file, and that tool's release."""
    errors = []
    for d in TOOL_DIRS:
        proc = oracle_cache.run([str(d / "cuobjdump"), *args], timeout=120)
        if proc.returncode == 0:
            return proc.stdout, RELEASES[d]
        errors.append(f"{d}: {proc.stderr.strip()}")
    raise AssertionError(f"no cuobjdump reads {args}: {errors}")


def cuobjdump(*args: str) -> str:
    return cuobjdump_answer(*args)[0]


def resource_usage(path: Path) -> dict[str, dict[str, int]]:
    return {
        m["name"]: {k: int(v) for k, v in m.groupdict().items() if k != "name"}
        for m in RESOURCE_RE.finditer(cuobjdump("--dump-resource-usage", str(path)))
    }


def nv_info_names(path: Path, kernel: str) -> list[str]:
    """The attribute names of .nv.info.<kernel>, in order; "unknown Attribute" where cuobjdump 13 says so
    (cuobjdump 12.8 leaves such records out instead)."""
    names: list[str] = []
    inside = False
    for line in cuobjdump("-elf", str(path)).splitlines():
        if line and not line[0].isspace():
            inside = line.strip() == f".nv.info.{kernel}"
        elif inside and (match := ATTRIBUTE_RE.match(line)):
            names.append(match.group(1))
        elif inside and line.strip() == "Attribute:\tunknown Attribute":
            names.append("unknown Attribute")
    return names


# "\tCUDA Virtual SM: sm_100", "\tTool Command Line Arguments: -v  -lineinfo  -arch sm_100a " (the .note.nv.* notes)
NOTE_FIELD_RE = re.compile(r"^\t(CUDA Virtual SM|Tool Name|Tool Command Line Arguments):[ \t]*(.*?)\s*$", re.MULTILINE)


def cuobjdump_notes(path: Path) -> dict[str, str]:
    return dict(NOTE_FIELD_RE.findall(cuobjdump("-elf", str(path))))


def nv_compat_names(path: Path) -> list[tuple[str, str]]:
    """(attribute name, value) of the .nv.compat records as `cuobjdump -elf` prints them."""
    names: list[tuple[str, str]] = []
    inside = False
    lines = cuobjdump("-elf", str(path)).splitlines()
    for i, line in enumerate(lines):
        if line and not line[0].isspace():
            inside = line.strip() == ".nv.compat"
        elif inside and line.startswith("\tAttribute:"):
            value = lines[i + 2].split(":", 1)[1].strip() if lines[i + 2].startswith("\tValue:") else ""
            names.append((line.split(":", 1)[1].strip(), value))
    return names


def cuobjdump_sass(path: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in cuobjdump("-sass", str(path)).splitlines():
        if match := SASS_LINE_RE.match(line):
            words = match.group("text").split()
            if words and words[0].startswith("@"):
                words = words[1:]
            counts[words[0]] += 1
    return counts


# Tensor-core SASS opcodes (sm80 mma.sync -> HMMA/IMMA, sm90 wgmma -> HGMMA/IGMMA/QGMMA, sm100 tcgen05.mma ->
# UTCHMMA/UTCQMMA (cuobjdump 13.5 on the t3.9.0-sm100 corpus), sm120 fp8 mma.sync -> QMMA).
MMA_SASS = {"HMMA", "HGMMA", "IMMA", "IGMMA", "QGMMA", "BMMA", "DMMA", "UTCHMMA", "UTCQMMA", "UTCIMMA", "QMMA"}


# ---- tests against cuobjdump ---------------------------------------------------------------------------------


@needs_corpus
@needs_tools
@per_snapshot
def test_cubin_resources_match_cuobjdump(snapshot: str, snapshot_kernels) -> None:
    entry = load_manifest()["snapshots"][snapshot]
    kernels = snapshot_kernels(snapshot)
    assert len(kernels) == entry["kernel_count"]
    for kernel in sampled(snapshot, kernels):
        cubin = parse_cubin(kernel.cubin)
        oracle = resource_usage(kernel.cubin_path)
        assert [k.name for k in cubin.kernels] == sorted(oracle) == [kernel.symbol], kernel.folder.name
        parsed, want = cubin.kernels[0], oracle[kernel.symbol]
        got = {
            "reg": parsed.registers,
            "stack": parsed.stack_size,
            "shared": parsed.static_shared,
            "local": parsed.local_size,
            "const0": parsed.const0_size,
        }
        assert got == want, kernel.folder.name
        assert parsed.is_entry
        lelf, release = cuobjdump_answer("-lelf", str(kernel.cubin_path))
        (arch,) = LELF_RE.findall(lelf)
        if cubin.abi_version >= 8 and release < (13, 0):
            # cuobjdump 12.x reads ABI-8 cubins (ptxas 13, Triton 3.9) without their .nv.compat: it drops the `a`
            assert cubin.arch_name.removesuffix("a") == arch, kernel.folder.name
        else:
            assert cubin.arch_name == arch, kernel.folder.name
        target = kernel.meta["target"]  # 2.3: ["cuda", 80]; 3.x: {"backend": "cuda", "arch": 80, ...}
        json_arch = target["arch"] if isinstance(target, dict) else target[-1]
        assert cubin.arch == json_arch == int(str(entry["target"]).removeprefix("sm"))
        # Only Hopper and Blackwell code is arch-specific (sm_90a: wgmma/TMA; sm_100a: tcgen05, sm_120a)
        assert not cubin.arch_specific or cubin.arch >= 90
        notes = cuobjdump_notes(kernel.cubin_path)
        if "CUDA Virtual SM" in notes:  # ABI 8: the .note.nv.cuinfo note (e_flags leave the virtual SM empty)
            assert f"sm_{cubin.virtual_arch}" == notes["CUDA Virtual SM"], kernel.folder.name
            # the assembler's own command line names the target exactly as kdb does
            assert notes["Tool Command Line Arguments"].split("-arch ")[1].split()[0] == cubin.arch_name
            assert (cubin.tool, cubin.tool_arguments) == (notes["Tool Name"], notes["Tool Command Line Arguments"])
        else:
            assert cubin.virtual_arch in (cubin.arch, None) and cubin.tool is None
        # the launch bound: EIATTR_REQNTID from 3.2, EIATTR_MAX_THREADS (PTX .maxntid) in 2.3-3.1
        max_threads = next((a.payload for a in parsed.attributes if a.name == "EIATTR_MAX_THREADS"), None)
        bound = parsed.req_threads or (struct.unpack("<III", max_threads) if max_threads else None)
        assert bound == (kernel.meta["num_warps"] * 32, 1, 1)


@needs_corpus
@needs_tools
@per_snapshot
def test_nv_info_attributes_named_like_cuobjdump(snapshot: str, snapshot_kernels) -> None:
    for kernel in sampled(snapshot, snapshot_kernels(snapshot)):
        parsed = parse_cubin(kernel.cubin).kernels[0]
        oracle = nv_info_names(kernel.cubin_path, kernel.symbol)
        if len(oracle) == len(parsed.attributes):
            # cuobjdump 13 lists every record: where it says "unknown Attribute", kdb has no name either, or the
            # name cuobjdump 12.8 gave it (0x2a, 0x30, 0x35, 0x47: the SW*_WAR records of CUDA 12.x ptxas)
            for attr, name in zip(parsed.attributes, oracle, strict=True):
                if name == "unknown Attribute":
                    assert attr.name.startswith("EIATTR_UNKNOWN_") or attr.attr in (0x2A, 0x30, 0x35, 0x47)
                else:
                    assert attr.name == name, kernel.folder.name
        else:
            # cuobjdump 12.8 leaves out attribute codes it does not know (newer ptxas releases write them)
            known = [a.name for a in parsed.attributes if not a.name.startswith("EIATTR_UNKNOWN_")]
            assert known == [n for n in oracle if n != "unknown Attribute"], kernel.folder.name


@needs_corpus
@needs_tools
@per_snapshot
def test_nv_compat_named_like_cuobjdump(snapshot: str, snapshot_kernels) -> None:
    """ABI-8 cubins: the .nv.compat records (where the `a` of sm_100a lives) as cuobjdump 13 reads them."""
    if TOOLS_RELEASE < (13, 0):
        pytest.skip("cuobjdump 12.x does not print .nv.compat: pip install 'kdb[nvidia]'")
    seen = 0
    kernels = sampled(snapshot, snapshot_kernels(snapshot))
    for kernel in kernels:
        cubin = parse_cubin(kernel.cubin)
        oracle = nv_compat_names(kernel.cubin_path)
        assert bool(cubin.compat) == bool(oracle) == (cubin.abi_version >= 8), kernel.folder.name
        for attr, (name, value) in zip(cubin.compat, oracle, strict=True):
            if attr.name.startswith("EICOMPAT_UNKNOWN_"):
                assert name == "unknown Attribute"
                continue
            assert attr.name == name, kernel.folder.name
            if attr.fmt == 2:  # BVAL, printed as 0x..
                assert attr.value == int(value, 16), (kernel.folder.name, name)
        accelerator = [v for n, v in oracle if n == "EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET"]
        if accelerator:
            assert cubin.arch_specific == (int(accelerator[0], 16) == 1)
        seen += bool(oracle)
    if any(parse_cubin(k.cubin).abi_version >= 8 for k in kernels[:1]):
        assert seen == len(kernels)


@needs_corpus
@needs_tools
@per_snapshot
def test_sass_counts_match_cuobjdump(snapshot: str, snapshot_kernels, monkeypatch) -> None:
    monkeypatch.setenv("KDB_CUDA_BIN", str(TOOLS))
    kernels = sampled(snapshot, snapshot_kernels(snapshot))
    # Both tools are single-threaded subprocesses; run kernels side by side.
    with ThreadPoolExecutor(max_workers=8) as pool:
        ours = list(pool.map(lambda k: nvtools.sass_by_kernel(k.cubin), kernels))
        theirs = list(pool.map(lambda k: cuobjdump_sass(k.cubin_path), kernels))
    with_mma = 0
    for kernel, per_kernel, oracle in zip(kernels, ours, theirs, strict=False):
        assert per_kernel is not None and list(per_kernel) == [kernel.symbol]
        counts = per_kernel[kernel.symbol]
        assert sum(counts.values()) > 0
        assert counts == oracle, kernel.folder.name
        bases = {nvtools.base_opcode(op) for op in counts}
        assert "EXIT" in bases
        # PTX mma/wgmma exist exactly when the SASS has tensor-core instructions.
        has_tensor = bool(MMA_SASS & bases)
        assert (parse_ptx(kernel.ptx).functions[0].groups["matrix"] > 0) == has_tensor, kernel.folder.name
        with_mma += has_tensor
    assert with_mma > 0
    # summed over the cubin's kernels (one here), the per-kernel counts are the cubin's counts
    assert sum((nvtools.sass_by_kernel(kernels[0].cubin) or {}).values(), Counter()) == ours[0][kernels[0].symbol]


# ---- PTX ----------------------------------------------------------------------------------------------------


@needs_corpus
@per_snapshot
def test_ptx_counts(snapshot: str, snapshot_kernels) -> None:
    for kernel in sampled(snapshot, snapshot_kernels(snapshot)):
        meta = kernel.meta
        ptx = parse_ptx(kernel.ptx)
        cubin = parse_cubin(kernel.cubin)
        # Triton 3.2+ writes sm_90a for Hopper (its wgmma features); the cubin's arch field says sm_90
        assert ptx.target.removesuffix("a") == cubin.arch_name.removesuffix("a")
        assert [f.name for f in ptx.functions if f.is_entry] == [meta["name"]]
        fn = ptx.functions[0]
        assert fn.total > 0 and fn.groups["other"] > 0
        assert fn.total == sum(fn.opcodes.values()) == sum(fn.base_opcodes.values()) == sum(fn.groups.values())
        assert fn.total == sum(fn.lines.values())
        assert set(fn.groups) == set(GROUPS)
        # Triton's launch bound, num_warps*32 threads: `.maxntid 128, 1, 1` up to 3.1, `.reqntid 128, 1, 1` in 3.2,
        # `.reqntid 128` from 3.3 (the cubin's EIATTR_REQNTID is checked above)
        bound = fn.reqntid or fn.maxntid
        assert bound is not None and bound[0] == meta["num_warps"] * 32 and set(bound[1:]) <= {1}
        # Every instruction is attributed to the kernel's Python file, or to line 0 / no .loc yet.
        files = {path for path, _, _ in fn.lines}
        assert files and all(p == "" or p.endswith(".py") for p in files)
        assert ptx.files and all(p.endswith(".py") for p in ptx.files.values())
        assert fn.reg_decls.get(".b32", 0) > 0


@needs_corpus
@per_snapshot
def test_elf_records_match_pyelftools(snapshot: str, snapshot_kernels) -> None:
    """kdb.analysis.elf64, the ELF reader cubins and code objects share, reads every cubin's header, section
    headers, section bytes and symbols exactly as pyelftools, an independent ELF reader, does."""
    for kernel in snapshot_kernels(snapshot):
        assert_elf64_reads_as_pyelftools(kernel.cubin, kernel.folder.name)


# ---- malformed input ------------------------------------------------------------------------------------------


@needs_corpus
@per_snapshot
def test_truncated_and_corrupted_cubins_raise_parse_error(snapshot: str, snapshot_kernels) -> None:
    for kernel in snapshot_kernels(snapshot)[:8]:
        data = kernel.cubin
        for cut in sorted({0, 1, 16, 63, 64, len(data) // 3, len(data) // 2, len(data) - 64, len(data) - 1}):
            with pytest.raises(ParseError):
                parse_cubin(data[:cut])
        corrupt = []
        for offset, value in ((0, 0x00), (4, 0x01), (18, 0x3E), (47, 0x7F), (61, 0xFF)):
            # magic, ELFCLASS32, e_machine x86-64, e_shoff far past the end, e_shnum huge
            flipped = bytearray(data)
            flipped[offset] = value
            corrupt.append(bytes(flipped))
        info = _section_offset(data, f".nv.info.{kernel.symbol}")
        flipped = bytearray(data)
        flipped[info] = 0x07  # an EIFMT that does not exist
        corrupt.append(bytes(flipped))
        for blob in corrupt:
            with pytest.raises(ParseError):
                parse_cubin(blob)


def _section_offset(data: bytes, name: str) -> int:
    """File offset of a section, read with the standard library only."""
    (shoff,) = struct.unpack_from("<Q", data, 40)
    shnum, shstrndx = struct.unpack_from("<HH", data, 60)
    (str_off,) = struct.unpack_from("<Q", data, shoff + shstrndx * 64 + 24)
    for i in range(shnum):
        base = shoff + i * 64
        (name_off,) = struct.unpack_from("<I", data, base)
        end = data.index(b"\0", str_off + name_off)
        if data[str_off + name_off : end].decode() == name:
            return struct.unpack_from("<Q", data, base + 24)[0]
    raise AssertionError(f"no section {name}")


@needs_corpus
@per_snapshot
def test_truncated_ptx_raises_parse_error(snapshot: str, snapshot_kernels) -> None:
    for kernel in snapshot_kernels(snapshot)[:8]:
        text = kernel.ptx
        body = text.index("{", text.index(".entry"))
        for cut in (0, body + 1, len(text) // 2):
            with pytest.raises(ParseError):
                parse_ptx(text[:cut])
        with pytest.raises(ParseError):
            parse_ptx(text.encode("utf-8") + b"\xff\xfe")


# ---- occupancy ---------------------------------------------------------------------------------------------


def test_occupancy_limiters_on_table_values() -> None:
    # 16 regs, 4 warps: 64 warps/SM on sm90, 48 on sm86 (Programming Guide table).
    assert nv_occupancy.occupancy(LaunchShape("sm_90a", 4, 16, 0, 0)) == (64, 16, "warps")
    assert nv_occupancy.occupancy(LaunchShape(86, 4, 16, 0, 0)) == (48, 12, "warps")
    # 1 warp per block: the resident-block limit binds (32 on sm90, 16 on sm86, 24 on sm89).
    assert nv_occupancy.occupancy(LaunchShape(90, 1, 16))[1:] == (32, "blocks")
    assert nv_occupancy.occupancy(LaunchShape(86, 1, 16))[1:] == (16, "blocks")
    assert nv_occupancy.occupancy(LaunchShape(89, 1, 16))[1:] == (24, "blocks")
    # Over the opt-in maximum per block (227 KiB on sm90, 163 KiB on sm80): no block fits.
    assert nv_occupancy.occupancy(LaunchShape(90, 4, 32, 0, 227 * 1024 + 1)) == (0, 0, "shared")
    assert nv_occupancy.occupancy(LaunchShape(80, 4, 32, 0, 163 * 1024))[1] == 1
    # sm_120 (CUDA C++ Programming Guide: 99 KB opt-in per block) cannot launch a block asking for more.
    assert nv_occupancy.occupancy(LaunchShape("sm_120a", 4, 32, 0, 99 * 1024 + 1)) == (0, 0, "shared")
    assert nv_occupancy.occupancy(LaunchShape("sm_100a", 4, 32, 0, 99 * 1024 + 1))[1] == 2
    # Above the calculator's per-thread register limit (256; ptxas writes at most 255) no block launches.
    assert nv_occupancy.occupancy(LaunchShape(90, 4, 257, 0, 0)) == (0, 0, "registers")


def _occupancy_fixture() -> dict | None:
    return json.loads(OCCUPANCY_FIXTURE.read_text()) if OCCUPANCY_FIXTURE.exists() else None


@needs_corpus
def test_occupancy_matches_driver_measurement(snapshot_kernels) -> None:
    fixture = _occupancy_fixture()
    if fixture is None:
        pytest.skip(
            f"{OCCUPANCY_FIXTURE.relative_to(CORPUS.parent)} absent: run "
            "tests/nvidia_fixtures/measure_occupancy.py on a GPU machine to create it"
        )
    if fixture["snapshot"] not in CUDA_SNAPSHOTS:
        pytest.skip(f"occupancy fixture measured on snapshot {fixture['snapshot']}, not in the corpus")
    # The table's per-SM figures against the device that answered.
    lim = nv_occupancy.limits_for(fixture["arch"])
    dev = fixture["device_attributes"]
    assert (dev["compute_capability_major"] * 10 + dev["compute_capability_minor"]) == lim.arch
    assert dev["max_threads_per_multiprocessor"] == lim.max_warps_per_sm * 32
    assert dev["max_blocks_per_multiprocessor"] == lim.max_blocks_per_sm
    assert dev["max_registers_per_multiprocessor"] == lim.registers_per_sm
    assert dev["max_registers_per_block"] == lim.registers_per_block
    assert dev["max_shared_memory_per_multiprocessor"] == lim.shared_per_sm
    assert dev["max_shared_memory_per_block_optin"] == lim.shared_per_block_optin
    assert dev["reserved_shared_memory_per_block"] == lim.shared_reserved_per_block
    by_folder = {k.folder.name: k for k in snapshot_kernels(fixture["snapshot"])}
    assert fixture["kernels"]
    mismatches = []
    for row in fixture["kernels"]:
        kernel = by_folder[row["cache_key"]]
        parsed = parse_cubin(kernel.cubin).kernels[0]
        assert parsed.name == row["kernel"]
        assert parsed.registers == row["registers"]  # the driver's CU_FUNC_ATTRIBUTE_NUM_REGS
        # The cubin's `.nv.shared.<kernel>` (cuobjdump's SHARED, e.g. 1024 on sm90) may exceed what the
        # driver reports as static (0): the model takes the cubin's figure, the driver decides occupancy.
        assert parsed.static_shared >= row["static_shared"]
        warps, blocks, _ = nv_occupancy.occupancy(
            LaunchShape(fixture["arch"], row["num_warps"], parsed.registers, parsed.static_shared, row["shared"])
        )
        if (warps, blocks) != (row["warps_per_sm"], row["blocks_per_sm"]):
            mismatches.append(
                (row["cache_key"], row["kernel"], (warps, blocks), (row["warps_per_sm"], row["blocks_per_sm"]))
            )
    assert not mismatches, f"{len(mismatches)} of {len(fixture['kernels'])} differ from the driver: {mismatches}"


# ---- the catalog's figures, not only the parser's ------------------------------------------------------------


@needs_corpus
@needs_tools
@per_snapshot
def test_catalog_columns_match_cuobjdump_and_the_driver(snapshot: str, unpack_snapshot, capsys) -> None:
    """What users query (`kernels` view, `kernel_analysis.co_arch`) against cuobjdump, and local memory against
    the driver's own CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES where the GPU fixture measured the kernel. The only
    problem an ingest of the corpus may record is an occupancy kdb cannot know (tests/test_nvidia_occupancy.py
    checks each against the calculator)."""
    import corpus_cache
    from conftest import archive_of
    from helpers import kdb

    cache = unpack_snapshot(snapshot)
    # `kdb ingest cache --tag SNAPSHOT --no-sass`, cached; read-only here
    home = corpus_cache.ingested_home([(snapshot, archive_of(snapshot))], sass=False)
    problems = kdb(capsys, home, "sql", "SELECT cache_key, stage, reason FROM problems", "--format", "json").json()
    assert all(p["stage"] == "occupancy" and p["reason"] for p in problems), problems
    q = (
        "SELECT k.cache_key, k.name, k.registers, k.stack_bytes, k.static_shared, k.local_bytes, k.occupancy_unit, "
        "a.co_arch FROM kernels k JOIN kernel_analysis a USING (folder_digest)"
    )
    rows = kdb(capsys, home, "sql", q, "--format", "json").json()
    assert len(rows) == load_manifest()["snapshots"][snapshot]["kernel_count"]
    fixture = _occupancy_fixture()
    driver_local = {
        r["cache_key"]: r["local_bytes"]
        for r in (fixture or {}).get("kernels", [])
        if fixture and fixture["snapshot"] == snapshot
    }
    for row in sampling.catalog_rows(rows, snapshot):
        folder = cache / row["cache_key"]
        symbol = json.loads((folder / f"{row['name']}.json").read_text())["name"]  # 2.3: <function>_<suffix>
        want = resource_usage(folder / f"{row['name']}.cubin")[symbol]
        assert (row["registers"], row["stack_bytes"], row["static_shared"]) == (
            want["reg"],
            want["stack"],
            want["shared"],
        ), row["cache_key"]
        assert row["occupancy_unit"] == "warps/SM"
        # the target as the compiler named it (cuobjdump -lelf: add_one.sm_100a.cubin; the first tool that reads it)
        lelf, release = cuobjdump_answer("-lelf", str(folder / f"{row['name']}.cubin"))
        (named,) = LELF_RE.findall(lelf)
        if release >= (13, 0):
            assert named == row["co_arch"], row["cache_key"]
        else:  # cuobjdump 12.x drops the `a` of ABI-8 cubins (test_cubin_resources_match_cuobjdump)
            assert named in (row["co_arch"], row["co_arch"].removesuffix("a")), row["cache_key"]
        if row["cache_key"] in driver_local:
            assert row["local_bytes"] == driver_local[row["cache_key"]], row["cache_key"]
    assert not fixture or fixture["snapshot"] != snapshot or driver_local


@needs_corpus
@needs_tools
@per_snapshot
def test_batched_sass_equals_per_cubin_nvdisasm(snapshot: str, snapshot_kernels, monkeypatch) -> None:
    """Many kernels' raw code disassembled by one `nvdisasm -b SMxy` process: per kernel, the same mnemonic
    counts as one `nvdisasm -c` of its own cubin (the ingest path; tests/…/h100 caches checked by hand)."""
    monkeypatch.setenv("KDB_CUDA_BIN", str(TOOLS))
    kernels = sampled(snapshot, snapshot_kernels(snapshot))
    cubins = [parse_cubin(k.cubin) for k in kernels]
    items = [
        (c.raw_arch, next(x for x in c.kernels if x.name == k.symbol).code)
        for c, k in zip(cubins, kernels, strict=True)
    ]
    batched = nvtools.sass_of_code(items)
    with ThreadPoolExecutor(max_workers=4) as pool:
        single = list(pool.map(lambda k: (nvtools.sass_by_kernel(k.cubin) or {}).get(k.symbol), kernels))
    assert len(batched) == len(kernels) > 0
    for kernel, b, s in zip(kernels, batched, single, strict=True):
        assert b.counts is not None and b.counts == s, kernel.folder.name
    # the same, one nvdisasm per chunk of code (a limit of the largest kernel: several kernels a chunk,
    # several chunks an architecture)
    monkeypatch.setattr(nvtools, "SASS_CHUNK_BYTES", max(len(code) for _, code in items))
    per_arch = Counter(arch for arch, _ in items)
    assert any(sum(len(code) for a, code in items if a == arch) > nvtools.SASS_CHUNK_BYTES for arch in per_arch)
    assert [r.counts for r in nvtools.sass_of_code(items)] == [b.counts for b in batched]


@needs_tools
def test_batched_sass_isolates_a_bad_kernel_and_unknown_arch(monkeypatch) -> None:
    monkeypatch.setenv("KDB_CUDA_BIN", str(TOOLS))
    good = bytes.fromhex("4d790000000000000000800300ea0f00")  # sm_90 EXIT
    out = nvtools.sass_of_code([("SM90", good), ("SM90", good), ("SM1", good)])
    assert [r.counts for r in out[:2]] == [Counter({"EXIT": 1})] * 2
    assert out[2].counts is None and out[2].reason is not None and "SM1" in out[2].reason
