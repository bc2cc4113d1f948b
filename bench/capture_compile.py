#!/usr/bin/env python3
"""Compile corpus kernel configs offline with whatever Triton this interpreter has, through whatever cache
Triton is told to use (TRITON_CACHE_DIR alone, or TRITON_CACHE_MANAGER / TRITON_REMOTE_CACHE_BACKEND).

    python bench/capture_compile.py SPEC.json

SPEC: {"backend": "hip", "target": "gfx942", "warp_size": 64, "configs": [<corpus/build.py config>, …],
       "results": "out.jsonl"}. One line per config: {"config", "cache_key"} or {"config", "error"}.

It drives each release's own JIT as corpus/build.py does (its stand-in driver and tensors, no GPU) and
imports nothing of kdb's: kdb comes in only through Triton's cache hooks, as in a user's process.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


def build_module():
    """corpus/build.py as a module (its configs, stand-in driver and tensors); bench/capture_releases.py and
    tests/test_capture.py load it through here too."""
    spec = importlib.util.spec_from_file_location("kdb_corpus_build", CORPUS / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(spec_path: str) -> int:
    import triton

    build = build_module()
    spec = json.loads(Path(spec_path).read_text())
    version = build.vtuple(triton.__version__.split("+")[0])
    if version >= (3, 0):
        from triton.backends.compiler import GPUTarget

        target = GPUTarget(spec["backend"], spec["target"], spec["warp_size"])
    else:
        target = (spec["backend"], spec["target"])
    build.install_standin_driver(target, version)
    tensor = build.make_standin_tensor()
    import triton.language as tl

    dtypes = {"fp32": tl.float32, "fp16": tl.float16, "bf16": tl.bfloat16}
    src_root = Path(spec.get("src_root") or CORPUS)
    modules: dict[str, object] = {}
    with open(spec["results"], "a") as out:
        for cfg in spec["configs"]:
            try:
                if cfg["source"] not in modules:
                    name = "kdb_capture_" + Path(cfg["source"]).stem
                    mspec = importlib.util.spec_from_file_location(name, src_root / cfg["source"])
                    assert mspec is not None and mspec.loader is not None
                    module = importlib.util.module_from_spec(mspec)
                    sys.modules[name] = module
                    mspec.loader.exec_module(module)
                    modules[cfg["source"]] = module
                fn = getattr(modules[cfg["source"]], cfg["kernel"])
                kwargs = {}
                for arg, ty in cfg["sig"].items():
                    if ty == "constexpr":
                        kwargs[arg] = cfg["constexprs"][arg]
                    elif ty.startswith("*"):
                        kwargs[arg] = tensor(dtypes[ty[1:]])
                    elif ty == "i32":
                        kwargs[arg] = 1 if arg in cfg["one"] else (1024 if arg in cfg["div16"] else 17)
                    else:
                        kwargs[arg] = 0.5
                kernel = fn.run(grid=(1,), warmup=True, **kwargs, **dict(cfg["options"]))
                out.write(json.dumps({"config": cfg["config"], "cache_key": _folder(kernel)}) + "\n")
            except Exception as exc:  # noqa: BLE001 - record and go on, as the corpus build does
                out.write(json.dumps({"config": cfg["config"], "error": build._one_line(exc)}) + "\n")
            out.flush()
    return 0


def _folder(kernel) -> str:
    """The cache key of a compiled kernel: its metadata file's folder (2.3), else the key Triton's cache
    manager was made with (kdb's keeps `key`; Triton's own `cache_dir` ends in it)."""
    if hasattr(kernel, "metadata_path"):
        return Path(kernel.metadata_path).parent.name
    from triton.runtime.cache import get_cache_manager

    manager = get_cache_manager(kernel.hash)
    if hasattr(manager, "_file_cache_manager"):  # Triton's RemoteCacheManager: its local folder's
        manager = manager._file_cache_manager
    return getattr(manager, "key", None) or Path(manager.cache_dir).name


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
