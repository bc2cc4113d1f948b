#!/usr/bin/env python3
"""A real `torch.compile` run on a GPU through kdb's Triton cache manager (issue 30), checked against the same
run with Triton's own cache directory.

Per scenario of corpus/profiles/make_profiles.py (real models, random weights), each run a fresh process with a
fresh TORCHINDUCTOR_CACHE_DIR (so Inductor compiles again and asks Triton for every kernel):
  plain   TRITON_CACHE_DIR=W/tc, Triton's own FileCacheManager; the folder is then moved to W/plain-<scenario>
  cap1    TRITON_CACHE_MANAGER=kdb.capture:CacheManager, KDB_CAPTURE_TAG=cap1-<scenario> (W/tc never made)
  cap2    the same, tag cap2-<scenario>: every Triton lookup should be served by kdb, nothing compiled
Then: `kdb ingest W/plain-<s> --tag plain-<s>`, `kdb diff plain-<s> cap1-<s>` and `kdb diff cap1-<s> cap2-<s>`
(JSON), `kdb verify`, `kdb export cap1-<s>` compared file by file with W/plain-<s>, and each run's counters.

Usage (device machine):  python3 bench/capture_torch.py --work W --out OUT [--scenario resnet18_infer ...]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from capture_warm import counters  # bench/ is this script's sys.path[0]

ROOT = Path(__file__).resolve().parent.parent


def _tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _run_model(scenario: str) -> None:
    spec = importlib.util.spec_from_file_location("make_profiles", ROOT / "corpus" / "profiles" / "make_profiles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import torch

    step = module._model(scenario)
    for _ in range(2):
        step()
    torch.cuda.synchronize()


def _phase(scenario: str, work: Path, env: dict[str, str], name: str, inductor_of: str | None = None) -> dict:
    inductor = work / f"inductor-{scenario}-{inductor_of or name}"
    if inductor_of is None:  # a fresh Inductor cache: Inductor generates and compiles every kernel again
        shutil.rmtree(inductor, ignore_errors=True)
    full = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor), "TRITON_CACHE_DIR": str(work / "tc"), **env}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, __file__, "--model", scenario], env=full, capture_output=True, text=True, timeout=900
    )
    return {
        "phase": name,
        "rc": proc.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "stderr_kdb": [ln for ln in proc.stderr.splitlines() if ln.startswith("kdb capture")],
        "stderr_tail": proc.stderr[-1500:] if proc.returncode else "",
    }


work_dir = Path("/")  # not the repository: its kdb/ would shadow the installed one (no kdb.schema there)


def _kdb(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from kdb.cli import main; sys.argv[0] = 'kdb'; main()", *args],
        env={**os.environ, "KDB_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=900,
        cwd=work_dir,
    )


def _counters(stats: Path) -> dict[str, int]:
    return {"processes": sum(1 for _ in stats.glob("*.json")), **counters(stats)}


def scenario_check(scenario: str, work: Path, out: Path) -> dict:
    home = work / "home"
    result: dict = {"scenario": scenario, "phases": []}
    shutil.rmtree(work / "tc", ignore_errors=True)
    result["phases"].append(_phase(scenario, work, {}, "plain"))
    plain = work / f"plain-{scenario}"
    shutil.rmtree(plain, ignore_errors=True)
    os.replace(work / "tc", plain)
    # cap1/cap2/cap3: fresh Inductor caches (cap2 and cap3 should find every Triton key in kdb); warm: cap1's
    # Inductor cache again (Inductor's own caches hit, Triton still asks its cache manager for every kernel)
    for tag, inductor_of in (("cap1", None), ("cap2", None), ("cap3", None), ("warm", "cap1")):
        stats = work / f"stats-{scenario}-{tag}"
        shutil.rmtree(stats, ignore_errors=True)
        env = {
            "TRITON_CACHE_MANAGER": "kdb.capture:CacheManager",
            "KDB_HOME": str(home),
            "KDB_CAPTURE_TAG": f"{tag}-{scenario}",
            "KDB_CAPTURE_STATS": str(stats),
        }
        phase = _phase(scenario, work, env, tag, inductor_of)
        phase["triton_cache_dir_made"] = (work / "tc").exists()
        phase["counters"] = _counters(stats)
        result["phases"].append(phase)
    left = _kdb(home, "capture", "status", "--tag", f"cap1-{scenario}")
    result["status_after"] = left.stdout.strip()
    ingest = _kdb(home, "ingest", str(plain), "--tag", f"plain-{scenario}", "--format", "json")
    result["ingest_plain"] = {"rc": ingest.returncode, "err": ingest.stderr[-500:]}
    pairs = [(f"plain-{scenario}", f"{t}-{scenario}") for t in ("cap1", "cap2", "cap3", "warm")]
    for a, b in pairs:
        diff = _kdb(home, "diff", a, b, "--format", "json")
        (out / f"diff-{a}-{b}.json").write_text(diff.stdout)
        doc = json.loads(diff.stdout) if diff.stdout.strip().startswith("{") else {}
        labels: dict[str, int] = {}
        for k in doc.get("kernels", []):
            labels[k["label"]] = labels.get(k["label"], 0) + 1
        result[f"diff {a} {b}"] = {
            "rc": diff.returncode,
            "labels": labels,
            "summary": doc.get("summary"),
            "err": diff.stderr[-500:],
        }
    exported = work / f"export-{scenario}"
    shutil.rmtree(exported, ignore_errors=True)
    exp = _kdb(home, "export", f"cap1-{scenario}", str(exported), "--verbatim")
    a, b = _tree(plain), (_tree(exported) if exp.returncode == 0 else {})
    result["export_vs_plain"] = {
        "plain_files": len(a),
        "export_files": len(b),
        "identical": a == b,
        "only_plain": sorted(set(a) - set(b))[:20],
        "only_export": sorted(set(b) - set(a))[:20],
        "differ": sorted(k for k in set(a) & set(b) if a[k] != b[k])[:20],
    }
    verify = _kdb(home, "verify")
    result["verify"] = {"rc": verify.returncode, "out": verify.stdout.strip()[-300:]}
    tags = _kdb(home, "tags")
    result["tags"] = tags.stdout
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--scenario", action="append")
    args = parser.parse_args()
    if args.model:
        _run_model(args.model)
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for scenario in args.scenario or ["resnet18_infer", "mlp_train"]:
        results.append(scenario_check(scenario, args.work, args.out))
        (args.out / "capture_torch.json").write_text(json.dumps(results, indent=1))
        print(json.dumps(results[-1], indent=1)[:3000], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
