#!/usr/bin/env python3
"""Build the kdb test corpus: real Triton kernel caches, compiled offline on a CPU.

Each *snapshot* is the cache directory that one Triton release writes when it compiles the
kernel suite in corpus/kernels/ for one GPU target. The cache is packed, untouched, into
corpus/snapshots/<snapshot>.tar.zst; corpus/records/<snapshot>.json says which config
produced which cache folder; corpus/manifest.json indexes everything.

Rebuild one snapshot:      python corpus/build.py --snapshot t3.4.0-gfx942
Rebuild several:           python corpus/build.py --snapshot t3.4.0-gfx942 --snapshot t3.4.0-sm90
Rebuild every snapshot:    python corpus/build.py --all
List snapshots / configs:  python corpus/build.py --list

What a build does, per snapshot:
  1. creates (or reuses) a venv WORKDIR/venvs/t<version> with that Triton release, installed
     from --wheelhouse if it holds the wheel, else from PyPI;
  2. copies corpus/kernels/*.py to the FIXED path WORKDIR/src/kernels (artifacts embed
     absolute source and venv paths, so fixed paths keep rebuilds byte-identical; source
     mtimes are pinned too because ptxas records them in cubins);
  3. runs this file in worker mode inside the venv with TRITON_CACHE_DIR set to a fresh empty
     WORKDIR/cache/<snapshot>, compiling every config in order with triton.compile
     (and, from 3.4, the autotune kernel through triton.runtime.autotuner.Autotuner);
     a config that fails to compile is recorded with a one-line reason;
  4. packs the cache deterministically (sorted members, mtime 0, uid/gid 0, modes 0644/0755,
     no top-level folder) into a zstd level-19 tar and updates records + manifest.

Requirements on the host: python3 >= 3.11 with `zstandard` (pip install zstandard);
for AMD targets an AMD-capable ld.lld (Debian package lld-22 -> /usr/lib/llvm-22/bin/ld.lld,
override with --lld or TRITON_HIP_LLD_PATH). No GPU is needed.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parent
DEFAULT_WORKDIR = Path(os.environ.get("KDB_CORPUS_WORKDIR", "/var/tmp/kdb-corpus"))
DEFAULT_WHEELHOUSE = Path("/work/wheelhouse")
DEFAULT_LLD = "/usr/lib/llvm-22/bin/ld.lld"
SOURCE_MTIME = 1_700_000_000  # pinned mtime of the copied kernel sources

SNAPSHOTS = {
    # name: (triton version, backend, target, warp size)
    **{f"t{v}-gfx942": (v, "hip", "gfx942", 64)
       for v in ("3.0.0", "3.1.0", "3.2.0", "3.3.1", "3.4.0", "3.5.1", "3.6.0", "3.7.1", "3.8.0", "3.9.0")},
    **{f"t{v}-gfx950": (v, "hip", "gfx950", 64)
       for v in ("3.2.0", "3.3.1", "3.4.0", "3.5.1", "3.6.0", "3.7.1", "3.8.0", "3.9.0")},
    **{f"t{v}-gfx90a": (v, "hip", "gfx90a", 64) for v in ("3.1.0", "3.4.0", "3.7.1")},
    **{f"t{v}-gfx1100": (v, "hip", "gfx1100", 32) for v in ("3.2.0", "3.4.0", "3.8.0")},
    **{f"t{v}-gfx1201": (v, "hip", "gfx1201", 32) for v in ("3.5.1", "3.8.0", "3.9.0")},
    **{f"t{v}-sm90": (v, "cuda", 90, 32) for v in ("2.3.1", "3.2.0", "3.4.0", "3.6.0", "3.9.0")},
    **{f"t{v}-sm80": (v, "cuda", 80, 32) for v in ("2.3.1", "3.1.0", "3.6.0", "3.8.0")},
    # GPUs past the first corpus (session 8): Blackwell datacenter and consumer, MI400-class, Strix Halo, MI100
    **{f"t{v}-sm100": (v, "cuda", 100, 32) for v in ("3.8.0", "3.9.0")},
    **{f"t{v}-sm120": (v, "cuda", 120, 32) for v in ("3.8.0", "3.9.0")},
    **{f"t{v}-gfx1250": (v, "hip", "gfx1250", 32) for v in ("3.8.0", "3.9.0")},
    **{f"t{v}-gfx1151": (v, "hip", "gfx1151", 32) for v in ("3.8.0", "3.9.0")},
    **{f"t{v}-gfx908": (v, "hip", "gfx908", 64) for v in ("3.8.0", "3.9.0")},
    **{f"t{v}-gfx1030": (v, "hip", "gfx1030", 32) for v in ("3.8.0",)},
}


def vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


# --------------------------------------------------------------------------------------------
# The configs. An id is stable across releases; a config is compiled wherever it is valid.
# sig: argument name -> Triton type ("constexpr" for tl.constexpr parameters).
# div16: arguments given tt.divisibility=16. one: integer arguments specialised to value 1.
# --------------------------------------------------------------------------------------------

def _ptrs(names, ty):
    return {n: f"*{ty}" for n in names}


def build_configs() -> list[dict]:
    cfgs: list[dict] = []

    def add(cid, source, kernel, sig, constexprs, options, div16=(), one=(), backends=("hip", "cuda"),
            min_version="2.3.0", note=None):
        cfgs.append(dict(config=cid, source=source, kernel=kernel, sig=sig, constexprs=constexprs,
                         options=options, div16=list(div16), one=list(one), backends=list(backends),
                         min_version=min_version, note=note))

    # vector add
    for ty, block, w in [("fp32", 1024, 4), ("fp16", 4096, 8)]:
        add(f"vector_add/{ty}/b{block}/w{w}", "kernels/vector_add.py", "add_kernel",
            {**_ptrs(["x_ptr", "y_ptr", "out_ptr"], ty), "n_elements": "i32", "BLOCK": "constexpr"},
            {"BLOCK": block}, {"num_warps": w}, div16=["x_ptr", "y_ptr", "out_ptr", "n_elements"])
    # fused elementwise
    for ty, block, w in [("fp32", 1024, 4), ("bf16", 2048, 4)]:
        add(f"fused_elementwise/{ty}/b{block}/w{w}", "kernels/fused_elementwise.py", "fused_elementwise_kernel",
            {**_ptrs(["x_ptr", "y_ptr", "out_ptr"], ty), "n_elements": "i32", "alpha": "fp32", "BLOCK": "constexpr"},
            {"BLOCK": block}, {"num_warps": w}, div16=["x_ptr", "y_ptr", "out_ptr"])
    # softmax
    for ty, block, w in [("fp32", 1024, 4), ("fp16", 4096, 8)]:
        add(f"softmax/{ty}/b{block}/w{w}", "kernels/softmax.py", "softmax_kernel",
            {**_ptrs(["out_ptr", "in_ptr"], ty), "in_row_stride": "i32", "out_row_stride": "i32",
             "n_cols": "i32", "BLOCK": "constexpr"},
            {"BLOCK": block}, {"num_warps": w}, div16=["out_ptr", "in_ptr", "in_row_stride", "out_row_stride"])
    # layer norm forward
    for ty, block, w in [("fp32", 1024, 4), ("fp16", 2048, 8)]:
        add(f"layer_norm_fwd/{ty}/b{block}/w{w}", "kernels/layer_norm.py", "layer_norm_fwd_kernel",
            {**_ptrs(["x_ptr", "y_ptr"], ty), **_ptrs(["w_ptr", "b_ptr", "mean_ptr", "rstd_ptr"], "fp32"),
             "stride": "i32", "n_cols": "i32", "eps": "fp32", "BLOCK": "constexpr"},
            {"BLOCK": block}, {"num_warps": w},
            div16=["x_ptr", "y_ptr", "w_ptr", "b_ptr", "mean_ptr", "rstd_ptr", "stride"])

    # matmul
    mm_sig = lambda ty: {**_ptrs(["a_ptr", "b_ptr"], ty), "c_ptr": "*fp32" if ty == "fp32" else f"*{ty}",
                         "M": "i32", "N": "i32", "K": "i32",
                         "stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32",
                         "stride_cm": "i32", "stride_cn": "i32",
                         "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr",
                         "GROUP_M": "constexpr"}
    mm_div = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"]
    mm_one = ["stride_ak", "stride_bn", "stride_cn"]  # row-major inputs: unit inner strides

    def mm(ty, m, n, k, w, s, extra=None, backends=("hip", "cuda"), suffix=""):
        opts = {"num_warps": w, "num_stages": s, **(extra or {})}
        cid = f"matmul/{ty}/m{m}n{n}k{k}/w{w}/s{s}{suffix}"
        add(cid, "kernels/matmul.py", "matmul_kernel", mm_sig(ty),
            {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, opts,
            div16=mm_div, one=mm_one, backends=backends)

    mm("fp16", 32, 32, 32, 4, 2)
    mm("fp16", 64, 64, 32, 4, 2)
    mm("fp16", 128, 128, 64, 4, 2)
    mm("fp16", 128, 128, 64, 8, 2)
    mm("fp16", 128, 128, 64, 8, 3)
    mm("fp16", 128, 256, 64, 8, 2)
    mm("fp16", 256, 256, 64, 8, 2)
    mm("fp16", 256, 256, 64, 4, 2)
    mm("bf16", 64, 64, 32, 4, 2)
    mm("bf16", 128, 128, 64, 8, 2)
    mm("bf16", 128, 128, 32, 4, 1)
    mm("fp32", 32, 32, 32, 4, 2)
    mm("fp32", 64, 64, 32, 4, 1)
    mm("fp32", 128, 128, 32, 8, 2)
    # AMD-only tuning knobs
    amd = ("hip",)
    mm("fp16", 128, 128, 64, 4, 2, {"waves_per_eu": 2}, amd, "/wpe2")
    mm("fp16", 128, 128, 64, 4, 2, {"matrix_instr_nonkdim": 16}, amd, "/nonk16")
    mm("fp16", 128, 128, 64, 4, 2, {"matrix_instr_nonkdim": 32}, amd, "/nonk32")
    mm("fp16", 128, 128, 64, 4, 2, {"kpack": 2}, amd, "/kpack2")
    mm("bf16", 128, 128, 64, 8, 2, {"waves_per_eu": 1, "matrix_instr_nonkdim": 16, "kpack": 2}, amd,
       "/wpe1/nonk16/kpack2")

    # flash attention forward
    fa_sig = lambda ty: {**_ptrs(["q_ptr", "k_ptr", "v_ptr", "o_ptr"], ty), "sm_scale": "fp32", "seq_len": "i32",
                         "stride_qh": "i32", "stride_qm": "i32", "stride_kh": "i32", "stride_kn": "i32",
                         "stride_vh": "i32", "stride_vn": "i32", "stride_oh": "i32", "stride_om": "i32",
                         "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "HEAD_DIM": "constexpr"}
    fa_div = ["q_ptr", "k_ptr", "v_ptr", "o_ptr", "seq_len", "stride_qh", "stride_qm", "stride_kh", "stride_kn",
              "stride_vh", "stride_vn", "stride_oh", "stride_om"]
    for ty in ("fp16", "bf16"):
        for d in (64, 128):
            for bm, bn, w, s in [(64, 64, 4, 1), (128, 64, 8, 2)]:
                add(f"attn_fwd/{ty}/d{d}/m{bm}n{bn}/w{w}/s{s}", "kernels/flash_attention.py", "attn_fwd_kernel",
                    fa_sig(ty), {"BLOCK_M": bm, "BLOCK_N": bn, "HEAD_DIM": d}, {"num_warps": w, "num_stages": s},
                    div16=fa_div)
    add("attn_fwd/fp16/d128/m128n128/w4/s2", "kernels/flash_attention.py", "attn_fwd_kernel",
        fa_sig("fp16"), {"BLOCK_M": 128, "BLOCK_N": 128, "HEAD_DIM": 128}, {"num_warps": 4, "num_stages": 2},
        div16=fa_div)

    # register hog (meant to spill)
    for ty, m, n, k, w in [("fp32", 256, 256, 32, 4), ("fp16", 256, 256, 64, 4), ("fp32", 128, 256, 32, 4)]:
        add(f"register_hog/{ty}/m{m}n{n}k{k}/w{w}", "kernels/register_hog.py", "register_hog_kernel",
            {**_ptrs(["a_ptr", "b_ptr"], ty), "c_ptr": "*fp32", "K": "i32", "stride_am": "i32", "stride_bk": "i32",
             "stride_cm": "i32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"},
            {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, {"num_warps": w},
            div16=["a_ptr", "b_ptr", "c_ptr", "K", "stride_am", "stride_bk", "stride_cm"])

    # integer argument specialised to 1 (and the same kernel without the specialisation)
    sc_sig = {"src_ptr": "*fp32", "dst_ptr": "*fp32", "n_elements": "i32", "src_stride": "i32", "BLOCK": "constexpr"}
    add("strided_copy/stride1/b1024", "kernels/strided_copy.py", "strided_copy_kernel", sc_sig, {"BLOCK": 1024},
        {"num_warps": 4}, div16=["src_ptr", "dst_ptr"], one=["src_stride"])
    add("strided_copy/stride_any/b1024", "kernels/strided_copy.py", "strided_copy_kernel", sc_sig, {"BLOCK": 1024},
        {"num_warps": 4}, div16=["src_ptr", "dst_ptr"])

    # same kernel name, two source files
    for src in ("scale_a", "scale_b"):
        add(f"{src}/fp32/b1024", f"kernels/{src}.py", "scale_kernel",
            {"x_ptr": "*fp32", "out_ptr": "*fp32", "factor": "fp32", "n_elements": "i32", "BLOCK": "constexpr"},
            {"BLOCK": 1024}, {"num_warps": 4}, div16=["x_ptr", "out_ptr"])
    return cfgs


CONFIGS = build_configs()


def configs_for(name: str) -> list[dict]:
    version, backend, _target, _ws = SNAPSHOTS[name]
    return [c for c in CONFIGS if backend in c["backends"] and vtuple(version) >= vtuple(c["min_version"])]


# --------------------------------------------------------------------------------------------
# Worker mode: runs inside the Triton venv. Imports nothing outside the standard library and Triton.
# --------------------------------------------------------------------------------------------

def _folders(cache: Path) -> set[str]:
    return {p.name for p in cache.iterdir() if p.is_dir()} if cache.exists() else set()


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # prefer the most informative line (MLIR/LLVM errors put the reason on a later line)
    for ln in lines:
        if "error:" in ln.lower() and len(ln) < 400:
            return ln
    return (lines[0] if lines else type(exc).__name__)[:400]



# --------------------------------------------------------------------------------------------
# Worker helpers: a stand-in driver and stand-in tensors, so that each release's own JIT
# (JITFunction.run(..., warmup=True)) specialises the arguments and compiles, without a GPU.
# --------------------------------------------------------------------------------------------

STANDIN_DATA_PTR = 0x7F0000000000  # 16-byte aligned (any multiple of 16 gives the same specialisation)
STANDIN_BYTES = 16 * 1024          # ptr_range()/storage size: well under 2 GB


def make_standin_tensor():
    class StandInTensor:
        """What the JIT needs from a tensor argument: dtype, data_ptr() (16-aligned) and, for the HIP
        backend's 32-bit pointer-range hook (3.2+), ptr_range() (16 KiB)."""

        def __init__(self, dtype):
            self.dtype = dtype

        def data_ptr(self):
            return STANDIN_DATA_PTR

        def ptr_range(self):
            return STANDIN_BYTES

    return StandInTensor


