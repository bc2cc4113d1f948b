#!/usr/bin/env python3
"""Recompile the Triton kernels that TorchInductor generated (on an H100, torch 2.11) for AMD
gfx942 on a CPU, the way Inductor builds them on ROCm, and record which generated kernel and
config made which Triton cache folder. That record is the ground truth of kdb's matching tests.

Runs inside one virtual environment per Triton release (torch 2.13 CPU wheel + that Triton):

    /var/tmp/kdb-inductor/venv-3.6.0/bin/python corpus/inductor/recompile_amd.py \
        --scenario gpt2_train --src /var/tmp/kdb-inductor/src/gpt2_train \
        --cache /var/tmp/kdb-inductor/out/gpt2_train-t3.6.0-gfx942 \
        --records corpus/inductor/amd/records/gpt2_train-t3.6.0-gfx942.json --jobs 2

(`corpus/inductor/amd/README.md` has the whole procedure: unpacking, venvs, packing.)

How a module becomes compiles (torch 2.13's own code does the work, on a torch that believes it
is a ROCm build):
  * `torch.version.hip` is set, `triton_helpers.set_driver_to_gpu` is stubbed (no GPU here);
  * the decorators `triton_heuristics.pointwise/reduction/persistent_reduction/template` are
    wrapped so that, before torch's heuristics run, the module's CUDA metadata is turned into what
    Inductor's ROCm codegen would have written: `triton_meta['device']` = a gfx942 (MI300X)
    DeviceProperties, `inductor_meta['is_hip'] = True` (so `debug` is False), `tt.pointer_range 32`
    on every pointer argument as torch 2.13's `config_of` adds on ROCm (none when the kernel has
    atomic adds, codegen/triton.py), and for templates num_stages = 2 (ROCm GEMM/conv heuristics
    use `get_backend_num_stages()` = 2 on HIP) plus the ROCm template meta (matrix_instr_nonkdim 16,
    kpack 1) in triton_meta, which torch 2.13 does not forward to triton.compile;
  * `cached_autotune` gets `caching_autotuner_cls=Recorder`: a CachingAutotuner that only records
    (fn, configs); the local autotune cache (`*.best_config`) is not consulted.
Each config is then compiled directly: `triton.compile(ASTSource(fn, signature, constants, attrs),
target=GPUTarget('hip', 'gfx942', 64), options=...)` with the options
`CachingAutotuner._create_compile_options` builds on HIP. One forked process per compile (at most
--jobs at once, --timeout seconds each), so a crash or a runaway compile is recorded, not fatal.
`--check N` recompiles N configs through torch's own `CachingAutotuner._precompile_config` (in a
scratch cache) and compares folder names.
"""
from __future__ import annotations

import argparse
import base64
import functools
import importlib.util
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path

ARCH = "gfx942"
HIP_VERSION = "7.0.51831"  # what torch.version.hip reads like on a ROCm 7.0 build
HEURISTICS = ("pointwise", "reduction", "persistent_reduction", "template")
HIP_OPTION_KEYS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")


def setup_rocm_torch():
    import torch

    torch.version.hip = HIP_VERSION
    from torch._inductor.runtime import hints, triton_helpers, triton_heuristics as th

    triton_helpers.set_driver_to_gpu = lambda: None
    # benchmark modules import the raw-stream getter a CUDA/ROCm torch has; the CPU wheel has none
    if not hasattr(torch._C, "_cuda_getCurrentRawStream"):
        torch._C._cuda_getCurrentRawStream = lambda index: 0
    dev = hints.DeviceProperties(
        type="hip", index=0, multi_processor_count=304, cc=ARCH, major=9,
        regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048,
        max_threads_per_block=1024, warp_size=64,
    )
    return torch, th, dev


RECORDED: list[dict] = []
CURRENT: dict = {}


def pointer_indices(sig: dict) -> list[int]:
    out = []
    for i, (name, ty) in enumerate(sig.items()):
        if isinstance(ty, str) and ty.startswith("*") and not name.startswith("ws_ptr"):
            out.append(i)
    return out


