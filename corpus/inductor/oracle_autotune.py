"""The `*.autotune.json` oracle (run on the GPU machine that made the cache's kind of GPU): rerun
make_caches.py's `triton_autotune` scenario in a fresh Triton cache with Triton's compile() wrapped, and
record, for every kernel the autotuner compiled, its constexpr values and options and the cache folder
it was written to. kdb reads none of it; tests/test_inductor.py checks that each autotune.json entry
kdb links to a folder names the folder this record gives for that config.

  python3 corpus/inductor/oracle_autotune.py --out FILE.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kdb-autotune-oracle-")
    import torch
    import triton
    import triton.compiler as compiler_package
    import triton.compiler.compiler as compiler_module
    from triton.runtime.cache import get_cache_manager

    records: list[dict] = []
    original = compiler_module.compile

    def recording_compile(src, target=None, options=None, **kwargs):
        kernel = original(src, target=target, options=options, **kwargs)
        names = src.fn.arg_names
        constants = {}
        for key, value in getattr(src, "constants", {}).items():
            index = key[0] if isinstance(key, tuple) and len(key) == 1 else key
            if isinstance(index, int) and isinstance(value, (int, float, bool, str)):
                constants[names[index]] = value
        options = options or {}
        records.append(
            {
                "kernel": src.name,
                "constants": constants,
                "num_warps": options.get("num_warps"),
                "num_stages": options.get("num_stages"),
                "num_ctas": options.get("num_ctas"),
                "folder": Path(get_cache_manager(kernel.hash).cache_dir).name,
            }
        )
        return kernel

    compiler_module.compile = recording_compile
    compiler_package.compile = recording_compile  # JITFunction binds `compile` from the package when created
    spec = importlib.util.spec_from_file_location("kdb_make_caches", Path(__file__).with_name("make_caches.py"))
    make_caches = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_caches)
    make_caches.scenario_triton_autotune()
    a.out.write_text(
        json.dumps(
            {
                "torch": torch.__version__,
                "triton": triton.__version__,
                "device": torch.cuda.get_device_name(),
                "records": records,
            },
            indent=1,
            sort_keys=True,
        )
    )
    print(len(records), "compiled kernels recorded")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