def install_standin_driver(target, version):
    """Make the release's runtime driver report `target` (device 0, stream 0)."""
    class StandInDriver:
        def is_active(self):
            return True

        def get_current_target(self):
            return target

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def set_current_device(self, device):
            pass

        def get_active_torch_device(self):
            raise RuntimeError("no device")

        def get_device_interface(self):
            raise RuntimeError("no device")

        def get_benchmarker(self):
            raise RuntimeError("no device")

        def get_empty_cache_for_benchmark(self):
            raise RuntimeError("no device")

    if version >= (3, 0):
        from triton.runtime import driver as drv
        drv.set_active(StandInDriver())
    else:  # 2.3.x: triton.runtime.driver.driver is a LazyProxy around the CUDA driver
        from triton.runtime.driver import driver as proxy
        proxy._obj = StandInDriver()
        # 2.3.x builds and imports the C launcher during compile (needs libcuda.so, absent here).
        # The launcher is a separate cache folder (__triton_launcher.so); the kernel folder is
        # complete before this step, so skip it.
        from triton.compiler import compiler as tcc
        from triton.compiler.backends.cuda import CUDABackend

        class KernelStub:
            def __init__(self, so_path, metadata_path):
                self.metadata_path = str(metadata_path)
                self.metadata = json.loads(Path(metadata_path).read_text())

        CUDABackend.make_launcher_stub = lambda self, src, metadata: None
        tcc.CompiledKernel = KernelStub
        if "torch" not in sys.modules:
            try:
                import torch  # noqa: F401
            except ImportError:
                # 2.3.x asks `torch.version.hip is not None` (triton.common.build.is_hip) in tl.dot and
                # elsewhere; on a CUDA machine's PyTorch that is None. Stub just that.
                import types
                stub = types.ModuleType("torch")
                stub.version = types.SimpleNamespace(hip=None, cuda="12.1")
                sys.modules["torch"] = stub
    if version >= (3, 6) and "torch" not in sys.modules:
        try:
            import torch  # noqa: F401
        except ImportError:
            # HIPBackend.is_within_2gb (3.6+) does `import torch` before looking at ptr_range();
            # a stub keeps that import working on a machine without PyTorch.
            import types
            stub = types.ModuleType("torch")
            stub.Tensor = type("Tensor", (), {})
            sys.modules["torch"] = stub