def rocmify(kind, triton_meta, inductor_meta, dev):
    """The module's (CUDA) metadata as Inductor's ROCm codegen would have written it."""
    triton_meta = dict(triton_meta)
    inductor_meta = dict(inductor_meta or {})
    triton_meta["device"] = dev
    inductor_meta["is_hip"] = True
    add_range = kind == "template" or not inductor_meta.get("atomic_add_found", False)
    cfgs = []
    for c in triton_meta.get("configs", [{}]):
        c = {k: [list(a) for a in v] for k, v in dict(c).items()}
        if add_range:
            for i in pointer_indices(triton_meta["signature"]):
                attrs = c.setdefault((i,), [])
                if ["tt.pointer_range", 32] not in attrs:
                    attrs.append(["tt.pointer_range", 32])
        cfgs.append(dict(sorted(c.items())))
    triton_meta["configs"] = cfgs
    if kind == "template":
        # select_algorithm.TritonTemplateKernel.jit_lines: ROCmGemmConfig/ROCmConvConfig defaults
        triton_meta["matrix_instr_nonkdim"] = 16
        triton_meta["kpack"] = 1
    return triton_meta, inductor_meta


def install_wrappers(th, dev):
    base = th.CachingAutotuner

    class Recorder(base):
        def __init__(self, fn, triton_meta, configs, **kwargs):
            self._rec = dict(fn=fn, triton_meta=triton_meta, configs=list(configs),
                             inductor_meta=kwargs.get("inductor_meta"),
                             heuristic=CURRENT.get("kind"),
                             size_hints=kwargs.get("size_hints"))
            RECORDED.append(self._rec)
            try:
                super().__init__(fn, triton_meta, configs, **kwargs)
                self._rec["autotuner"] = self
            except Exception as e:  # recorded; compiles do not need the autotuner
                self._rec["autotuner_error"] = f"{type(e).__name__}: {e}"

    orig_cached = th.cached_autotune
    th.check_autotune_cache = lambda configs, filename, inductor_meta: (configs, None, {})
    th.cached_autotune = functools.partial(orig_cached, caching_autotuner_cls=Recorder)

    def wrap(kind):
        orig = getattr(th, kind)

        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            kwargs["triton_meta"], kwargs["inductor_meta"] = rocmify(
                kind, kwargs["triton_meta"], kwargs.get("inductor_meta"), dev)
            if kind == "template":
                kwargs["num_stages"] = 2
            CURRENT["kind"] = kind
            return orig(*args, **kwargs)

        setattr(th, kind, wrapper)

    for k in HEURISTICS:
        wrap(k)
    return Recorder


def list_modules(src: Path) -> tuple[list[Path], list[Path]]:
    mods, wrappers = [], []
    for p in sorted(src.glob("??/c*.py")):
        text = p.read_text()
        if "async_compile.triton(" in text:
            wrappers.append(p)  # output-code modules; their kernels are also standalone modules
        elif "@triton_heuristics." in text:
            mods.append(p)
    return mods, wrappers


def load_module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fmt(v):
    if hasattr(v, "__name__") and not isinstance(v, (int, float, str, bool)):
        return str(v)
    return v


def jsonable(v):
    if isinstance(v, dict):
        return {str(k if not isinstance(k, tuple) else list(k)): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


def build_jobs(scenario: str, src: Path, dev):
    """Import every module and return one job per (kernel, config)."""
    mods, wrappers = list_modules(src)
    jobs, import_fail = [], []
    for p in mods:
        rel = p.relative_to(src).as_posix()
        start = len(RECORDED)
        try:
            load_module(p)
        except Exception as e:
            import_fail.append({"module": rel, "reason": f"{type(e).__name__}: {e}".splitlines()[0][:300]})
            continue
        for rec in RECORDED[start:]:
            fn = rec["fn"]
            tm, im = rec["triton_meta"], rec["inductor_meta"] or {}
            sig_names = list(tm["signature"])
            for cfg in rec["configs"]:
                kw = dict(cfg.kwargs)
                backend = {k: v for k, v in kw.items() if k not in sig_names}
                consts = {k: v for k, v in kw.items() if k in sig_names}
                allconsts = {**tm.get("constants", {}), **consts}
                options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
                           "debug": bool(im.get("assert_indirect_indexing", True) and not im.get("is_hip", False)),
                           "sanitize_overflow": False}
                if "enable_fp_fusion" in tm:
                    options["enable_fp_fusion"] = tm["enable_fp_fusion"]
                options.update(backend)
                cid = "/".join([
                    p.stem, fn.__name__,
                    ",".join(f"{k}={fmt(v)}" for k, v in sorted(allconsts.items())) or "-",
                    f"w{cfg.num_warps}", f"s{cfg.num_stages}",
                    ",".join(f"{k}={v}" for k, v in sorted(backend.items())) or "-",
                ])
                jobs.append(dict(
                    scenario=scenario, module=rel, fn=fn, rec=rec, cfg=cfg,
                    inductor_kernel_name=im.get("kernel_name"), kernel_fn=fn.__name__,
                    heuristic=rec["heuristic"], config_id=cid,
                    constexprs={k: fmt(v) for k, v in allconsts.items()},
                    signature=tm["signature"], attrs=tm["configs"][0],
                    options=options, size_hints=rec["size_hints"],
                ))
    # duplicate config ids (unique_configs should prevent them) get a suffix
    seen = {}
    for j in jobs:
        n = seen.get(j["config_id"], 0)
        seen[j["config_id"]] = n + 1
        if n:
            j["config_id"] += f"#{n}"
    return jobs, import_fail, [w.relative_to(src).as_posix() for w in wrappers]


