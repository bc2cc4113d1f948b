#!/usr/bin/env python3
"""Regenerate kdb/analysis/nvidia/occupancy_table.json from NVIDIA's own headers (no GPU, no CUDA toolkit).

    pip install 'nvidia-cuda-runtime>=13' 'nvidia-cuda-cccl>=13'   # header-only here: nothing is loaded
    python scripts/gen_nvidia_occupancy.py                          # needs a C++17 compiler (g++)

Two NVIDIA sources, both read by compiling a small C++ program against them with the host compiler and
running it, so that every constant is the headers' own answer, not a transcription:

- ``cuda_occupancy.h`` (``nvidia/cu13/include`` of the ``nvidia-cuda-runtime`` wheel): NVIDIA's occupancy
  calculator. Its per-architecture constants (resident-block limit by major/minor, register allocation
  granularity and per-thread maximum, sub-partitions, shared-memory allocation granularity, the shared-memory
  carve-outs, whether the driver's reserved shared memory is added to the per-block limit, the block-barrier
  and virtual-resource limits) are obtained by calling its functions for each compute capability; the
  carve-outs by probing ``cudaOccAlignUpShmemSizeVoltaPlus`` at every KiB.
- ``cuda/__device/arch_traits.h`` (``nvidia/cu13/include/cccl`` of the ``nvidia-cuda-cccl`` wheel):
  NVIDIA's libcu++ table of the per-architecture device limits that the calculator takes as *inputs*
  (``cudaOccDeviceProp``: threads and warps per SM, registers per SM/block/thread, shared memory per SM,
  per block and opt-in per block, shared memory reserved per block), the figures of the CUDA C++
  Programming Guide's compute-capability table. Its ``_CCCL_KNOWN_CUDA_ARCH_LIST`` names the architectures.

An architecture enters the table when both headers know it and its compute capability is one CUDA 13
compiles for (7.5 and newer: CUDA 13.0 removed offline compilation for Maxwell, Pascal and Volta).
Where the two headers state the same figure (resident blocks per SM), the generator refuses to write a
table they disagree on. Regenerate after installing newer wheels; the test suite
(tests/test_nvidia_occupancy.py) then checks kdb against the calculator over a sweep of every architecture.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DEFAULT = ROOT / "kdb" / "analysis" / "nvidia" / "occupancy_table.json"
MIN_COMPUTE_CAPABILITY = 75  # CUDA 13.0 release notes: offline compilation for sm < 75 removed
PROBE_KIB = 1024  # carve-outs probed from 0 to this many KiB

PROGRAM = r"""
#include <cuda_occupancy.h>
#include <cuda/__device/arch_traits.h>
#include <cstdio>