_CAPTURED: list = []


def capture_ast_sources() -> list:
    """Record every ASTSource the JIT builds (it is what the JIT hands to compile())."""
    from triton.compiler import compiler as tcc
    orig = tcc.ASTSource.__init__
    if getattr(orig, "_kdb_capture", False):
        return _CAPTURED

    def init(self, *a, **kw):
        orig(self, *a, **kw)
        _CAPTURED.append(self)

    init._kdb_capture = True
    tcc.ASTSource.__init__ = init
    return _CAPTURED


def kernel_folder(k) -> str:
    """Cache folder of a compiled kernel: get_cache_manager(kernel.hash) (3.x); 2.3.x kernels have no
    hash attribute, their folder is the one holding the metadata JSON compile() returned."""
    if hasattr(k, "metadata_path"):
        return Path(k.metadata_path).parent.name
    from triton.runtime.cache import get_cache_manager
    return Path(get_cache_manager(k.hash).cache_dir).name


def _jsonable(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


def describe_src(src, fn, version) -> dict:
    """What the JIT handed to compile(): per-argument attributes (arg_attrs), the signature as the JIT
    built it (jit_signature, argument names) and the arguments it turned into constants (jit_constants)."""
    names = fn.arg_names

    def nm(k):
        if isinstance(k, tuple):
            k = k[0] if len(k) == 1 else k
        if isinstance(k, int):
            return names[k]
        return str(k)

    attrs: dict[str, list] = {}
    a = src.attrs
    if isinstance(a, dict):  # 3.3+: {(i,): [[name, value], ...]}
        for k, lst in a.items():
            attrs.setdefault(nm(k), []).extend([list(x) for x in lst])
    elif hasattr(a, "get_fn_attrs"):  # 3.2: AttrsDescriptor subclass per backend
        for k, lst in a.get_fn_attrs().items():
            attrs.setdefault(nm(k), []).extend([list(x) for x in lst])
    else:  # 2.3 / 3.0 / 3.1 dataclass of argument indices (ast_to_ttir turns it into attributes)
        for i in sorted(a.divisible_by_16 or ()):
            attrs.setdefault(nm(i), []).append(["tt.divisibility", 16])
        for i in sorted(getattr(a, "divisible_by_8", None) or ()):
            attrs.setdefault(nm(i), []).append(
                ["tt.max_divisibility", 16 if i in (a.divisible_by_16 or ()) else 8])
    sig = {nm(k): v for k, v in src.signature.items()}
    consts = {nm(k): _jsonable(v) for k, v in (src.constants or {}).items()}
    if version < (3, 3):
        eq1 = getattr(a, "equal_to_1", None)
        if eq1 is None and hasattr(a, "arg_properties"):
            eq1 = a.arg_properties.get("tt.equal_to", [])
        for i in sorted(eq1 or ()):
            consts.setdefault(nm(i), 1)
    # attributes the JIT put on arguments it also turned into constants (constexprs, and up to 3.2 the
    # constexpr indices of its divisibility set) never reach the IR: leave them out
    attrs = {k: v for k, v in attrs.items() if k not in consts and v}
    return {"arg_attrs": dict(sorted(attrs.items(), key=lambda kv: names.index(kv[0]) if kv[0] in names else 0)),
            "jit_signature": sig, "jit_constants": consts}


def worker_main(args) -> int:
    import importlib.util
    import warnings

    import triton

    spec = json.loads(Path(args.worker).read_text())
    version = vtuple(triton.__version__.split("+")[0])
    src_root = Path(spec["src_root"])
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    backend, arch, warp = spec["backend"], spec["target"], spec["warp_size"]
    if version >= (3, 0):
        from triton.backends.compiler import GPUTarget
        target = GPUTarget(backend, arch, warp)
    else:
        target = (backend, arch)  # 2.3.x: the CUDA driver's get_current_target() returns ("cuda", capability)
    out = open(spec["results"], "a")
    modules: dict[str, object] = {}

    def load(source: str):
        if source not in modules:
            mod_name = "kdb_corpus_" + Path(source).stem
            sp = importlib.util.spec_from_file_location(mod_name, src_root / source)
            mod = importlib.util.module_from_spec(sp)
            sys.modules[mod_name] = mod
            sp.loader.exec_module(mod)
            modules[source] = mod
        return modules[source]

    # ---- drive the release's own JIT (JITFunction.run(..., warmup=True)) offline ----
    captured = capture_ast_sources()
    install_standin_driver(target, version)
    TensorCls = make_standin_tensor()
    import triton.language as tl
    tl_dtype = {"fp32": tl.float32, "fp16": tl.float16, "bf16": tl.bfloat16}

    def jit_args(cfg):
        """Arguments as a user would pass them: 16-aligned stand-in tensors (<2 GB), and integers whose
        values give the config's div16/one choices (1 -> equal to 1, 1024 -> divisible by 16, 17 -> neither)."""
        kw = {}
        for n, t in cfg["sig"].items():
            if t == "constexpr":
                kw[n] = cfg["constexprs"][n]
            elif t.startswith("*"):
                kw[n] = TensorCls(tl_dtype[t[1:]])
            elif t == "i32":
                kw[n] = 1 if n in cfg["one"] else (1024 if n in cfg["div16"] else 17)
            elif t == "fp32":
                kw[n] = 0.5
            else:
                raise ValueError(f"no stand-in value for type {t}")
        return kw

    def jit_compile(fn, cfg):
        captured.clear()
        k = fn.run(grid=(1,), warmup=True, **jit_args(cfg), **dict(cfg["options"]))
        if not captured:
            raise RuntimeError("the JIT did not build an ASTSource (kernel already in its in-memory cache?)")
        return k, describe_src(captured[-1], fn, version)

    def emit(rec):
        out.write(json.dumps(rec, sort_keys=True) + "\n")
        out.flush()

    for cfg in spec["configs"]:
        emit({"event": "start", "config": cfg["config"]})
        before = _folders(cache)
        t0 = time.time()
        try:
            fn = getattr(load(cfg["source"]), cfg["kernel"])
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                k, spec_info = jit_compile(fn, cfg)
            new = sorted(_folders(cache) - before)
            key = kernel_folder(k)
            if new and new != [key]:
                raise RuntimeError(f"cache diff {new} disagrees with kernel hash folder {key}")
            meta = json.loads((cache / key / f"{cfg['kernel']}.json").read_text())
            applied = {o: meta.get(o) for o in cfg["options"]}
            notes = [str(w.message).splitlines()[0] for w in caught if "kpack" in str(w.message)]
            if cfg["note"]:
                notes.append(cfg["note"])
            for o, v in cfg["options"].items():
                if applied.get(o) != v:
                    notes.append(f"requested {o}={v}, compiler applied {o}={applied.get(o)}")
            emit({"event": "ok", "config": cfg["config"], "cache_key": key, "reused": not new,
                  "applied_options": applied, "notes": notes, "seconds": round(time.time() - t0, 2), **spec_info})
        except BaseException as exc:  # noqa: BLE001 - record and continue
            emit({"event": "fail", "config": cfg["config"], "reason": _one_line(exc),
                  "new_folders": sorted(_folders(cache) - before)})
    if spec.get("autotune"):
        run_autotune(spec, cache, target, load, emit)
    out.close()
    return 0


AUTOTUNE_NOTE = ("timings in the .autotune.json are deterministic placeholders written by the corpus "
                 "build's stand-in benchmark (no GPU was used); they are not measurements")


def run_autotune(spec, cache, target, load, emit):
    """Drive triton.runtime.autotuner.Autotuner (cache_results=True) without a GPU.

    A stand-in driver reports the target; the stand-in benchmark compiles each config through
    Triton's own JIT (warmup, no launch) and returns placeholder timings. Triton's Autotuner then
    writes NAME.autotune.json itself (Autotuner.check_disk_cache)."""
    import triton
    from triton.runtime import driver as drv
    from triton.runtime.jit import MockTensor
    import triton.language as tl

    cid_base = "autotune/autotuned_axpy"
    source = "kernels/autotuned_add.py"
    emit({"event": "start", "config": cid_base})
    try:
        mod = load(source)
        jitfn = mod.autotuned_axpy_kernel

        class StandInDriver:
            def get_current_target(self):
                return target

            def get_current_device(self):
                return 0

            def get_current_stream(self, device=None):
                return 0

            def get_benchmarker(self):
                return placeholder_bench

            def get_device_interface(self):
                raise RuntimeError("no device")

            def get_empty_cache_for_benchmark(self):
                raise RuntimeError("no device")

        compiled: list[tuple[str, dict, str, bool]] = []
        spec_infos: list[dict] = []
        import triton as _t
        version = vtuple(_t.__version__.split("+")[0])
        state = {"config": None}

        class WarmupOnly:
            """Stands for the JITFunction inside the Autotuner: run() compiles (warmup) but never launches."""

            def __init__(self, fn):
                self.fn = fn  # Autotuner.check_disk_cache unwraps .fn down to the JITFunction
                self.arg_names = fn.arg_names

            def run(self, *args, **kwargs):
                before = _folders(cache)
                cap = capture_ast_sources()
                cap.clear()
                k = self.fn.run(*args, grid=(1,), warmup=True, **kwargs)
                spec_infos.append(describe_src(cap[-1], self.fn, version) if cap else {})
                new = sorted(_folders(cache) - before)
                from triton.runtime.cache import get_cache_manager
                key = Path(get_cache_manager(k.hash).cache_dir).name
                if new and new != [key]:
                    raise RuntimeError(f"cache diff {new} disagrees with kernel hash folder {key}")
                compiled.append((state["config"], dict(kwargs), key, not new))
                return k

        def placeholder_bench(kernel_call, quantiles=None, **_):
            kernel_call()  # compiles this config through Triton's JIT (warmup=True, no launch)
            _cfg, kw, _key, _reused = compiled[-1]
            t = round(0.01 * (1 + len(compiled)), 4)  # deterministic placeholder, NOT a measurement
            return [t, t, t] if quantiles else t

        confs = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in mod.AUTOTUNE_CONFIGS]
        tuner = triton.autotune(configs=confs, key=["n_elements"], cache_results=True,
                                do_bench=placeholder_bench)(jitfn)
        tuner.fn = WarmupOnly(jitfn)
        drv.set_active(StandInDriver())
        class SmallMockTensor(MockTensor):
            """MockTensor of a 4096-element buffer (HIP 3.6+ asks ptr_range() for buffer-op specialisation)."""

            def ptr_range(self):
                return 4096 * 4

        if "torch" not in sys.modules:
            try:
                import torch  # noqa: F401
            except ImportError:
                # HIPBackend.is_within_2gb (3.6+) does `import torch` before looking at ptr_range();
                # a stub keeps that import working on a machine without PyTorch.
                import types
                stub = types.ModuleType("torch")
                stub.Tensor = type("Tensor", (), {})
                sys.modules["torch"] = stub
        x, y, o = (SmallMockTensor(tl.float32) for _ in range(3))
        before_all = _folders(cache)
        tuner.run(x, y, o, 4096, 2.0)
        new_all = _folders(cache) - before_all
        kernel_keys = {c[2] for c in compiled}
        at_folders = sorted(f for f in new_all - kernel_keys
                            if (cache / f / f"{jitfn.__name__}.autotune.json").exists())
        for cfg_i, (b, w) in enumerate(mod.AUTOTUNE_CONFIGS):
            matches = [c for c in compiled if c[1].get("BLOCK") == b and c[1].get("num_warps") == w]
            if not matches:
                emit({"event": "fail", "config": f"{cid_base}/b{b}/w{w}", "reason": "autotuner did not compile it"})
                continue
            _, kw, key, reused = matches[0]
            info = spec_infos[compiled.index(matches[0])]
            emit({"event": "ok", "config": f"{cid_base}/b{b}/w{w}", "cache_key": key, "reused": reused,
                  "kernel": jitfn.__name__, "source": source,
                  "constexprs": {"BLOCK": b}, "options": {"num_warps": w},
                  "applied_options": {"num_warps": w}, "notes": [AUTOTUNE_NOTE],
                  "autotune_folder": at_folders[0] if at_folders else None, **info,
                  "sig_types": {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32",
                                "alpha": "fp32"}})
        if not at_folders:
            emit({"event": "fail", "config": cid_base, "reason": "no .autotune.json folder was written"})
        else:
            emit({"event": "autotune", "config": cid_base, "folders": at_folders})
    except BaseException as exc:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        emit({"event": "fail", "config": cid_base, "reason": _one_line(exc)})


