"""kdb's NVIDIA occupancy against NVIDIA's occupancy calculator itself, on every architecture of its table.

The oracle is ``cuda_occupancy.h`` from the ``nvidia-cuda-runtime`` wheel (the test extra installs it), compiled
on its own with the host C++ compiler (it is header-only and includes nothing from CUDA). A small program
reads sweep points and answers ``cudaOccMaxActiveBlocksPerMultiprocessor`` for each, with a
``cudaOccDeviceProp`` filled from kdb's own per-SM limits; kdb must give the same active blocks, and a
limiter that is one of the calculator's limiting factors, at every point.

The function is set up as Triton's launcher sets it up (max dynamic shared raised to the opt-in maximum
less the static size; one block barrier, as ``cudaOccFuncAttributes`` takes for a ``cudaFuncAttributes``).
kdb's one deliberate difference: it reads the cubin's ``.nv.shared.<kernel>`` size, which on Triton's
sm90 cubins is the driver's 1 KiB reservation itself (the driver, measured on an H200, reports 0 static
bytes: tests/nvidia_fixtures/occupancy_sm90.json). So a cubin static size S is compared with the
calculator's static size S - reservation, and a static size of 0 or of exactly the reservation with 0.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sampling

from kdb.analysis.model import LaunchShape
from kdb.analysis.nvidia import occupancy as nv
from kdb.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = ROOT / "scripts" / "gen_nvidia_occupancy.py"
CXX = shutil.which("g++") or shutil.which("c++")


def _nvidia_file(sub: str) -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / sub).is_file():
            return Path(location) / sub
    return None


OCC_HEADER = _nvidia_file("cu13/include/cuda_occupancy.h")
TRAITS_HEADER = _nvidia_file("cu13/include/cccl/cuda/__device/arch_traits.h")
needs_calculator = pytest.mark.skipif(
    OCC_HEADER is None or CXX is None,
    reason="needs g++ and cuda_occupancy.h: pip install 'nvidia-cuda-runtime>=13' (in kdb's test extra)",
)

SWEEP_PROGRAM = r"""
#include "cuda_occupancy.h"
#include <cstdio>
#include <vector>