def folder_of(h: str) -> str:
    from triton.runtime.cache import get_cache_manager

    return os.path.basename(get_cache_manager(h).cache_dir)


def verify_folder(cache: Path, rec: dict, folders_now=None) -> None:
    """Cross-check a record's folder against the cache: the folder exists and its one metadata JSON
    (named after the kernel, truncated by Triton to 150 characters) carries the same hash."""
    d = cache / rec["cache_key"]
    metas = [f for f in d.iterdir() if f.suffix == ".json" and not f.name.startswith("__grp__")
             and not f.name.endswith(".autotune.json")] if d.is_dir() else []
    ok = (len(metas) == 1 and (folders_now is None or d.name in folders_now)
          and json.loads(metas[0].read_text()).get("hash") == rec["hash"])
    rec["folder_checked"] = ok
    rec["file_stem"] = metas[0].name[:-5] if len(metas) == 1 else None
    if ok:
        rec["status"] = "ok"
        rec.pop("reason", None)
    else:
        rec["status"] = "fail"
        rec["reason"] = "compiled, but its cache folder/JSON is missing or disagrees"


def recheck_main(argv):
    """recheck RECORDS CACHE: redo the folder cross-check of an existing records file."""
    path, cache = Path(argv[0]), Path(argv[1])
    d = json.loads(path.read_text())
    for rec in d["records"]:
        if rec.get("cache_key"):
            verify_folder(cache, rec)
    d["ok"] = sum(r["status"] == "ok" for r in d["records"])
    d["failed"] = d["configs"] - d["ok"]
    path.write_text(json.dumps(d, indent=1) + "\n")
    print(path.name, "ok", d["ok"], "failed", d["failed"])


def compile_direct(job):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(job["fn"], job["signature"], job["constexprs_raw"], job["attrs"])
    k = triton.compile(src, target=GPUTarget("hip", ARCH, 64), options=job["options"])
    return k


def child(job, conn, mode):
    try:
        t = time.time()
        if mode == "direct":
            k = compile_direct(job)
            h = k.hash
        else:  # torch's own path
            at = job["rec"]["autotuner"]
            r = at._precompile_config(job["cfg"])
            h = r.kernel.hash
        conn.send({"status": "ok", "hash": h, "folder": folder_of(h), "seconds": round(time.time() - t, 3)})
    except BaseException as e:
        msg = f"{type(e).__name__}: {e}".strip().splitlines()
        conn.send({"status": "fail", "reason": (msg[0] if msg else type(e).__name__)[:400],
                   "seconds": round(time.time() - t, 3)})
    finally:
        conn.close()


def run_pool(jobs, mode, nproc, timeout, log):
    ctx = mp.get_context("fork")
    results = [None] * len(jobs)
    pending = list(range(len(jobs)))
    running = {}
    done = 0
    while pending or running:
        while pending and len(running) < nproc:
            i = pending.pop(0)
            a, b = ctx.Pipe(duplex=False)
            pr = ctx.Process(target=child, args=(jobs[i], b, mode))
            pr.start()
            b.close()
            running[i] = (pr, a, time.time())
        time.sleep(0.05)
        for i, (pr, a, t0) in list(running.items()):
            res = None
            if a.poll():
                try:
                    res = a.recv()
                except EOFError:
                    res = None
                pr.join(5)
                if res is None:
                    res = {"status": "fail", "reason": f"compiler process died (exit {pr.exitcode})",
                           "seconds": round(time.time() - t0, 3)}
            elif not pr.is_alive():
                res = {"status": "fail", "reason": f"compiler process died (exit {pr.exitcode})",
                       "seconds": round(time.time() - t0, 3)}
            elif time.time() - t0 > timeout:
                pr.kill()
                pr.join()
                res = {"status": "fail", "reason": f"timeout after {timeout} s (killed)",
                       "seconds": round(time.time() - t0, 3)}
            if res is not None:
                a.close()
                del running[i]
                results[i] = res
                done += 1
                if log and (done % 25 == 0 or res["status"] != "ok"):
                    print(f"[{done}/{len(jobs)}] {jobs[i]['config_id']}: {res['status']} "
                          f"{res.get('reason', '')} {res['seconds']}s", flush=True)
    return results


