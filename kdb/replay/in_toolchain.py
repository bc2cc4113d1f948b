"""Runs inside a toolchain's own interpreter (`python in_toolchain.py < jobs.json`), where the Triton release to
replay with is installed and kdb is not: the standard library and that Triton only.

Two kinds of job, read as one JSON document on stdin ({"jobs": [...], "timeout_s": N}):

* `compile` — `triton.compile(TTIR path, target=GPUTarget(...), options=...)`, the way Triton compiles an IR file:
  the release's passes from TTGIR on, its LLVM, its linker or `ptxas`. Options the release does not have are
  dropped and named (`dropped`).
* `stages` — the stage swap of `kdb diff --why`: a stored LLIR (or PTX) run through this release's later stages
  only (`make_amdgcn`/`make_hsaco`, `make_ptx`/`make_cubin`), with the kernel's own metadata.

Each job runs in a forked child with its own TRITON_CACHE_DIR (`cache_dir`), so its folder is known exactly, a
crash or a runaway compile costs that job only, and a compile's output goes to a log, not to kdb's pipe. One JSON
line per job goes to stdout: {"id", "ok", "error" (the compiler's first error line), "dropped", "seconds"}.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import sys
import time
import traceback

_ERROR_LINE = re.compile(r"(error|Error|ERROR)\b")
# Run as a script, this file's folder (kdb/replay) is sys.path[0]: kdb's own modules there (bisect.py) would shadow
# the standard library's for Triton's imports (random imports bisect). Only the toolchain's own paths stay.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def _target(spec):
    backend, arch, warp_size = spec
    # a CUDA capability as digits: 90, or the catalog's sm90 where the JSON's target is 2.x's ["cuda", 90]
    arch = int(re.sub(r"\D", "", str(arch))) if backend == "cuda" else arch
    try:
        from triton.backends.compiler import GPUTarget
    except ImportError:  # 2.3: no backends package; a target is (backend, capability), CUDA only
        return (backend, arch)
    return GPUTarget(backend, arch, int(warp_size))


def _known_options(target):
    try:
        from triton.compiler.compiler import make_backend
    except ImportError:  # 2.3: triton.compile builds the CUDA backend itself
        from triton.compiler.backends.cuda import CUDABackend as make_backend

    backend = make_backend(target)
    return backend, {f.name for f in dataclasses.fields(backend.parse_options({}))}


def _kept(options, known):
    kept = {k: (tuple(v) if isinstance(v, list) else v) for k, v in options.items() if k in known}
    return kept, sorted(k for k in options if k not in known)


def _compile(job):
    import triton

    target = _target(job["target"])
    backend, known = _known_options(target)
    options, dropped = _kept(job.get("options") or {}, known)
    allowed = getattr(backend.parse_options(dict(options)), "allowed_dot_input_precisions", None)
    ttir, dots = _prepared_ttir(job["ttir"], job.get("source_dot_precisions"), allowed)
    _as_after_a_ptx(backend, target)
    old = triton.__version__.startswith("2.")
    if old:
        _ttir_as_given(backend)
    try:
        triton.compile(ttir, target=target, options=options)
    except Exception:
        # a compile that wrote its JSON has finished; what failed after it (a launcher, a driver) is not the compile
        if not _has_json(job["cache_dir"]):
            raise
    # 2.3 builds its launcher in a cache folder of its own (empty where the build failed): the kernel's folder only
    for folder in os.listdir(job["cache_dir"]):
        if not _has_json(os.path.join(job["cache_dir"], folder)):
            shutil.rmtree(os.path.join(job["cache_dir"], folder))
    _drop_at_sign(job["cache_dir"], old)
    _keep_ttir(job["cache_dir"], ttir, replace=old)
    return {"dropped": dropped, "dot_precision": dots}


def _as_after_a_ptx(backend, target):
    """NVIDIA 3.1-3.3 turn on LLVM's process-wide `nvptx-short-ptr` in make_ptx (translate_to_asm's flags), so a
    JIT process's every compile after its first lowers with 32-bit shared-memory pointers (the LLIR's datalayout
    `p3:32:32`; 37 of the 38 kernels of t3.2.0-sm90, the one without its first): a replay child, which made no PTX
    before, starts from that state. From 3.4 make_llir sets it itself; 3.9 passes it to every stage."""
    import inspect

    try:
        make_ptx = inspect.getsource(type(backend).make_ptx)
    except (AttributeError, OSError, TypeError):
        return
    if "'nvptx-short-ptr'" not in make_ptx or "translate_to_asm" not in make_ptx:
        return
    from triton._C.libtriton import llvm

    llvm.init_targets()
    module = 'target triple = "nvptx64-nvidia-cuda"\ndefine void @kdb_prime() {\n  ret void\n}\n'
    llvm.translate_to_asm(module, "nvptx64-nvidia-cuda", f"sm_{target.arch}", "", ["nvptx-short-ptr"], False, False)


_DOT = re.compile(r"(\btt\.dot %[\w#$.-]+, %[\w#$.-]+, %[\w#$.-]+)((?:, \w+ = \w+)*) :")
_PRECISION = re.compile(r", inputPrecision = (\w+)")


def _prepared_ttir(path, source_allowed, allowed):
    """The stored TTIR as this release would have it: its dots' unset precision (_with_dot_precision), its 2.x
    extern libraries where this toolchain has them (_relocated_libpaths). Returns (path, dots changed)."""
    with open(path) as f:
        text = f.read()
    text, dots = _with_dot_precision(text, source_allowed, allowed)
    text, libs = _relocated_libpaths(text)
    if not dots and not libs:
        return path, 0
    path = path[: -len(".ttir")] + ".replay.ttir"
    with open(path, "w") as f:
        f.write(text)
    return path, dots


def _with_dot_precision(text, source_allowed, allowed):
    """A dot at the precision the kernel's own release gives an unset one takes this release's (gfx942 allows tf32
    from 3.3: a 3.2 dot's unset ieee becomes tf32). The TTIR writes ieee, the op's default, by omitting it."""
    if not source_allowed or not allowed:
        return text, 0
    # the frontend's precision for a tl.dot that leaves it unset (3.0-3.9): tf32 where the target allows it, else ieee
    old, new = ("tf32" if "tf32" in a else "ieee" for a in (source_allowed, allowed))
    if old == new:
        return text, 0
    changed = 0

    def repoint(m):
        nonlocal changed
        attrs = m.group(2)
        found = _PRECISION.search(attrs)
        if (found.group(1) if found else "ieee") != old:
            return m.group(0)
        changed += 1
        attrs = _PRECISION.sub("", attrs)
        return m.group(1) + ("" if new == "ieee" else f", inputPrecision = {new}") + attrs + " :"

    return _DOT.sub(repoint, text), changed


_LIBPATH = re.compile(r'libpath = "([^"]+)"')


def _relocated_libpaths(text):
    """2.x's TTIR names each extern library by its path where it was compiled (`libpath = ".../site-packages/triton/
    language/../third_party/cuda/lib/libdevice.10.bc"`; 3.x's is empty): this toolchain's file of that place."""
    import triton

    root = os.path.dirname(triton.__file__)
    changed = 0

    def relocate(m):
        nonlocal changed
        old = m.group(1)
        if os.path.exists(old) or "/triton/" not in old:
            return m.group(0)
        new = os.path.normpath(os.path.join(root, old.split("/triton/", 1)[1]))
        if not os.path.exists(new):
            return m.group(0)
        changed += 1
        return f'libpath = "{new}"'

    return _LIBPATH.sub(relocate, text), changed


def _ttir_as_given(backend):
    """2.x compiles an IR file from its own stage on (3.x from the next one): the stored TTIR, which has been through
    the JIT's TTIR passes, is not run through them again (they renumber its locations and lose the def line that
    kdb's identity reads)."""
    cls = type(backend)
    add_stages = cls.add_stages

    def add(self, stages, options, *rest):
        add_stages(self, stages, options, *rest)
        stages["ttir"] = lambda src, metadata: src

    cls.add_stages = add


def _keep_ttir(cache_dir, ttir, replace=False):
    """Before 3.4 a compile from an IR file writes only the stages after it: the folder gets the TTIR it was compiled
    from (the stored one, which the JIT's folder holds too), in its group file as well; kdb identifies a kernel by
    its TTIR. 2.x writes the TTIR as its printer renumbers it: `replace`d by the stored text."""
    for root, _dirs, files in os.walk(cache_dir):
        for stem in [f[: -len(".json")] for f in files if f.endswith(".json") and not f.startswith("__grp__")]:
            path = os.path.join(root, f"{stem}.ttir")
            if os.path.exists(path):
                if replace:
                    shutil.copyfile(ttir, path)
                continue
            shutil.copyfile(ttir, path)
            group_path = os.path.join(root, f"__grp__{stem}.json")
            if not os.path.exists(group_path):
                continue
            with open(group_path) as f:
                group = json.load(f)
            children = group.get("child_paths")
            if isinstance(children, list):
                children.append(f"{stem}.ttir")
            elif isinstance(children, dict):
                children[f"{stem}.ttir"] = path
            with open(group_path, "w") as f:
                json.dump(group, f)


def _drop_at_sign(cache_dir, mangled=False):
    """Triton names the files of a compile from an IR file after `"@" + the function` (IRSource.name): name them as
    the JIT does, the kernel's name alone, so that the folder reads like any cache's. 2.x's TTIR names the function
    with its specialization suffix (`matmul_kernel_0d1d2d3de`), its JIT the files without (`mangled`)."""
    for root, _dirs, files in os.walk(cache_dir):
        for name in files:
            new = _jit_file_name(name, mangled)
            if new == name:
                continue
            if name.startswith("__grp__"):
                with open(os.path.join(root, name)) as f:
                    group = json.load(f)
                children = group.get("child_paths", {})
                if isinstance(children, list):  # 2.x: the children's file names
                    group["child_paths"] = [_jit_file_name(v, mangled) for v in children]
                else:
                    group["child_paths"] = {
                        _jit_file_name(k, mangled): os.path.join(root, _jit_file_name(os.path.basename(v), mangled))
                        for k, v in children.items()
                    }
                with open(os.path.join(root, new), "w") as f:
                    json.dump(group, f)
                os.remove(os.path.join(root, name))
            else:
                os.rename(os.path.join(root, name), os.path.join(root, new))


def _jit_file_name(name, mangled):
    """`@fn.ext` -> `fn.ext`; with `mangled`, `fn_0d1d2c.ext` -> `fn.ext`."""
    name = name.replace("@", "", 1)
    if not mangled:
        return name
    prefix = "__grp__" if name.startswith("__grp__") else ""
    stem, dot, ext = name[len(prefix) :].rpartition(".")
    head, _, tail = stem.rpartition("_")
    return prefix + (head if head and _is_kernel_suffix(tail) else stem) + dot + ext


def _is_kernel_suffix(tail):
    """2.x's kernel_suffix: each argument's index from 0, then `c` (equal to 1), `d` (divisible by 16), `e` (by 8)."""
    index, pos = 0, 0
    while pos < len(tail):
        if not tail.startswith(str(index), pos):
            return False
        pos += len(str(index))
        for flag in "cde":
            pos += tail.startswith(flag, pos)
        index += 1
    return True


def _has_json(cache_dir):
    walked = os.walk(cache_dir)
    return any(f.endswith(".json") and not f.startswith("__grp__") for _root, _dirs, files in walked for f in files)


def _backend_stages(backend, options):
    """The release's stages in order (`ttir`, `ttgir`, `llir`, then `amdgcn`/`hsaco` or `ptx`/`cubin`)."""
    stages: dict = {}
    try:
        from triton.compiler.compiler import Language
    except ImportError:  # releases before Gluon (3.4): add_stages(stages, options)
        backend.add_stages(stages, options)
    else:
        backend.add_stages(stages, options, Language.TRITON)
    return stages


def _stages(job):
    """Run a stored LLIR (first="llir") or PTX (first="ptx") through this release's later stages, with the
    kernel's own metadata (its JSON: the shared memory and launch facts Triton's earlier stages recorded) and this
    release's options; write the folder a cache would hold, `swap/`: the input, each later stage, the JSON."""
    import triton
    from triton._C.libtriton import llvm

    target = _target(job["target"])
    backend, known = _known_options(target)
    requested, dropped = _kept(job.get("options") or {}, known)
    options = backend.parse_options(requested)
    stages = _backend_stages(backend, options)
    first = job["first"]
    names = list(stages)
    if first not in names:
        raise ValueError(f"Triton {triton.__version__} has no {first!r} stage for {target.backend}: {names}")
    _as_after_make_llir(backend, llvm)
    metadata = dict(job.get("metadata") or {})
    metadata.update(dict(options.__dict__))
    metadata["target"] = target
    with open(job["input"]) as f:
        module = f.read()
    folder = os.path.join(job["cache_dir"], "swap")
    os.makedirs(folder)
    name = job["name"]
    with open(os.path.join(folder, f"{name}.{first}"), "w") as f:
        f.write(module)
    for ext in names[names.index(first) + 1 :]:
        module = stages[ext](module, metadata)
        mode, data = ("wb", module) if isinstance(module, bytes) else ("w", str(module))
        with open(os.path.join(folder, f"{name}.{ext}"), mode) as f:
            f.write(data)
    metadata["target"] = {"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size}
    metadata["triton_version"] = triton.__version__
    with open(os.path.join(folder, f"{name}.json"), "w") as f:
        json.dump(metadata, f, default=_plain)
    return {"dropped": dropped}


def _as_after_make_llir(backend, llvm):
    """The process-wide LLVM state this release's make_llir leaves for the later stages, which a swap that starts
    after it must set itself: the targets initialised (else codegen crashes), and on NVIDIA 3.4-3.8 the 32-bit
    shared-memory pointers (`nvptx-short-ptr`, a global option there; a make_ptx flag from 3.9): without it the
    PTX of a stored LLIR differs from the one the release wrote."""
    import inspect

    llvm.init_targets()
    try:
        source = inspect.getsource(type(backend).make_llir)
    except (OSError, TypeError):
        return
    if "nvidia.set_short_ptr()" in source:
        from triton._C.libtriton import nvidia

        nvidia.set_short_ptr()


def _plain(value):
    """A metadata value JSON has no type for (an enum, a dataclass, a tuple subclass) as Triton would write it."""
    if hasattr(value, "_asdict"):
        return value._asdict()
    if hasattr(value, "__dict__"):
        return value.__dict__
    return str(value)


def _first_error(log_path, exc_text):
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                if _ERROR_LINE.search(line) and line.strip():
                    return line.strip()[:400]
    except OSError:
        pass
    lines = [line.strip() for line in exc_text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "the compiler failed without a message")[:400]


def _child(job, result_path):
    log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ["TRITON_CACHE_DIR"] = job["cache_dir"]
    try:
        done = (_stages if job["kind"] == "stages" else _compile)(job)
        result = {"ok": True, **done}
    except BaseException as exc:
        text = "".join(traceback.format_exception(exc))
        os.write(2, text.encode())
        sys.stderr.flush()
        result = {"ok": False, "error": _first_error(job["log"], text)}
    with open(result_path, "w") as f:
        json.dump(result, f)
    os._exit(0)


def _run(job, timeout_s):
    os.makedirs(job["cache_dir"], exist_ok=True)
    result_path = job["log"] + ".result"
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(job, result_path)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - started > timeout_s:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"ok": False, "error": f"the compile did not finish within {timeout_s:g} s (killed)"}
        time.sleep(0.02)
    try:
        with open(result_path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        result = {"ok": False, "error": f"the compiler crashed (signal {signum})" if signum else "the compiler died"}
        result["error"] = _first_error(job["log"], result["error"]) if signum is None else result["error"]
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def _warm_triton_key():
    """Triton's own key hashes its sources and the 415 MB libtriton.so (0.6-1.3 s); computed once here, every forked
    child inherits it instead of computing it again (a replay of 120 kernels: 2.6x -> 1.5x a plain pool's time)."""
    for module in ("triton.runtime.cache", "triton.compiler.compiler"):  # 3.5+; earlier releases
        try:
            __import__(module, fromlist=["triton_key"]).triton_key()
            return
        except Exception:
            continue


def _die_with_parent():
    """A killed kdb takes its toolchain processes with it (Linux: the parent-death signal); a kernel's forked child
    finishes or times out on its own."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before the signal was asked for
            os._exit(1)
    except (OSError, AttributeError):
        pass


def main():
    request = json.load(sys.stdin)
    timeout_s = float(request.get("timeout_s") or 600)
    # what the parent reads first: the release this interpreter compiles with
    import triton

    print(json.dumps({"triton": triton.__version__}), flush=True)
    _die_with_parent()
    _warm_triton_key()
    for job in request["jobs"]:
        result = _run(job, timeout_s)
        print(json.dumps({"id": job["id"], **result}), flush=True)


if __name__ == "__main__":
    main()