int main() {
    int n = 0;
    if (std::scanf("%d", &n) != 1) return 2;
    std::vector<cudaOccDeviceProp> props(n);
    for (auto &p : props) {
        if (std::scanf("%d %d %d %d %d %d %d %zu %zu %zu %zu", &p.computeMajor, &p.computeMinor,
                       &p.maxThreadsPerBlock, &p.maxThreadsPerMultiprocessor, &p.regsPerBlock,
                       &p.regsPerMultiprocessor, &p.warpSize, &p.sharedMemPerBlock,
                       &p.sharedMemPerMultiprocessor, &p.sharedMemPerBlockOptin,
                       &p.reservedSharedMemPerBlock) != 11) return 2;
        p.numSms = 1;
    }
    int arch, warps, regs, barriers, vres;
    size_t stat, dyn;
    while (std::scanf("%d %d %d %zu %zu %d %d", &arch, &warps, &regs, &stat, &dyn, &barriers, &vres) == 7) {
        const cudaOccDeviceProp &p = props[arch];
        cudaOccFuncAttributes a;
        a.maxThreadsPerBlock = p.maxThreadsPerBlock;
        a.numRegs = regs;
        a.sharedSizeBytes = stat;
        a.partitionedGCConfig = PARTITIONED_GC_OFF;
        a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
        a.maxDynamicSharedSizeBytes = p.sharedMemPerBlockOptin - stat;
        a.numBlockBarriers = barriers;
        a.virtualResourceCount = vres;
        cudaOccDeviceState state;
        cudaOccResult r;
        cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &state, warps * p.warpSize, dyn);
        if (e != CUDA_OCC_SUCCESS) std::printf("E%d\n", (int)e);
        else std::printf("%d %u\n", r.activeBlocksPerMultiprocessor, r.limitingFactors);
    }
    return 0;
}
"""

FACTOR_BITS = {
    "warps": 0x01,
    "registers": 0x02,
    "shared": 0x04,
    "blocks": 0x08,
    "barriers": 0x10,
    "virtual_resources": 0x20,
}


@pytest.fixture(scope="module")
def calculator():
    """A function [(arch, warps, regs, calculator static, dynamic, barriers, vres)] -> [(blocks, factors)]."""
    assert OCC_HEADER is not None and CXX is not None
    import corpus_cache

    def build(tree: Path) -> None:
        # The header alone in its folder: it must compile without anything else from CUDA.
        tree.mkdir(parents=True)
        shutil.copy(OCC_HEADER, tree / "cuda_occupancy.h")
        (tree / "sweep.cpp").write_text(SWEEP_PROGRAM)
        flags = ["-std=c++11", "-O2", "-Wall", "-Werror"]
        subprocess.run([CXX, *flags, str(tree / "sweep.cpp"), "-o", str(tree / "sweep")], check=True)

    # compiled once per header, program and compiler (the test cache), never again for an unchanged input
    compiler = subprocess.run([CXX, "--version"], capture_output=True, text=True, check=True).stdout
    parts = {
        "header": corpus_cache.file_sha256(OCC_HEADER),
        "program": hashlib.sha256(SWEEP_PROGRAM.encode()).hexdigest(),
        "compiler": [str(Path(CXX).resolve()), compiler],
    }
    exe = corpus_cache.cached("occupancy-calculator", parts, build) / "sweep"
    table = nv.table()["architectures"]
    archs = nv.known_architectures()
    header = [str(len(archs))]
    for arch in archs:
        lim, cc = nv.limits_for(arch), table[str(arch)]["device"]
        header.append(
            " ".join(
                str(v)
                for v in (
                    cc["compute_capability_major"],
                    cc["compute_capability_minor"],
                    lim.max_threads_per_block,
                    lim.max_warps_per_sm * lim.warp_size,
                    lim.registers_per_block,
                    lim.registers_per_sm,
                    lim.warp_size,
                    lim.shared_per_block_default,
                    lim.shared_per_sm,
                    lim.shared_per_block_optin,
                    lim.shared_reserved_per_block,
                )
            )
        )

    def run(points: list[tuple[int, ...]]) -> list[tuple[int, int]]:
        index = {a: i for i, a in enumerate(archs)}
        lines = header + [" ".join(map(str, (index[p[0]], *p[1:]))) for p in points]
        out = subprocess.run(
            [str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
        ).stdout.split("\n")
        results = []
        for line in out[: len(points)]:
            assert not line.startswith("E"), f"the calculator refused a point: {line}"
            blocks, factors = line.split()
            results.append((int(blocks), int(factors)))
        assert len(results) == len(points)
        return results

    return run


def _sweep(arch: int) -> list[tuple[int, int, int, int, int, int, int]]:
    """(arch, warps, registers, calculator static, dynamic, barriers, virtual resources) for one architecture."""
    lim = nv.limits_for(arch)
    optin, unit = lim.shared_per_block_optin, lim.shared_alloc_unit
    points = []
    # registers: every count 0..257 (the calculator allows 256) at every block size, no shared memory
    for warps in range(1, 33):
        for regs in range(258):
            points.append((arch, warps, regs, 0, 0, 1, 0))
    # dynamic shared: every allocation step to past the opt-in maximum, and one byte past each step
    warp_counts, reg_counts = (1, 2, 4, 8, 16, 32), (16, 96, 168)
    for dyn in range(0, optin + 4 * unit, unit):
        for d in (dyn, dyn + 1):
            for i, warps in enumerate(warp_counts):
                points.append((arch, warps, reg_counts[(dyn // unit + i) % 3], 0, d, 1, 0))
    # the whole cube, coarsely: warps 1..32, registers 16..255, static and dynamic up to the opt-in maximum
    statics = (0, 512, 4096, 40 * 1024)
    dynamics = sorted({0, 1, 1024, 8 * 1024, 48 * 1024, optin // 3, optin // 2, optin - 4096, optin, optin + 1})
    for warps in range(1, 33):
        for regs in (*range(16, 256, 24), 255):
            for stat in statics:
                for dyn in dynamics:
                    points.append((arch, warps, regs, stat, dyn, 1, 0))
    # block barriers and virtual resources (the calculator's inputs beyond cudaFuncAttributes)
    for barriers in range(0, 9):
        for vres in (0, 1, 3, 8, 64, 200):
            for warps in (1, 4, 32):
                points.append((arch, warps, 32, 0, 1024, barriers, vres))
    return points


def _kdb_static(lim: nv.SmLimits, calculator_static: int) -> list[int]:
    """The cubin static sizes kdb reads for a kernel whose driver-side static size is CALCULATOR_STATIC."""
    if calculator_static == 0:
        return [0, lim.shared_reserved_per_block] if lim.shared_reserved_per_block else [0]
    return [calculator_static + lim.shared_reserved_per_block]


@needs_calculator
@pytest.mark.parametrize("arch", nv.known_architectures())
def test_occupancy_equals_nvidia_calculator(arch: int, calculator) -> None:
    lim = nv.limits_for(arch)
    points = _sweep(arch)
    answers = calculator(points)
    mismatches = []
    limiters = {}
    for point, (blocks, factors) in zip(points, answers, strict=True):
        _, warps, regs, stat, dyn, barriers, vres = point
        for static in _kdb_static(lim, stat):
            w, b, limiter = nv.occupancy(LaunchShape(arch, warps, regs, static, dyn), nv.FuncAttributes(barriers, vres))
            if b != blocks or w != blocks * warps or not factors & FACTOR_BITS[limiter]:
                mismatches.append((point, static, (b, limiter), (blocks, factors)))
            limiters[limiter] = limiters.get(limiter, 0) + 1
    assert not mismatches, f"sm_{arch}: {len(mismatches)} of {len(points)} points differ: {mismatches[:10]}"
    # the sweep reaches every limit, launchable or not
    assert {"registers", "shared", "warps", "blocks"} <= set(limiters), limiters
    assert any(b == 0 for b, _ in answers) and any(b > 1 for b, _ in answers)
    if lim.barrier_limit_applies:
        assert "barriers" in limiters
    if lim.max_virtual_resources:
        assert "virtual_resources" in limiters


@needs_calculator
def test_sweep_can_fail(calculator) -> None:
    """The comparison is not vacuous: a table one register-allocation step off disagrees with the calculator."""
    arch = 90
    points = [(arch, w, r, 0, 0, 1, 0) for w in (4, 8) for r in range(16, 256, 8)]
    answers = calculator(points)
    lim = nv.limits_for(arch)
    wrong = nv.SmLimits(**{**lim.__dict__, "register_alloc_unit": lim.register_alloc_unit * 2})
    nv._all_limits()[arch] = wrong
    try:
        differ = sum(
            nv.occupancy(LaunchShape(arch, w, r))[1] != b for (_, w, r, *_), (b, _) in zip(points, answers, strict=True)
        )
    finally:
        nv._all_limits()[arch] = lim
    assert differ > 0


@pytest.mark.skipif(
    OCC_HEADER is None or TRAITS_HEADER is None or CXX is None,
    reason="needs g++, cuda_occupancy.h and arch_traits.h: pip install 'nvidia-cuda-runtime>=13' 'nvidia-cuda-cccl>=13'",
)
def test_table_is_what_the_generator_makes_from_the_installed_headers(tmp_path) -> None:
    """Every figure of the committed table equals the installed headers' (no hand edit; facts unchanged)."""
    out = tmp_path / "table.json"
    subprocess.run([sys.executable, str(GENERATOR), "--out", str(out)], check=True, capture_output=True)
    fresh = json.loads(out.read_text())["architectures"]
    committed = nv.table()["architectures"]
    assert set(committed) <= set(fresh), (
        f"architectures the installed headers no longer know: {set(committed) - set(fresh)}"
    )
    for arch, entry in committed.items():
        assert entry == fresh[arch], f"sm_{arch} differs from the installed headers: regenerate the table"