# --------------------------------------------------------------------------------------------
# Host mode
# --------------------------------------------------------------------------------------------

def ensure_venv(workdir: Path, version: str, wheelhouse: Path) -> Path:
    venv = workdir / "venvs" / f"t{version}"
    py = venv / "bin" / "python"
    if py.exists():
        r = subprocess.run([str(py), "-c", "import triton; print(triton.__version__)"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == version:
            return py
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    cmd = [str(py), "-m", "pip", "install", "-q", f"triton=={version}"]
    if vtuple(version) < (3, 0):
        cmd.append("numpy<2")  # 2.3.x imports numpy (runtime/interpreter.py) without declaring it
    if wheelhouse and wheelhouse.is_dir() and list(wheelhouse.glob(f"triton-{version}-*.whl")):
        cmd += ["--find-links", str(wheelhouse)]
    subprocess.run(cmd, check=True)
    return py


def stage_sources(workdir: Path) -> Path:
    """Copy corpus/kernels/*.py to WORKDIR/src/kernels (fixed path, pinned mtimes). Called once per run."""
    src_root = workdir / "src"
    dest = src_root / "kernels"
    wanted = sorted((CORPUS / "kernels").glob("*.py"))
    if dest.exists() and sorted(p.name for p in dest.iterdir()) == [f.name for f in wanted] and all(
            (dest / f.name).read_bytes() == f.read_bytes() and (dest / f.name).stat().st_mtime == SOURCE_MTIME
            for f in wanted):
        return src_root  # already staged (another build may be reading it)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for f in sorted((CORPUS / "kernels").glob("*.py")):
        shutil.copyfile(f, dest / f.name)
        os.utime(dest / f.name, (SOURCE_MTIME, SOURCE_MTIME))
    os.utime(dest, (SOURCE_MTIME, SOURCE_MTIME))
    return src_root


def pack(cache: Path, archive: Path) -> tuple[int, int]:
    import zstandard

    buf = io.BytesIO()
    files = 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*"))
        for rel in entries:
            p = cache / rel
            ti = tarfile.TarInfo(rel)
            ti.mtime = 0
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            if p.is_symlink():
                raise RuntimeError(f"unexpected symlink in cache: {rel}")
            if p.is_dir():
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                tar.addfile(ti)
            else:
                data = p.read_bytes()
                ti.size = len(data)
                ti.mode = 0o755 if os.access(p, os.X_OK) else 0o644
                tar.addfile(ti, io.BytesIO(data))
                files += 1
    comp = zstandard.ZstdCompressor(level=19, threads=0, write_checksum=True).compress(buf.getvalue())
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(comp)
    return files, len(comp)


def count_kernels(cache: Path) -> int:
    n = 0
    for d in cache.iterdir():
        if d.is_dir() and any(f.suffix == ".json" and not f.name.startswith("__grp__")
                              and not f.name.endswith(".autotune.json") for f in d.iterdir()):
            n += 1
    return n


def build_snapshot(name: str, args) -> dict:
    version, backend, target, warp = SNAPSHOTS[name]
    workdir: Path = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    py = ensure_venv(workdir, version, args.wheelhouse)
    src_root = workdir / "src"
    cache = workdir / "cache" / name
    if cache.exists():
        shutil.rmtree(cache)
    cache.mkdir(parents=True)
    jobdir = workdir / "jobs" / name
    if jobdir.exists():
        shutil.rmtree(jobdir)
    jobdir.mkdir(parents=True)
    results = jobdir / "results.jsonl"
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.path.dirname(str(py)) + ":/usr/bin:/bin",
        "HOME": str(home),
        "TRITON_HOME": str(home),
        "TRITON_CACHE_DIR": str(cache),
        "PYTHONHASHSEED": "0",
        "LANG": "C.UTF-8",
    }
    if backend == "hip":
        env["TRITON_HIP_LLD_PATH"] = args.lld
    configs = configs_for(name)
    if args.only:
        configs = [c for c in configs if any(fnmatch.fnmatch(c["config"], pat) for pat in args.only)]
    want_autotune = vtuple(version) >= (3, 4) and not args.no_autotune
    remaining = list(configs)
    crash_fails = []
    start_times: dict[str, float] = {}
    autotune_pending = want_autotune
    while remaining or autotune_pending:
        spec = {"src_root": str(src_root), "backend": backend, "target": target, "warp_size": warp,
                "results": str(results), "configs": remaining, "autotune": autotune_pending}
        spec_path = jobdir / "spec.json"
        spec_path.write_text(json.dumps(spec))
        t0 = time.time()
        skip = len(results.read_text().splitlines()) if results.exists() else 0  # earlier workers' events
        log = (jobdir / "worker.log").open("a")
        proc = subprocess.Popen([str(py), str(Path(__file__).resolve()), "--worker", str(spec_path)], env=env,
                                cwd=str(workdir), stdout=log, stderr=subprocess.STDOUT)
        timed_out = None
        while proc.poll() is None:
            time.sleep(1)
            lines = results.read_text().splitlines()[skip:] if results.exists() else []
            last = json.loads(lines[-1]) if lines else None
            if last and last["event"] == "start":
                started_at = start_times.setdefault(last["config"], time.time())
                if time.time() - started_at > args.config_timeout:
                    timed_out = last["config"]
                    proc.kill()
                    proc.wait()
        log.close()
        rc = proc.returncode
        events = [json.loads(ln) for ln in results.read_text().splitlines() if ln.strip()]
        done = {e["config"] for e in events if e["event"] != "start"}
        if rc == 0:
            break
        # worker died (crash or timeout): the last started config without a result is the culprit
        done |= {f["config"] for f in crash_fails}
        started = [e["config"] for e in events if e["event"] == "start" and e["config"] not in done]
        culprit = started[-1] if started else None
        if culprit:
            if timed_out == culprit:
                reason = (f"compile did not finish within {args.config_timeout}s (killed; the partial cache "
                          "folder Triton had written so far is kept as is)")
            else:
                tail = ((jobdir / "worker.log").read_text().strip().splitlines() or [f"rc={rc}"])[-1][:300]
                reason = f"compiler process died (rc={rc}): {tail}"
            crash_fails.append({"config": culprit, "reason": reason})
            done.add(culprit)
        if culprit and culprit.startswith("autotune"):
            autotune_pending = False
        remaining = [c for c in remaining if c["config"] not in done]
        if not culprit:
            raise RuntimeError(f"worker for {name} failed (rc={rc}) without a started config; see {jobdir}/worker.log")
        print(f"  [{name}] worker crashed on {culprit}, restarting ({time.time() - t0:.0f}s)", flush=True)

    events = [json.loads(ln) for ln in results.read_text().splitlines() if ln.strip()]
    by_id = {c["config"]: c for c in configs}
    records, failed = [], []
    for e in events:
        if e["event"] == "ok":
            c = by_id.get(e["config"])
            if c is not None:
                rec = {"config": c["config"], "kernel": c["kernel"], "source": c["source"],
                       "cache_key": e["cache_key"], "constexprs": c["constexprs"], "options": c["options"],
                       "specialized_to_1": c["one"], "divisible_by_16": c["div16"],
                       "signature": {k: v for k, v in c["sig"].items() if v != "constexpr"},
                       "applied_options": e["applied_options"], "reused_folder": e["reused"],
                       "notes": e["notes"], "arg_attrs": e["arg_attrs"], "jit_signature": e["jit_signature"],
                       "jit_constants": e["jit_constants"]}
            else:
                rec = {"config": e["config"], "kernel": e["kernel"], "source": e["source"],
                       "cache_key": e["cache_key"], "constexprs": e["constexprs"], "options": e["options"],
                       "specialized_to_1": [], "divisible_by_16": None, "signature": e["sig_types"],
                       "applied_options": e["applied_options"], "reused_folder": e["reused"],
                       "notes": e["notes"], "autotune_folder": e["autotune_folder"],
                       "arg_attrs": e.get("arg_attrs"), "jit_signature": e.get("jit_signature"),
                       "jit_constants": e.get("jit_constants")}
            records.append(rec)
        elif e["event"] == "fail":
            failed.append({"config": e["config"], "reason": e["reason"]})
    failed += crash_fails
    if vtuple(version) < (3, 4):
        failed.append({"config": "autotune/autotuned_axpy",
                       "reason": f"skipped: Triton {version} has no Autotuner disk cache (cache_results is 3.4+)"})

    archive_rel = f"snapshots/{name}.tar.zst"
    files, size = pack(cache, CORPUS / archive_rel)
    sha = hashlib.sha256((CORPUS / archive_rel).read_bytes()).hexdigest()
    rec_rel = f"records/{name}.json"
    (CORPUS / "records").mkdir(exist_ok=True)
    (CORPUS / rec_rel).write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    entry = {"triton_version": version, "backend": backend, "target": str(target) if backend == "hip" else f"sm{target}",
             "warp_size": warp, "archive": archive_rel, "sha256": sha, "archive_bytes": size,
             "kernel_count": count_kernels(cache), "file_count": files,
             "build_command": f"python corpus/build.py --snapshot {name}", "records": rec_rel, "failed": failed}
    return entry


def update_manifest(updates: dict) -> None:
    path = CORPUS / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {"snapshots": {}}
    manifest["snapshots"].update(updates)
    manifest["snapshots"] = dict(sorted(manifest["snapshots"].items()))
    path.write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--snapshot", action="append", choices=sorted(SNAPSHOTS), help="snapshot to (re)build; repeatable")
    ap.add_argument("--all", action="store_true", help="rebuild every snapshot")
    ap.add_argument("--list", action="store_true", help="list snapshots and their configs, then exit")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                    help=f"work dir outside the repo for venvs, fixed source copy and caches (default {DEFAULT_WORKDIR};"
                         " env KDB_CORPUS_WORKDIR). Keep it fixed for byte-identical rebuilds.")
    ap.add_argument("--wheelhouse", type=Path, default=DEFAULT_WHEELHOUSE,
                    help=f"folder with Triton wheels (default {DEFAULT_WHEELHOUSE}); PyPI is used when absent")
    ap.add_argument("--lld", default=os.environ.get("TRITON_HIP_LLD_PATH", DEFAULT_LLD),
                    help=f"AMD-capable ld.lld for HIP targets (default {DEFAULT_LLD})")
    ap.add_argument("--config-timeout", type=int, default=150,
                    help="seconds one config may compile before it is killed and recorded as failed (default 150)")
    ap.add_argument("--jobs", type=int, default=1, help="snapshots built in parallel (default 1)")
    ap.add_argument("--only", action="append", help=argparse.SUPPRESS)  # debugging: config-id glob
    ap.add_argument("--no-autotune", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-manifest", action="store_true", help="do not update corpus/manifest.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args)
    if args.list:
        for n in SNAPSHOTS:
            cs = configs_for(n)
            print(f"{n}: {len(cs)} configs (+ autotune)" if vtuple(SNAPSHOTS[n][0]) >= (3, 4) else f"{n}: {len(cs)} configs")
        for c in CONFIGS:
            print(f"  {c['config']}  [{','.join(c['backends'])}]")
        return 0
    names = sorted(SNAPSHOTS) if args.all else (args.snapshot or [])
    if not names:
        ap.error("give --snapshot NAME (repeatable) or --all")
    args.workdir.mkdir(parents=True, exist_ok=True)
    for v in sorted({SNAPSHOTS[n][0] for n in names}):  # venvs first, sequentially
        ensure_venv(args.workdir, v, args.wheelhouse)
    stage_sources(args.workdir)

    def one(n):
        t0 = time.time()
        entry = build_snapshot(n, args)
        return n, entry, time.time() - t0

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = [pool.submit(one, n) for n in names]  # submitted in the order given
        for fut in concurrent.futures.as_completed(futs):
            try:
                n, entry, secs = fut.result()
            except Exception as exc:  # noqa: BLE001 - one broken snapshot must not stop the others
                print(f"snapshot build failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            if not args.no_manifest:
                update_manifest({n: entry})
            print(f"{n}: {entry['kernel_count']} kernels, {entry['file_count']} files, {entry['archive_bytes']} bytes,"
                  f" {len(entry['failed'])} failed, {secs:.0f}s", flush=True)
            for f in entry["failed"]:
                print(f"  FAILED {f['config']}: {f['reason']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