def pack(cache: Path, archive: Path) -> tuple[int, int]:
    """corpus/build.py's pack() (sorted members, mtime 0, uid/gid 0, modes 0644/0755, no top-level
    folder, zstd level 19), so both kinds of snapshot are packed alike."""
    spec = importlib.util.spec_from_file_location("kdb_corpus_build", Path(__file__).resolve().parents[1] / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build.pack(cache, archive)


def grouping(ids_to_folder: dict, ids) -> set:
    """config_ids grouped by the folder they compiled to (folder names dropped)."""
    g: dict = {}
    for c in ids:
        g.setdefault(ids_to_folder[c], set()).add(c)
    return {frozenset(v) for v in g.values()}


def pack_main(argv):
    """pack OUTDIR CACHE...: one archive per snapshot cache directory, manifest.json updated."""
    import hashlib

    out = Path(argv[0])
    man_path = out / "manifest.json"
    man = json.loads(man_path.read_text()) if man_path.exists() else {"snapshots": {}}
    for c in map(Path, argv[1:]):
        snap = c.name
        scenario, rel, arch = snap.rsplit("-", 2)
        recs = json.loads((out / "records" / f"{snap}.json").read_text())
        archive = out / f"{snap}.tar.zst"
        files, size = pack(c, archive)
        kernel_folders = sum(1 for d in c.iterdir() if d.is_dir() and any(
            f.suffix == ".json" and not f.name.startswith("__grp__") for f in d.iterdir()))
        man["snapshots"][snap] = {
            "scenario": scenario, "release": rel[1:], "torch": recs["torch"],
            "target": recs["target"], "archive": archive.name,
            "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(), "bytes": size,
            "kernel_folders": kernel_folders, "files": files,
            "configs": recs["configs"], "ok": recs["ok"], "failed": recs["failed"],
            "import_failures": len(recs["import_failures"]),
            "records": f"records/{snap}.json",
            "compile_wall_seconds": recs["compile_wall_seconds"],
            "compile_seconds": recs["compile_seconds"],
            "torch_precompile_check": {k: v for k, v in (recs["torch_precompile_check"] or {}).items()},
        }
        print(snap, man["snapshots"][snap]["bytes"], kernel_folders, files, flush=True)
    man["snapshots"] = dict(sorted(man["snapshots"].items()))
    # cross-release pairing ground truth: config_ids compiled ok in both snapshots of a scenario
    by_scen: dict = {}
    for snap, m in man["snapshots"].items():
        recs = json.loads((out / m["records"]).read_text())["records"]
        by_scen.setdefault(m["scenario"], {})[m["release"]] = {
            r["config_id"]: r.get("cache_key") for r in recs if r["status"] == "ok"}
    pairs = {}
    for scen, rels in sorted(by_scen.items()):
        names = sorted(rels, key=lambda v: tuple(int(x) for x in v.split(".")))
        for a, b in zip(names, names[1:]):
            common = set(rels[a]) & set(rels[b])
            pairs[f"{scen}:{a}->{b}"] = {
                "config_ids_a": len(rels[a]), "config_ids_b": len(rels[b]), "in_both": len(common),
                "same_folder_name": sum(rels[a][c] == rels[b][c] for c in common),
                "folders_a": len(set(rels[a].values())), "folders_b": len(set(rels[b].values())),
                "same_grouping": grouping(rels[a], common) == grouping(rels[b], common),
            }
    man["pairs"] = pairs
    man_path.write_text(json.dumps(man, indent=1) + "\n")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "pack":
        return pack_main(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "recheck":
        return recheck_main(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--src", required=True, type=Path, help="unpacked Inductor cache directory")
    ap.add_argument("--cache", required=True, type=Path, help="Triton cache directory to fill (new)")
    ap.add_argument("--records", required=True, type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--check", type=int, default=0, help="configs to recompile through torch's _precompile_config")
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()

    args.cache.mkdir(parents=True, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = str(args.cache)
    os.environ.setdefault("TRITON_HIP_LLD_PATH", "/usr/lib/llvm-22/bin/ld.lld")
    os.environ.pop("AMDGCN_USE_BUFFER_OPS", None)
    torch, th, dev = setup_rocm_torch()
    install_wrappers(th, dev)
    import triton

    t0 = time.time()
    jobs, import_fail, wrappers = build_jobs(args.scenario, args.src, dev)
    if args.limit:
        jobs = jobs[: args.limit]
    for j in jobs:
        cfg = j["cfg"]
        j["constexprs_raw"] = {**j["rec"]["triton_meta"].get("constants", {}),
                               **{k: v for k, v in cfg.kwargs.items() if k in j["signature"]}}
    print(f"{len(jobs)} configs from {len({j['module'] for j in jobs})} modules "
          f"({len(import_fail)} import failures, {len(wrappers)} wrapper modules skipped) "
          f"in {time.time() - t0:.1f}s; triton {triton.__version__}", flush=True)
    t1 = time.time()
    results = run_pool(jobs, "direct", args.jobs, args.timeout, log=True)
    wall = time.time() - t1

    folders_now = {d.name for d in args.cache.iterdir() if d.is_dir()}
    records = []
    for j, r in zip(jobs, results):
        rec = {
            "scenario": j["scenario"], "module": j["module"],
            "inductor_kernel_name": j["inductor_kernel_name"], "kernel_fn": j["kernel_fn"],
            "heuristic": j["heuristic"], "config_id": j["config_id"],
            "constexprs": jsonable(j["constexprs"]), "options": jsonable(j["options"]),
            "attrs": jsonable(j["attrs"]), "size_hints": jsonable(j["size_hints"]),
            "status": r["status"], "seconds": r["seconds"],
        }
        if r["status"] == "ok":
            rec["cache_key"] = r["folder"]
            rec["hash"] = r["hash"]
            verify_folder(args.cache, rec, folders_now)
        else:
            rec["reason"] = r["reason"]
        records.append(rec)

    check = None
    if args.check:
        import random
        import tempfile

        ok = [i for i, r in enumerate(records) if r["status"] == "ok" and "autotuner" in jobs[i]["rec"]]
        rnd = random.Random(0)
        # every heuristic represented, the rest at random
        pick = []
        for h in HEURISTICS:
            c = [i for i in ok if records[i]["heuristic"] == h]
            pick += c[:1]
        rest = [i for i in ok if i not in pick]
        rnd.shuffle(rest)
        pick += rest[: max(0, args.check - len(pick))]
        scratch = tempfile.mkdtemp(prefix="kdb-check-")
        os.environ["TRITON_CACHE_DIR"] = scratch
        try:
            from triton import knobs

            knobs.cache.dir = scratch
        except Exception:
            pass
        res2 = run_pool([jobs[i] for i in pick], "torch", args.jobs, args.timeout * 2, log=False)
        same = [records[i]["cache_key"] == r.get("folder") for i, r in zip(pick, res2)]
        check = {"checked": len(pick), "same_folder": sum(same),
                 "mismatches": [{"config_id": records[i]["config_id"], "direct": records[i]["cache_key"],
                                 "torch": r.get("folder"), "torch_status": r["status"],
                                 "reason": r.get("reason")}
                                for i, r, s in zip(pick, res2, same) if not s]}
        print("check:", json.dumps(check), flush=True)

    secs = sorted(r["seconds"] for r in records if r["status"] == "ok")
    out = {
        "scenario": args.scenario, "triton": triton.__version__, "torch": torch.__version__.split("+")[0],
        "target": f"hip:{ARCH}:64", "hip_version_pretended": HIP_VERSION,
        "configs": len(records), "ok": sum(r["status"] == "ok" for r in records),
        "failed": sum(r["status"] != "ok" for r in records),
        "import_failures": import_fail, "wrapper_modules_skipped": wrappers,
        "compile_wall_seconds": round(wall, 1), "jobs": args.jobs,
        "compile_seconds": {"median": secs[len(secs) // 2] if secs else None,
                            "max": secs[-1] if secs else None,
                            "sum": round(sum(secs), 1)},
        "torch_precompile_check": check,
        "records": records,
    }
    args.records.parent.mkdir(parents=True, exist_ok=True)
    args.records.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")
    print(f"ok {out['ok']} failed {out['failed']} wall {wall:.0f}s", flush=True)


if __name__ == "__main__":
    main()