def test_table_covers_cuda_13_architectures_and_names() -> None:
    """The generated table holds every compute capability issue 23 names, and limits_for reads every spelling."""
    archs = set(nv.known_architectures())
    assert {75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121} <= archs
    sources = nv.table()["sources"]
    assert set(sources) == {"cuda_occupancy.h", "arch_traits.h"}
    assert all(len(s["sha256"]) == 64 for s in sources.values())
    for spelling in (100, "100", "sm_100", "sm100", "sm_100a", "sm_100f", "SM100a"):
        assert nv.limits_for(spelling).arch == 100
    for spelling in ("sm_120a", 121, "sm_121a"):
        assert nv.limits_for(spelling).arch in (120, 121)
    for unknown in (0, 99, "sm_101", "gfx942", "", "sm_"):
        with pytest.raises(UsageError, match="no occupancy table"):
            nv.limits_for(unknown)


# ---- every corpus kernel, as kdb ingests it, against the calculator ------------------------------------------

# "\tAttribute:\tEIATTR_VRC_CTA_INIT_COUNT\n\tFormat:\tEIFMT_BVAL\n\tValue:\t0x80"
ELF_ATTR_RE = re.compile(
    r"^\tAttribute:\t(EIATTR_NUM_BARRIERS|EIATTR_VRC_CTA_INIT_COUNT)\n\tFormat:\t\w+\n\tValue:\t(0x[0-9a-f]+)", re.M
)