static void dump(int cc, bool specific) {
    const cuda::arch_traits_t t = cuda::arch_traits_for(cuda::compute_capability{cc});
    cudaOccDeviceProp p;
    p.computeMajor = t.compute_capability_major;
    p.computeMinor = t.compute_capability_minor;
    p.maxThreadsPerBlock = t.max_threads_per_block;
    p.maxThreadsPerMultiprocessor = t.max_threads_per_multiprocessor;
    p.regsPerBlock = t.max_registers_per_block;
    p.regsPerMultiprocessor = t.max_registers_per_multiprocessor;
    p.warpSize = t.warp_size;
    p.sharedMemPerBlock = t.max_shared_memory_per_block;
    p.sharedMemPerMultiprocessor = t.max_shared_memory_per_multiprocessor;
    p.numSms = 1;
    p.sharedMemPerBlockOptin = t.max_shared_memory_per_block_optin;
    p.reservedSharedMemPerBlock = t.reserved_shared_memory_per_block;

    int smem_gran = 0, reg_max = 0, reg_gran = 0, subparts = 0, blocks = 0, vres = 0;
    int ok = cudaOccSMemAllocationGranularity(&smem_gran, &p) == CUDA_OCC_SUCCESS
          && cudaOccRegAllocationMaxPerThread(&reg_max, &p) == CUDA_OCC_SUCCESS
          && cudaOccRegAllocationGranularity(&reg_gran, &p) == CUDA_OCC_SUCCESS
          && cudaOccSubPartitionsPerMultiprocessor(&subparts, &p) == CUDA_OCC_SUCCESS
          && cudaOccMaxBlocksPerMultiprocessor(&blocks, &p) == CUDA_OCC_SUCCESS
          && cudaOccMaxVirtualResourceCountPerSM(&vres, &p) == CUDA_OCC_SUCCESS;

    cudaOccDeviceState state;  // the defaults: no cache-config or carve-out preference
    size_t preferred = 0;
    ok = ok && cudaOccSMemPerMultiprocessor(&preferred, &p, &state) == CUDA_OCC_SUCCESS;

    // per-block limit as the calculator computes it, with opt-in, for a request above the default
    size_t per_block = 0;
    ok = ok && cudaOccSMemPerBlock(&per_block, &p, FUNC_SHMEM_LIMIT_OPTIN, p.sharedMemPerBlock + 1) == CUDA_OCC_SUCCESS;

    // block-barrier limit: the calculator applies it only on some majors; probe with one block allowed
    cudaOccFuncAttributes a;
    a.maxThreadsPerBlock = t.max_threads_per_block;
    a.numRegs = 16;
    a.numBlockBarriers = 1;
    int bar_one = 0;
    ok = ok && cudaOccMaxBlocksPerSMBlockBarrierLimit(&bar_one, 1, &p, &a) == CUDA_OCC_SUCCESS;
    // does cudaOccMaxActiveBlocksPerMultiprocessor apply it? (a kernel with more barriers than exist)
    cudaOccResult r;
    a.numBlockBarriers = 1 << 20;
    ok = ok && cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &state, 32, 0) == CUDA_OCC_SUCCESS;
    int barriers_applied = r.activeBlocksPerMultiprocessor == 0 && (r.limitingFactors & OCC_LIMIT_BARRIERS);

    std::printf("{\"cc\": %d, \"arch_specific\": %s, \"calculator_ok\": %s", cc, specific ? "true" : "false",
                ok ? "true" : "false");
    std::printf(", \"device\": {\"compute_capability_major\": %d, \"compute_capability_minor\": %d"
                ", \"max_threads_per_block\": %d, \"warp_size\": %d, \"max_registers_per_block\": %d"
                ", \"max_registers_per_multiprocessor\": %d, \"max_registers_per_thread\": %d"
                ", \"max_shared_memory_per_multiprocessor\": %zu, \"max_shared_memory_per_block\": %zu"
                ", \"max_shared_memory_per_block_optin\": %zu, \"reserved_shared_memory_per_block\": %zu"
                ", \"max_blocks_per_multiprocessor\": %d, \"max_threads_per_multiprocessor\": %d"
                ", \"max_warps_per_multiprocessor\": %d}",
                t.compute_capability_major, t.compute_capability_minor, t.max_threads_per_block, t.warp_size,
                t.max_registers_per_block, t.max_registers_per_multiprocessor, t.max_registers_per_thread,
                (size_t)t.max_shared_memory_per_multiprocessor, (size_t)t.max_shared_memory_per_block,
                (size_t)t.max_shared_memory_per_block_optin, (size_t)t.reserved_shared_memory_per_block,
                t.max_blocks_per_multiprocessor, t.max_threads_per_multiprocessor, t.max_warps_per_multiprocessor);
    std::printf(", \"calculator\": {\"shared_memory_allocation_granularity\": %d"
                ", \"max_registers_per_thread\": %d, \"register_allocation_granularity\": %d"
                ", \"sub_partitions\": %d, \"max_blocks_per_multiprocessor\": %d"
                ", \"max_virtual_resources_per_multiprocessor\": %d, \"default_shared_memory_per_multiprocessor\": %zu"
                ", \"shared_memory_per_block_limit_optin\": %zu, \"block_barriers_per_block_slot\": %d"
                ", \"block_barrier_limit_applied\": %s",
                smem_gran, reg_max, reg_gran, subparts, blocks, vres, preferred, per_block, bar_one,
                barriers_applied ? "true" : "false");
    // carve-outs: every size the calculator rounds a request up to
    std::printf(", \"carveouts\": [");
    size_t last = (size_t)-1;
    bool first = true;
    for (size_t kib = 0; kib <= %(probe_kib)d; ++kib) {
        for (size_t extra = 0; extra <= 1; ++extra) {
            size_t size = kib * 1024 + extra;
            if (cudaOccAlignUpShmemSizeVoltaPlus(&size, &p) != CUDA_OCC_SUCCESS) continue;
            if (size != last) {
                std::printf("%%s%%zu", first ? "" : ", ", size);
                first = false;
                last = size;
            }
        }
    }
    std::printf("]}}\n");
}

