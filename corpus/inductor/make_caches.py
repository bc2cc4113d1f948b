#!/usr/bin/env python3
"""Make real TorchInductor caches on a GPU machine, and the oracle records that say which
generated kernel and config produced which Triton cache folder.

Runs where PyTorch (2.11) and Triton (3.6) see an NVIDIA GPU. Each *scenario* compiles one real
model (random weights) with `torch.compile` in a fresh TORCHINDUCTOR_CACHE_DIR, so the whole
Inductor directory is a user's cache as it really looks: generated modules (`??/c*.py`),
`*.best_config`, the nested Triton cache (`triton/0/`), fxgraph/aotautograd entries. One extra
scenario is a plain Triton cache written by Triton's own `@triton.autotune(cache_results=True)`
with real GPU timings (`*.autotune.json`).

Then, per Inductor cache, the oracle (`--oracle`): every generated module is imported with
torch's own `triton_heuristics` decorators; every candidate config and the autotune winner are
compiled again through `CachingAutotuner._precompile_config` against a *copy* of the nested
Triton cache, and the folder of each resulting binary (`kernel.hash`) is recorded, with the
best-config file the autotune cache reads for that module. kdb computes none of this.

Usage on the device machine (see corpus/inductor/README.md):
  python3 corpus/inductor/make_caches.py --out DIR            # every scenario + oracle + archives
  python3 corpus/inductor/make_caches.py --scenario NAME --cache DIR   # one scenario (internal)
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

SCENARIOS = {
    # name: (what it compiles, time limit in seconds)
    "mlp_train_maxautotune": ("MLP training step, bf16 autocast, max-autotune + coordinate descent", 120),
    "gpt2_train": ("GPT-2 style decoder (transformers, 2 layers) training step, default mode", 100),
    "resnet18_infer_maxautotune": ("torchvision resnet18 inference, channels_last bf16, max-autotune", 130),
    "triton_autotune": ("plain Triton kernels with @triton.autotune(cache_results=True)", 40),
}


def _seed():
    import torch

    torch.manual_seed(0)
    return torch


def scenario_mlp_train_maxautotune():
    torch = _seed()
    import torch._inductor.config as ic

    ic.coordinate_descent_tuning = True

    class MLP(torch.nn.Module):
        def __init__(self, d=768, h=3072):
            super().__init__()
            self.ln = torch.nn.LayerNorm(d)
            self.fc1 = torch.nn.Linear(d, h)
            self.fc2 = torch.nn.Linear(h, d)

        def forward(self, x):
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))

    model = torch.nn.Sequential(MLP(), MLP()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = torch.compile(model, mode="max-autotune-no-cudagraphs")
    x = torch.randn(512, 768, device="cuda")
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()


def scenario_gpt2_train():
    torch = _seed()
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=256, vocab_size=4096, n_positions=256)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    fwd = torch.compile(model)
    ids = torch.randint(0, 4096, (8, 128), device="cuda")
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = fwd(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()


def scenario_resnet18_infer_maxautotune():
    torch = _seed()
    import torchvision

    model = torchvision.models.resnet18(weights=None).cuda().eval().to(memory_format=torch.channels_last)
    model = model.to(torch.bfloat16)
    fwd = torch.compile(model, mode="max-autotune-no-cudagraphs")
    x = torch.randn(16, 3, 96, 96, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        for _ in range(2):
            fwd(x)
    torch.cuda.synchronize()


def scenario_triton_autotune():
    torch = _seed()
    import triton
    import triton.language as tl

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024, 4096) for w in (2, 4, 8)]

    @triton.autotune(configs=configs, key=["n"], cache_results=True)
    @triton.jit
    def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, alpha * x + y, mask=mask)

    mm_configs = [
        triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
        for bm, bn, bk, w, s in [(64, 64, 32, 4, 3), (128, 64, 32, 4, 3), (128, 128, 64, 8, 3), (64, 128, 64, 4, 4)]
    ]

    @triton.autotune(configs=mm_configs, key=["M", "N", "K"], cache_results=True)
    @triton.jit
    def mm_kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * sam + (k + rk)[None, :] * sak)
            y = tl.load(b + (k + rk)[:, None] * sbk + rn[None, :] * sbn)
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16))

    for n in (1 << 16, 1 << 22):
        x = torch.randn(n, device="cuda")
        y = torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        axpy_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, 2.0, n)
    for m in (512, 2048):
        a = torch.randn(m, m, device="cuda", dtype=torch.float16)
        b = torch.randn(m, m, device="cuda", dtype=torch.float16)
        c = torch.empty(m, m, device="cuda", dtype=torch.float16)
        grid = lambda meta: (m // meta["BM"], m // meta["BN"])  # noqa: E731
        mm_kernel[grid](a, b, c, m, m, m, *a.stride(), *b.stride(), *c.stride())
    torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------
# Oracle: which generated kernel + config made which Triton cache folder
# --------------------------------------------------------------------------------------------

def oracle(inductor_dir: Path, triton_copy: Path, out_json: Path) -> None:
    os.environ["TRITON_CACHE_DIR"] = str(triton_copy)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_dir)
    import torch  # noqa: F401
    from torch._inductor.runtime import triton_heuristics as th
    from triton.runtime.cache import get_cache_manager

    seen: dict[str, dict] = {}
    original_check = th.check_autotune_cache

    def recording_check(configs, filename, inductor_meta):
        result = original_check(configs, filename, inductor_meta)
        cache = result[1]
        local = getattr(cache, "local_cache", None) if cache is not None else None
        seen[str(filename)] = {
            "candidates": list(configs),
            "after_cache": list(result[0]),
            "best_config_path": (str(Path(local[1]).relative_to(inductor_dir)) if local else None),
            "cache_info": {k: (v if isinstance(v, (str, int, float, bool)) else repr(v))
                           for k, v in result[2].items()},
        }
        return result

    th.check_autotune_cache = recording_check

    def cfg_json(c):
        return {"kwargs": dict(c.kwargs), "num_warps": c.num_warps, "num_stages": c.num_stages}

    records = []
    modules = sorted(p for p in inductor_dir.glob("??/c*.py"))
    for path in modules:
        rec = {"module": str(path.relative_to(inductor_dir))}
        try:
            spec = importlib.util.spec_from_file_location(f"kdb_oracle_{path.stem}", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            tuners = [(n, v) for n, v in vars(mod).items() if isinstance(v, th.CachingAutotuner)]
            if not tuners:
                rec["skipped"] = "no CachingAutotuner in module (not a Triton kernel module)"
                records.append(rec)
                continue
            for name, at in tuners:
                info = seen.get(str(path), {})
                krec = dict(rec, kernel=name, heuristic=getattr(at, "heuristic_type", None) and str(at.heuristic_type),
                            inductor_meta={k: v for k, v in at.inductor_meta.items()
                                           if isinstance(v, (str, int, float, bool, type(None)))},
                            best_config_path=info.get("best_config_path"), cache_info=info.get("cache_info"))
                compiled = []
                cands = info.get("candidates") or list(at.configs)
                winners = info.get("after_cache") or []
                for role, cfgs in (("candidate", cands), ("after_cache", winners)):
                    for c in cfgs:
                        entry = {"role": role, "config": cfg_json(c)}
                        try:
                            res = at._precompile_config(c)
                            h = res.kernel.hash
                            entry["cache_key"] = Path(get_cache_manager(h).cache_dir).name
                            entry["kernel_name"] = res.kernel.metadata.name if hasattr(res.kernel, "metadata") else None
                        except Exception as exc:  # noqa: BLE001 - recorded
                            entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
                        compiled.append(entry)
                krec["compiled"] = compiled
                records.append(krec)
        except Exception as exc:  # noqa: BLE001 - recorded
            rec["error"] = f"{type(exc).__name__}: {exc}"[:500]
            rec["traceback"] = traceback.format_exc()[-1500:]
            records.append(rec)
    out_json.write_text(json.dumps(records, indent=1, sort_keys=True, default=repr))


def _cache_summary(d: Path) -> dict:
    files = [p for p in d.rglob("*") if p.is_file()]
    tri = d / "triton"
    return {
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "modules": len(list(d.glob("??/c*.py"))),
        "best_configs": len(list(d.rglob("*.best_config"))),
        "kernel_perf": len(list(d.rglob("*.kernel_perf"))),
        "autotune_json": len(list(d.rglob("*.autotune.json"))),
        "triton_kernel_folders": len({p.parent for p in tri.rglob("*.json") if not p.name.startswith("__grp__")
                                      and not p.name.endswith(".autotune.json")}) if tri.exists() else 0,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--work", type=Path, default=Path("/tmp/kdb-inductor"))
    ap.add_argument("--scenario")
    ap.add_argument("--cache", type=Path)
    ap.add_argument("--oracle", nargs=3, type=Path, metavar=("INDUCTOR_DIR", "TRITON_COPY", "OUT_JSON"))
    ap.add_argument("--only", action="append")
    ap.add_argument("--budget", type=float, default=540)
    a = ap.parse_args()
    if a.oracle:
        oracle(*a.oracle)
        return 0
    if a.scenario:
        globals()[f"scenario_{a.scenario}"]()
        return 0

    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    work: Path = a.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    deadline = time.time() + a.budget
    import torch
    import triton

    manifest = {"torch": torch.__version__, "triton": triton.__version__, "device": torch.cuda.get_device_name(),
                "capability": list(torch.cuda.get_device_capability()), "scenarios": {}}
    names = [n for n in SCENARIOS if not a.only or n in a.only]
    for name in names:
        what, limit = SCENARIOS[name]
        cache = work / "caches" / name
        env = dict(os.environ, PYTHONHASHSEED="0")
        env.pop("TRITON_CACHE_DIR", None)
        if name == "triton_autotune":
            env["TRITON_CACHE_DIR"] = str(cache)
        else:
            env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
        limit = max(10, min(limit, int(deadline - time.time() - 150)))
        t0 = time.time()
        try:
            proc = subprocess.run([sys.executable, __file__, "--scenario", name], env=env, timeout=limit,
                                  capture_output=True, text=True)
            status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr.strip()[-800:]}"
        except subprocess.TimeoutExpired:
            status = f"timeout after {limit}s (cache kept as it was)"
        entry = {"what": what, "status": status, "compile_seconds": round(time.time() - t0, 1)}
        if cache.exists():
            entry.update(_cache_summary(cache))
        manifest["scenarios"][name] = entry
        print(name, json.dumps(entry)[:700], flush=True)
    oracles = work / "oracles"
    oracles.mkdir()
    for name in names:
        cache = work / "caches" / name
        entry = manifest["scenarios"][name]
        if name == "triton_autotune" or not (cache / "triton" / "0").exists():
            continue
        limit = int(deadline - time.time() - 60)
        if limit < 15:
            entry["oracle"] = "not run: out of time"
            continue
        copy = work / f"{name}.oracle-triton"
        shutil.copytree(cache / "triton" / "0", copy)
        t1 = time.time()
        try:
            env2 = dict(os.environ, PYTHONHASHSEED="0", TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER="0")
            proc = subprocess.run([sys.executable, __file__, "--oracle", str(cache), str(copy),
                                   str(oracles / f"{name}.oracle.json")], env=env2, timeout=min(limit, 150),
                                  capture_output=True, text=True)
            entry["oracle"] = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr[-800:]}"
        except subprocess.TimeoutExpired:
            entry["oracle"] = "timeout"
        entry["oracle_seconds"] = round(time.time() - t1, 1)
        new = {p.name for p in copy.iterdir()} - {p.name for p in (cache / "triton" / "0").iterdir()}
        entry["oracle_new_folders"] = len(new)
        print(name, "oracle", entry["oracle"][:300], entry["oracle_seconds"], flush=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    shutil.copy(out / "manifest.json", work / "manifest.json")
    subprocess.run(f"tar -C {work} --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner "
                   f"-cf - manifest.json caches oracles | xz -T0 -6 | split -b 15M -d - {out}/inductor.tar.xz.part",
                   shell=True, check=True)
    for p in sorted(out.iterdir()):
        print(p.name, p.stat().st_size, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
