#!/usr/bin/env python3
"""Make real profiles of real `torch.compile` runs on a GPU machine, beside the TorchInductor cache directory of
the same runs (issue 29: measured time beside the artifacts).

Per scenario (a real model, random weights), in a fresh TORCHINDUCTOR_CACHE_DIR:
  1. a process compiles the model, warms it up, and records `torch.profiler` (CPU + CUDA) over STEPS steps:
     `<scenario>.torch.json.gz` (Chrome trace, as `export_chrome_trace` writes it, gzipped);
  2. a second process (CUPTI takes one subscriber: torch.profiler and Proton cannot share a process) runs the
     same model from the now warm cache and records Triton's Proton (`hook="triton"`) over STEPS steps:
     `<scenario>.proton.hatchet` (Proton's hatchet JSON);
  3. the cache directory is packed as it is after both runs.
Records: `manifest.json` (versions, device, per scenario what ran, steps, seconds, status).

Usage on the device machine:
  python3 corpus/profiles/make_profiles.py --out DIR
  python3 corpus/profiles/make_profiles.py --scenario NAME --phase torch|proton --trace PATH   (internal)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

STEPS = 3
SCENARIOS = {
    "gpt2_train": "GPT-2 style decoder (transformers, 2 layers) training step, bf16 autocast, default mode",
    "resnet18_infer": "torchvision resnet18 inference, channels_last bf16, default mode",
    "mlp_train": "two-block MLP training step, bf16 autocast, default mode",
}


def _model(name: str):
    """(step function, compiled module) of a scenario; the step runs the model once."""
    import torch

    torch.manual_seed(0)
    if name == "gpt2_train":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(n_layer=2, n_head=4, n_embd=256, vocab_size=4096, n_positions=256)
        model = GPT2LMHeadModel(cfg).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        fwd = torch.compile(model)
        ids = torch.randint(0, 4096, (8, 128), device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = fwd(input_ids=ids, labels=ids)
            out.loss.backward()
            opt.step()
            opt.zero_grad()

        return step
    if name == "resnet18_infer":
        import torchvision

        model = torchvision.models.resnet18(weights=None).cuda().eval().to(memory_format=torch.channels_last)
        model = model.to(torch.bfloat16)
        fwd = torch.compile(model)
        x = torch.randn(16, 3, 96, 96, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)

        def step():
            with torch.no_grad():
                fwd(x)

        return step
    if name == "mlp_train":

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
        fwd = torch.compile(model)
        x = torch.randn(512, 768, device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()

        return step
    raise SystemExit(f"unknown scenario {name}")


def run_phase(name: str, phase: str, trace: Path) -> None:
    import torch

    step = _model(name)
    for _ in range(2):  # compile (first process) or load from the warm cache (second), then warm up
        step()
    torch.cuda.synchronize()
    if phase == "torch":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(STEPS):
                step()
            torch.cuda.synchronize()
        plain = trace.with_suffix("")  # x.torch.json.gz -> x.torch.json
        prof.export_chrome_trace(str(plain))
        subprocess.run(["gzip", "-9", "-n", "-f", str(plain)], check=True)
    else:
        import triton.profiler as proton

        base = str(trace.with_suffix(""))  # proton adds `.hatchet`
        proton.start(base, hook="triton")
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
        proton.finalize()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--work", type=Path, default=Path("/tmp/kdb-profiles"))
    ap.add_argument("--scenario")
    ap.add_argument("--phase", choices=("torch", "proton"))
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--only", action="append")
    ap.add_argument("--budget", type=float, default=540)
    a = ap.parse_args()
    if a.scenario:
        run_phase(a.scenario, a.phase, a.trace)
        return 0
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    work: Path = a.work
    shutil.rmtree(work, ignore_errors=True)
    (work / "caches").mkdir(parents=True)
    (work / "profiles").mkdir()
    deadline = time.time() + a.budget
    import torch
    import triton

    manifest = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "device": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "steps": STEPS,
        "scenarios": {},
    }
    for name in [n for n in SCENARIOS if not a.only or n in a.only]:
        cache = work / "caches" / name
        entry: dict = {"what": SCENARIOS[name]}
        for phase, trace in (
            ("torch", work / "profiles" / f"{name}.torch.json.gz"),
            ("proton", work / "profiles" / f"{name}.proton.hatchet"),
        ):
            env = dict(os.environ, PYTHONHASHSEED="0", TORCHINDUCTOR_CACHE_DIR=str(cache))
            env.pop("TRITON_CACHE_DIR", None)
            limit = int(deadline - time.time() - 60)
            if limit < 20:
                entry[phase] = "not run: out of time"
                continue
            t0 = time.time()
            try:
                proc = subprocess.run(
                    [sys.executable, __file__, "--scenario", name, "--phase", phase, "--trace", str(trace)],
                    env=env,
                    timeout=min(limit, 240),
                    capture_output=True,
                    text=True,
                )
                status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr.strip()[-600:]}"
            except subprocess.TimeoutExpired:
                status = "timeout"
            entry[phase] = status
            entry[f"{phase}_seconds"] = round(time.time() - t0, 1)
            entry[f"{phase}_file"] = trace.name if trace.exists() else None
        manifest["scenarios"][name] = entry
        print(name, json.dumps(entry)[:900], flush=True)
    (work / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    shutil.copy(work / "manifest.json", out / "manifest.json")
    subprocess.run(
        f"tar -C {work} --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner "
        f"-cf - manifest.json caches profiles | xz -T0 -6 | split -b 15M -d - {out}/profiles.tar.xz.part",
        shell=True,
        check=True,
    )
    for p in sorted(out.iterdir()):
        print(p.name, p.stat().st_size, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