#define KDB_ARCH(cc) dump(cc, false);
#define KDB_SPECIFIC(cc) dump(cc, true);
int main() {
    std::printf("[\n");
    _CCCL_PP_FOR_EACH(KDB_ARCH, _CCCL_KNOWN_CUDA_ARCH_LIST)
    _CCCL_PP_FOR_EACH(KDB_SPECIFIC, _CCCL_KNOWN_CUDA_ARCH_SPECIFIC_LIST)
    std::printf("]\n");
    return 0;
}
"""


def nvidia_include(sub: str, marker: str) -> Path | None:
    """``nvidia/<sub>`` of an installed NVIDIA wheel holding MARKER, found without importing anything."""
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / sub
        if (candidate / marker).is_file():
            return candidate
    return None


def wheel_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_program(cxx: str, runtime_include: Path, cccl_include: Path) -> list[dict]:
    """Compile PROGRAM against the two headers and return what it prints (one record per architecture)."""
    source = PROGRAM.replace("%(probe_kib)d", str(PROBE_KIB)).replace("%%", "%")
    with tempfile.TemporaryDirectory(prefix="kdb-occ-gen-") as tmp:
        src, exe = Path(tmp) / "gen.cpp", Path(tmp) / "gen"
        src.write_text(source)
        # cuda_occupancy.h alone, not the folder: with cuda_runtime_api.h in sight libcu++ assumes a whole
        # toolkit (crt/host_defines.h); cuda_occupancy.h itself includes only <stddef.h>, <limits.h>, <string.h>
        only = Path(tmp) / "occ"
        only.mkdir()
        shutil.copy(runtime_include / "cuda_occupancy.h", only / "cuda_occupancy.h")
        subprocess.run(
            [cxx, "-std=c++17", "-O1", f"-I{cccl_include}", f"-I{only}", str(src), "-o", str(exe)],
            check=True,
        )
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    text = out.replace("}}\n{", "}},\n{")
    return json.loads(text)


def build_table(records: list[dict], sources: dict) -> dict:
    specific = {r["cc"] for r in records if r["arch_specific"]}
    archs: dict[str, dict] = {}
    for rec in records:
        if rec["arch_specific"] or rec["cc"] < MIN_COMPUTE_CAPABILITY or not rec["calculator_ok"]:
            continue
        dev, calc = rec["device"], rec["calculator"]
        if dev["max_blocks_per_multiprocessor"] != calc["max_blocks_per_multiprocessor"]:
            raise SystemExit(
                f"sm_{rec['cc']}: arch_traits.h says {dev['max_blocks_per_multiprocessor']} blocks per SM, "
                f"cuda_occupancy.h {calc['max_blocks_per_multiprocessor']}: refusing to write a table they disagree on"
            )
        calc = dict(calc)
        calc["reserved_shared_memory_added_to_block_limit"] = (
            calc.pop("shared_memory_per_block_limit_optin") - dev["max_shared_memory_per_block_optin"]
        ) == dev["reserved_shared_memory_per_block"] and dev["reserved_shared_memory_per_block"] > 0
        archs[str(rec["cc"])] = {
            "name": f"sm_{rec['cc']}",
            "arch_specific_variant": rec["cc"] in specific,
            "device": dev,
            "calculator": calc,
        }
    return {
        "comment": (
            "GENERATED by scripts/gen_nvidia_occupancy.py; do not edit. 'device': NVIDIA libcu++ "
            "cuda/__device/arch_traits.h (the Programming Guide's per-compute-capability limits, the inputs of "
            "cudaOccDeviceProp); 'calculator': constants of NVIDIA's cuda_occupancy.h, obtained by calling it."
        ),
        "sources": sources,
        "min_compute_capability": MIN_COMPUTE_CAPABILITY,
        "architectures": archs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime-include", type=Path, help="folder holding cuda_occupancy.h (default: the wheel's)")
    parser.add_argument("--cccl-include", type=Path, help="folder holding cuda/__device/arch_traits.h")
    parser.add_argument("--cxx", default=shutil.which("g++") or "c++", help="host C++17 compiler")
    parser.add_argument("--out", type=Path, default=OUT_DEFAULT)
    args = parser.parse_args()

    runtime = args.runtime_include or nvidia_include("cu13/include", "cuda_occupancy.h")
    cccl = args.cccl_include or nvidia_include("cu13/include/cccl", "cuda/__device/arch_traits.h")
    if runtime is None or cccl is None:
        print("install the headers: pip install 'nvidia-cuda-runtime>=13' 'nvidia-cuda-cccl>=13'", file=sys.stderr)
        return 2
    occ_h, traits_h = runtime / "cuda_occupancy.h", cccl / "cuda" / "__device" / "arch_traits.h"
    sources = {
        "cuda_occupancy.h": {
            "wheel": "nvidia-cuda-runtime",
            "version": wheel_version("nvidia-cuda-runtime") if args.runtime_include is None else None,
            "path": "nvidia/cu13/include/cuda_occupancy.h",
            "sha256": sha256(occ_h),
        },
        "arch_traits.h": {
            "wheel": "nvidia-cuda-cccl",
            "version": wheel_version("nvidia-cuda-cccl") if args.cccl_include is None else None,
            "path": "nvidia/cu13/include/cccl/cuda/__device/arch_traits.h",
            "sha256": sha256(traits_h),
        },
    }
    table = build_table(run_program(args.cxx, runtime, cccl), sources)
    args.out.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    names = ", ".join(a["name"] for a in table["architectures"].values())
    print(f"{args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}: {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
