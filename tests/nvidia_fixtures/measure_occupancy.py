#!/usr/bin/env python3
"""Measure the CUDA driver's occupancy for corpus sm90 kernels; writes occupancy_sm90.json beside this file.

Needs only Python 3.10+ and an NVIDIA driver (libcuda.so.1, called through ctypes): no pip install,
no numpy, no torch. Run it on an H100/H200 machine against an unpacked corpus snapshot:

    python corpus/unpack.py t3.4.0-sm90 corpus/unpacked/t3.4.0-sm90     # on any machine
    python tests/nvidia_fixtures/measure_occupancy.py corpus/unpacked/t3.4.0-sm90 --snapshot t3.4.0-sm90

For each kernel folder whose JSON targets arch 90 it loads the cubin (cuModuleLoadData), gets the
function, raises CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to the dynamic shared size asked
about, and calls cuOccupancyMaxActiveBlocksPerMultiprocessor with blockDim = num_warps * 32. It
asks about the JSON's ``shared`` (the kernel as Triton launches it) and, in extra "sweep" rows,
about a fixed list of dynamic sizes, so the shared-memory limit is exercised beyond the corpus.
It also records what Triton's own loader does for > 48 KiB (prefer-shared cache config, max
dynamic = opt-in maximum - static) and the device attributes that the occupancy table encodes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

OUT_DEFAULT = Path(__file__).resolve().parent / "occupancy_sm90.json"
SWEEP_BYTES = (0, 16 * 1024, 48 * 1024, 64 * 1024, 100 * 1024, 150 * 1024, 200 * 1024, 227 * 1024)

# CUfunction_attribute
FUNC_SHARED_SIZE_BYTES = 1
FUNC_LOCAL_SIZE_BYTES = 3
FUNC_NUM_REGS = 4
FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
# CUfunc_cache
FUNC_CACHE_PREFER_SHARED = 1
# CUdevice_attribute
DEVICE_ATTRIBUTES = {
    "max_threads_per_multiprocessor": 39,
    "compute_capability_major": 75,
    "compute_capability_minor": 76,
    "max_shared_memory_per_multiprocessor": 81,
    "max_registers_per_multiprocessor": 82,
    "max_shared_memory_per_block_optin": 97,
    "max_blocks_per_multiprocessor": 106,
    "reserved_shared_memory_per_block": 111,
    "max_registers_per_block": 12,
    "multiprocessor_count": 16,
}


class Driver:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.check(self.lib.cuInit(0), "cuInit")
        self.device = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(self.device), 0), "cuDeviceGet")
        self.context = ctypes.c_void_p()
        self.check(
            self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device), "cuDevicePrimaryCtxRetain"
        )
        self.check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def check(self, status: int, what: str) -> None:
        if status != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(text))
            raise RuntimeError(f"{what} failed: {status} {text.value.decode() if text.value else ''}")

    def name(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self.check(self.lib.cuDeviceGetName(buf, 256, self.device), "cuDeviceGetName")
        return buf.value.decode()

    def driver_version(self) -> int:
        v = ctypes.c_int()
        self.check(self.lib.cuDriverGetVersion(ctypes.byref(v)), "cuDriverGetVersion")
        return v.value

    def attribute(self, attr: int) -> int:
        v = ctypes.c_int()
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(v), attr, self.device), f"cuDeviceGetAttribute({attr})")
        return v.value

    def load(self, image: bytes, kernel: str) -> tuple[ctypes.c_void_p, ctypes.c_void_p]:
        module, func = ctypes.c_void_p(), ctypes.c_void_p()
        buf = ctypes.create_string_buffer(image, len(image))
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), buf), "cuModuleLoadData")
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(func), module, kernel.encode()), "cuModuleGetFunction")
        return module, func

    def unload(self, module: ctypes.c_void_p) -> None:
        self.check(self.lib.cuModuleUnload(module), "cuModuleUnload")

    def func_attribute(self, func: ctypes.c_void_p, attr: int) -> int:
        v = ctypes.c_int()
        self.check(self.lib.cuFuncGetAttribute(ctypes.byref(v), attr, func), f"cuFuncGetAttribute({attr})")
        return v.value

    def set_max_dynamic_shared(self, func: ctypes.c_void_p, size: int) -> None:
        self.check(self.lib.cuFuncSetAttribute(func, FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, size), "cuFuncSetAttribute")

    def blocks_per_sm(self, func: ctypes.c_void_p, block: int, dynamic_shared: int) -> int:
        n = ctypes.c_int()
        self.check(
            self.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                ctypes.byref(n), func, block, ctypes.c_size_t(dynamic_shared)
            ),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )
        return n.value


def kernel_folders(root: Path) -> list[tuple[Path, dict]]:
    found = []
    for meta_path in sorted(root.rglob("*.json")):
        if meta_path.name.startswith("__grp__") or meta_path.name.endswith(".autotune.json"):
            continue
        cubin = meta_path.with_suffix(".cubin")
        if not cubin.exists():
            continue
        meta = json.loads(meta_path.read_text())
        target = meta.get("target") or {}
        if isinstance(target, dict) and target.get("backend") == "cuda" and target.get("arch") == 90:
            found.append((cubin, meta))
    return found


def measure(drv: Driver, cubin: Path, meta: dict, optin: int) -> list[dict]:
    image, name, warps, shared = cubin.read_bytes(), meta["name"], meta["num_warps"], meta["shared"]
    rows = []
    sizes = [(shared, False)] + [(s, True) for s in SWEEP_BYTES if s != shared]
    for dynamic, sweep in sizes:
        module, func = drv.load(image, name)
        try:
            static = drv.func_attribute(func, FUNC_SHARED_SIZE_BYTES)
            if dynamic + static > optin:
                continue
            drv.set_max_dynamic_shared(func, dynamic)
            blocks = drv.blocks_per_sm(func, warps * 32, dynamic)
            row = {
                "cache_key": cubin.parent.name,
                "kernel": name,
                "num_warps": warps,
                "shared": dynamic,
                "sweep": sweep,
                "registers": drv.func_attribute(func, FUNC_NUM_REGS),
                "static_shared": static,
                "local_bytes": drv.func_attribute(func, FUNC_LOCAL_SIZE_BYTES),
                "blocks_per_sm": blocks,
                "warps_per_sm": blocks * warps,
            }
        finally:
            drv.unload(module)
        if not sweep:
            row["blocks_per_sm_triton_load"] = triton_load_blocks(drv, image, name, warps, dynamic, optin)
        rows.append(row)
    return rows


def triton_load_blocks(drv: Driver, image: bytes, name: str, warps: int, shared: int, optin: int) -> int:
    """Occupancy with the function set up as Triton's launcher sets it up (third_party/nvidia/backend/driver.c)."""
    module, func = drv.load(image, name)
    try:
        if shared > 49152 and optin > 49152:
            drv.check(drv.lib.cuFuncSetCacheConfig(func, FUNC_CACHE_PREFER_SHARED), "cuFuncSetCacheConfig")
            static = drv.func_attribute(func, FUNC_SHARED_SIZE_BYTES)
            drv.set_max_dynamic_shared(func, optin - static)
        return drv.blocks_per_sm(func, warps * 32, shared)
    finally:
        drv.unload(module)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cache", type=Path, help="an unpacked corpus snapshot (a Triton cache directory)")
    parser.add_argument("--snapshot", required=True, help="its name in corpus/manifest.json, e.g. t3.4.0-sm90")
    parser.add_argument("--out", type=Path, default=OUT_DEFAULT)
    parser.add_argument("--limit", type=int, default=0, help="measure at most this many kernels (0: all)")
    args = parser.parse_args()

    folders = kernel_folders(args.cache)
    if args.limit:
        folders = folders[: args.limit]
    if not folders:
        print(f"no sm90 kernel folders under {args.cache}", file=sys.stderr)
        return 2
    drv = Driver()
    device = {key: drv.attribute(attr) for key, attr in DEVICE_ATTRIBUTES.items()}
    if (device["compute_capability_major"], device["compute_capability_minor"]) != (9, 0):
        print(f"device {drv.name()} is not compute capability 9.0", file=sys.stderr)
        return 2
    optin = device["max_shared_memory_per_block_optin"]
    rows = []
    for cubin, meta in folders:
        rows.extend(measure(drv, cubin, meta, optin))
    result = {
        "snapshot": args.snapshot,
        "arch": 90,
        "device": drv.name(),
        "driver_version": drv.driver_version(),
        "device_attributes": device,
        "api": "cuOccupancyMaxActiveBlocksPerMultiprocessor (libcuda via ctypes)",
        "kernels": rows,
    }
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"{len(rows)} measurements of {len(folders)} kernels on {result['device']} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