# "    f   2600    e80  0 80                     PROGBITS   100006    3        a .text.softmax_kernel": Flags
TEXT_FLAGS_RE = re.compile(
    r"^\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+PROGBITS\s+([0-9a-f]+)\s.*\s\.text\.(\S+)$", re.M
)


def _cuda_snapshots() -> list[str]:
    manifest = ROOT / "corpus" / "manifest.json"
    if not manifest.exists():
        return []
    return sorted(n for n, e in json.loads(manifest.read_text())["snapshots"].items() if e.get("backend") == "cuda")


@needs_calculator
@pytest.mark.nvidia_tools
@pytest.mark.parametrize("snapshot", _cuda_snapshots() or ["<no corpus>"])
def test_corpus_occupancy_equals_calculator(snapshot: str, unpack_snapshot, capsys, calculator) -> None:
    """What users query (`kernels.occupancy`, `occupancy_limiter`) for every kernel of every CUDA snapshot, against
    the calculator fed by the oracles: cuobjdump's REG and SHARED (less the reservation, as the driver charges it)
    and its EIATTR_NUM_BARRIERS / EIATTR_VRC_CTA_INIT_COUNT, Triton's JSON for num_warps and the dynamic size.
    Where the calculator's answer depends on whether those two attributes are charged, kdb must say unknown."""
    import corpus_cache
    from conftest import archive_of
    from helpers import kdb
    from test_nvidia_analysis import cuobjdump, resource_usage

    if snapshot == "<no corpus>":
        pytest.skip("corpus/manifest.json lists no CUDA snapshot")
    cache = unpack_snapshot(snapshot)
    # `kdb ingest cache --tag SNAPSHOT --no-sass` (exit 1 where it records an unknown occupancy), cached, read-only
    home = corpus_cache.ingested_home([(snapshot, archive_of(snapshot))], sass=False)
    q = "SELECT cache_key, name, num_warps, shared, occupancy, occupancy_limiter, occupancy_unit FROM kernels"
    rows = kdb(capsys, home, "sql", q, "--format", "json").json()
    q = "SELECT cache_key, reason FROM problems WHERE stage = 'occupancy'"
    unknown = {r["cache_key"]: r["reason"] for r in kdb(capsys, home, "sql", q, "--format", "json").json()}
    points, kernels = [], []
    for row in sampling.catalog_rows(rows, snapshot):
        folder = cache / row["cache_key"]
        meta = json.loads((folder / f"{row['name']}.json").read_text())
        cubin = folder / f"{row['name']}.cubin"
        target = meta["target"]
        arch = target["arch"] if isinstance(target, dict) else target[-1]
        usage = resource_usage(cubin)[meta["name"]]
        elf = cuobjdump("-elf", str(cubin))
        declared = {k: int(v, 16) for k, v in ELF_ATTR_RE.findall(elf)}
        # ptxas 12 declares named barriers in the .text section's flags (bits 26:20), ptxas 13 in EIATTR_NUM_BARRIERS
        text_flags = {name: int(flags, 16) for flags, name in TEXT_FLAGS_RE.findall(elf)}
        declared.setdefault("EIATTR_NUM_BARRIERS", (text_flags[meta["name"]] >> 20) & 0x7F)
        lim = nv.limits_for(arch)
        static = max(usage["shared"] - lim.shared_reserved_per_block, 0)
        base = (arch, meta["num_warps"], usage["reg"], static, meta["shared"])
        points += [
            (*base, 1, 0),
            (*base, declared.get("EIATTR_NUM_BARRIERS", 0), declared.get("EIATTR_VRC_CTA_INIT_COUNT", 0)),
        ]
        kernels.append(row)
    answers = calculator(points)
    known = 0
    for i, row in enumerate(kernels):
        (blocks, factors), (declared_blocks, _) = answers[2 * i], answers[2 * i + 1]
        if blocks != declared_blocks:
            assert row["occupancy"] is None, row["cache_key"]
            assert f"{blocks} blocks/SM" in unknown[row["cache_key"]], unknown[row["cache_key"]]
            assert f"{declared_blocks} (" in unknown[row["cache_key"]]
            continue
        assert row["cache_key"] not in unknown, unknown.get(row["cache_key"])
        assert row["occupancy"] == blocks * row["num_warps"], row["cache_key"]
        assert factors & FACTOR_BITS[row["occupancy_limiter"]], (row["cache_key"], row["occupancy_limiter"], factors)
        assert row["occupancy_unit"] == "warps/SM"
        known += 1
    assert known > len(kernels) // 2
