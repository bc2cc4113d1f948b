"""The best-config oracle, per toolchain (run on the GPU machine that made the caches' kind of GPU).

One Inductor run compiles with two ptxas: its compile workers call torch's `_set_triton_ptxas_path()`
(torch/_inductor/compile_worker: `TRITON_PTXAS_PATH` = torch's own `bin/ptxas`, CUDA 13 here, PTX 9.0)
while the parent process (coordinate descent, benchmarking, templates) compiles with Triton's bundled
ptxas (CUDA 12.8, PTX 8.7). The ptxas version is part of Triton's cache key, so one kernel and config has
one folder name per toolchain, and a recompile in one process can only confirm the folders made by its
toolchain (make_caches.py's oracle ran in a parent-like process).

This script recompiles the winning config of every `.best_config` of every committed cache once per
toolchain, each in its own fresh process, with Inductor's own `CachingAutotuner._precompile_config`, and
records the folder name each produced. kdb reads none of it; tests/test_inductor.py checks that the
folder kdb links is the one of these names that the cache holds.

  python3 corpus/inductor/oracle_toolchains.py --caches DIR --out FILE.json   # DIR: <scenario>.tar.xz
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

TOOLCHAINS = ("triton_ptxas", "torch_worker_ptxas")


def recompile(inductor_dir: Path, toolchain: str, out_json: Path) -> None:
    """In this (fresh) process: every best config's winner compiled with one toolchain."""
    os.environ.pop("TRITON_PTXAS_PATH", None)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kdb-oracle-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_dir)
    import torch  # noqa: F401
    from torch._inductor.runtime import triton_heuristics as th
    from triton.runtime.cache import get_cache_manager

    if toolchain == "torch_worker_ptxas":  # exactly what Inductor's compile workers do first
        try:
            from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path
        except ImportError:  # older torch kept it in codecache
            from torch._inductor.codecache import _set_triton_ptxas_path
        _set_triton_ptxas_path()
    seen: dict[str, str] = {}
    original = th.check_autotune_cache

    def recording(configs, filename, inductor_meta):
        result = original(configs, filename, inductor_meta)
        local = getattr(result[1], "local_cache", None) if result[1] is not None else None
        if local:
            seen[str(filename)] = str(Path(local[1]).relative_to(inductor_dir))
        return result

    th.check_autotune_cache = recording
    records = []
    for path in sorted(inductor_dir.glob("??/c*.py")):
        try:
            spec = importlib.util.spec_from_file_location(f"kdb_oracle_{path.stem}", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except Exception as exc:  # noqa: BLE001 - recorded
            records.append({"module": str(path.relative_to(inductor_dir)), "error": repr(exc)[:300]})
            continue
        best = seen.get(str(path))
        if best is None:
            continue
        for name, at in vars(mod).items():
            if not isinstance(at, th.CachingAutotuner):
                continue
            for c in at.configs:  # after the cache: the winner alone
                entry = {
                    "module": str(path.relative_to(inductor_dir)),
                    "kernel": name,
                    "best_config_path": best,
                    "config": {"kwargs": dict(c.kwargs), "num_warps": c.num_warps, "num_stages": c.num_stages},
                    "ptxas": os.environ.get("TRITON_PTXAS_PATH") or "triton bundled",
                }
                try:
                    res = at._precompile_config(c)
                    entry["cache_key"] = Path(get_cache_manager(res.kernel.hash).cache_dir).name
                except Exception as exc:  # noqa: BLE001 - recorded
                    entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
                records.append(entry)
    out_json.write_text(json.dumps(records, indent=1, sort_keys=True))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--caches", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--recompile", nargs=3, metavar=("INDUCTOR_DIR", "TOOLCHAIN", "OUT_JSON"))
    a = ap.parse_args()
    if a.recompile:
        recompile(Path(a.recompile[0]), a.recompile[1], Path(a.recompile[2]))
        return 0
    import torch
    import triton

    result: dict = {"torch": torch.__version__, "triton": triton.__version__, "device": torch.cuda.get_device_name(),
                    "scenarios": {}}
    work = Path(tempfile.mkdtemp(prefix="kdb-toolchains-"))
    for archive in sorted(a.caches.glob("*.tar.xz")):
        name = archive.name.removesuffix(".tar.xz")
        cache = work / name
        with tarfile.open(archive) as tar:
            tar.extractall(cache, filter="data")
        if not list(cache.rglob("*.best_config")):
            shutil.rmtree(cache)
            continue
        per: dict = {}
        for toolchain in TOOLCHAINS:
            out = work / f"{name}.{toolchain}.json"
            t0 = time.time()
            proc = subprocess.run([sys.executable, __file__, "--recompile", str(cache), toolchain, str(out)],
                                  env=dict(os.environ, PYTHONHASHSEED="0", TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER="0"),
                                  capture_output=True, text=True, timeout=240)
            per[toolchain] = {"status": "ok" if proc.returncode == 0 else proc.stderr[-600:],
                              "seconds": round(time.time() - t0, 1),
                              "records": json.loads(out.read_text()) if out.exists() else []}
            print(name, toolchain, per[toolchain]["status"][:200], per[toolchain]["seconds"], flush=True)
        result["scenarios"][name] = per
        shutil.rmtree(cache)
    a.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
