#!/usr/bin/env python3
"""kdb as Triton's cache on every corpus Triton release: export equals Triton's own folder, a second process
compiles nothing, `kdb verify` passes — with TRITON_CACHE_MANAGER=kdb.capture:CacheManager and with
Triton's RemoteCacheManager + TRITON_REMOTE_CACHE_BACKEND=kdb.capture:RemoteBackend.

    nice python bench/capture_releases.py [--only 3.6.0 …] [--venvs DIR] [--work DIR]

Per release and target (a corpus snapshot's configs: a few small kernels and a matmul), in fresh folders:
  1. reference: bench/capture_compile.py with TRITON_CACHE_DIR=D alone; D is kept as D.ref;
  2. per mode, a fresh KDB_HOME: a capture compile (KDB_CAPTURE_TAG=c1) with the same TRITON_CACHE_DIR=D
     (CacheManager: D must stay absent; RemoteBackend: D is Triton's own folder, compared and moved away),
     `kdb export c1 D` compared file by file with D.ref, then a second process (KDB_CAPTURE_TAG=c2, D absent)
     whose counters (KDB_CAPTURE_STATS) must read hits == lookups, no misses, no puts; `kdb verify`.
Each release runs in its own venv (VENVS/t<version>: the wheel, no deps, and a .pth that appends this
checkout, the host's site-packages and kdb's editable-install finder, so kdb and its deps come from the host
without shadowing the venv's Triton); kdb runs inside as `VENV/bin/python -m kdb`. Also `kdb capture check` on every venv and on 2.2.0.
Writes bench/results/capture_releases.json (merged with earlier runs' cases) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
RESULTS = ROOT / "bench" / "results" / "capture_releases.json"
LLD = os.environ.get("TRITON_HIP_LLD_PATH", "/usr/lib/llvm-22/bin/ld.lld")
WHEEL_DIRS = [Path("/var/tmp/wheels"), Path("/var/tmp/wheels-dl")]
EXTRA_DEPS = {"2.3.1": ["numpy<2"]}  # as the corpus build: 2.3.1 imports numpy without declaring it
STEP_TIMEOUT_S = 1800

# (release, corpus snapshot) — the snapshot gives the target and the configs. A cuda target for a release the
# corpus built for AMD only is given as (release, "sm90") and takes the cuda configs valid for that release.
CASES = [
    ("2.3.1", "t2.3.1-sm90"),
    ("3.0.0", "t3.0.0-gfx942"),
    ("3.0.0", "sm90"),
    ("3.1.0", "t3.1.0-gfx942"),
    ("3.1.0", "t3.1.0-sm80"),
    ("3.2.0", "t3.2.0-gfx942"),
    ("3.2.0", "t3.2.0-sm90"),
    ("3.3.1", "t3.3.1-gfx942"),
    ("3.3.1", "sm90"),
    ("3.4.0", "t3.4.0-gfx942"),
    ("3.4.0", "t3.4.0-sm90"),
    ("3.5.1", "t3.5.1-gfx942"),
    ("3.5.1", "sm90"),
    ("3.6.0", "t3.6.0-gfx942"),
    ("3.6.0", "t3.6.0-sm90"),
    ("3.7.1", "t3.7.1-gfx942"),
    ("3.7.1", "sm90"),
    ("3.8.0", "t3.8.0-gfx942"),
    ("3.8.0", "t3.8.0-sm100"),
    ("3.9.0", "t3.9.0-gfx942"),
    ("3.9.0", "t3.9.0-sm90"),
]
CONFIG_IDS = [
    "vector_add/fp32/b1024/w4",
    "vector_add/fp16/b4096/w8",
    "fused_elementwise/bf16/b2048/w4",
    "softmax/fp32/b1024/w4",
    "strided_copy/stride1/b1024",  # an integer argument specialised to 1
    "matmul/fp16/m64n64k32/w4/s2",
]
MODES = {
    "CacheManager": {"TRITON_CACHE_MANAGER": "kdb.capture:CacheManager"},
    "RemoteBackend": {
        "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
        "TRITON_REMOTE_CACHE_BACKEND": "kdb.capture:RemoteBackend",
    },
}
COUNTERS = ("lookups", "hits", "misses", "puts")
NOTES = [
    "configs: compiled by the first capture process / asked; ref files: files in Triton's own folder (reference)",
    "export: `kdb export c1 D` (D: the path Triton's folder had) compared file by file with the reference folder",
    "second.counters: summed KDB_CAPTURE_STATS of the second process (tag c2, D absent): compiled_nothing means "
    "lookups > 0, hits == lookups, no misses, no puts",
    "RemoteBackend: triton_dir_vs_reference is Triton's own folder after the first compile; its __grp__ files differ "
    "from FileCacheManager's in 3.0+ because RemoteCacheManager.put_group writes {'child_paths': sorted names} (2.3: "
    "the same format, so identical); kdb stores the FileCacheManager format, so the folder Triton fills from kdb in "
    "the second process (triton_dir_after_second_vs_reference) equals the reference",
    "2.2.0: `import triton` imports torch (triton.common.build.is_hip at module level of triton/compiler/compiler.py); "
    "no torch wheel here, so the check runs once as is and once with a stub torch (version.hip=None) on PYTHONPATH",
]


def corpus_build():
    from capture_compile import build_module  # bench/ is this script's folder

    return build_module()


def case_target(build, release: str, snapshot: str) -> tuple[str, object, int, list[dict], bool]:
    """backend, target, warp size, configs, whether the snapshot is the corpus's."""
    if snapshot in build.SNAPSHOTS:
        _v, backend, target, warp = build.SNAPSHOTS[snapshot]
        configs = build.configs_for(snapshot)
        corpus = True
    else:
        backend, target, warp = "cuda", int(snapshot.removeprefix("sm")), 32
        configs = [
            c
            for c in build.CONFIGS
            if "cuda" in c["backends"] and build.vtuple(release) >= build.vtuple(c["min_version"])
        ]
        corpus = False
    by_id = {c["config"]: c for c in configs}
    return backend, target, warp, [by_id[i] for i in CONFIG_IDS if i in by_id], corpus


# -- venvs -------------------------------------------------------------------------------------------------
def ensure_venv(venvs: Path, release: str) -> Path:
    venv = venvs / f"t{release}"
    py = venv / "bin" / "python"
    if not py.exists():
        wheels = [w for d in WHEEL_DIRS for w in sorted(d.glob(f"triton-{release}-*.whl"))]
        if not wheels:
            WHEEL_DIRS[-1].mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", f"triton=={release}", "-d", str(WHEEL_DIRS[-1])],
                check=True,
            )
            wheels = sorted(WHEEL_DIRS[-1].glob(f"triton-{release}-*.whl"))
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheels[0])], check=True)
        if EXTRA_DEPS.get(release):
            subprocess.run([str(py), "-m", "pip", "install", "-q", *EXTRA_DEPS[release]], check=True)
    site_dir = next((venv / "lib").glob("python3*/site-packages"))
    pth = site_dir / "zz_kdb_host.pth"
    host = site.getsitepackages()
    # kdb's editable install maps kdb.schema to the checkout's schema/ through a finder its .pth installs
    editable = [
        ln
        for d in host
        for f in sorted(Path(d).glob("__editable__.kdb-*.pth"))
        for ln in f.read_text().splitlines()
        if ln.startswith("import ")
    ]
    want = "".join(f"{line}\n" for line in [str(ROOT), *host, *editable])
    if not pth.exists() or pth.read_text() != want:
        pth.write_text(want)  # appended after the venv's own site-packages: its Triton comes first
    return py


# -- steps -------------------------------------------------------------------------------------------------
def base_env(work: Path, backend: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(work / "home"),
        "TRITON_HOME": str(work / "home"),
        "PYTHONHASHSEED": "0",
        "LANG": "C.UTF-8",
        "TMPDIR": str(work / "tmp"),
    }
    if backend == "hip":
        env["TRITON_HIP_LLD_PATH"] = LLD
    (work / "home").mkdir(parents=True, exist_ok=True)
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    return env


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> dict:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, cwd=str(cwd), capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, str(exc.stdout or ""), f"timed out after {STEP_TIMEOUT_S}s"
    return {"rc": rc, "stdout": out, "stderr": err, "seconds": round(time.monotonic() - t0, 1)}


def noteworthy(step: dict) -> list[str]:
    """Lines of a step's stderr worth reporting: tracebacks, kdb's own messages, errors."""
    lines = step["stderr"].splitlines()
    keep = [ln for ln in lines if ln.startswith(("kdb capture:", "kdb:", "Traceback")) or "Error" in ln]
    if step["rc"] != 0:
        keep += lines[-5:]
    return list(dict.fromkeys(keep))[:12]


def compile_step(py: Path, spec: dict, env: dict[str, str], work: Path, name: str) -> dict:
    results = work / f"{name}.jsonl"
    spec = {**spec, "results": str(results)}
    spec_path = work / f"{name}.spec.json"
    spec_path.write_text(json.dumps(spec))
    step = run([str(py), str(ROOT / "bench" / "capture_compile.py"), str(spec_path)], env, work)
    rows = [json.loads(ln) for ln in results.read_text().splitlines()] if results.exists() else []
    return {
        "rc": step["rc"],
        "seconds": step["seconds"],
        "compiled": sum(1 for r in rows if "cache_key" in r),
        "errors": {r["config"]: r["error"] for r in rows if "error" in r},
        "keys": {r["config"]: r.get("cache_key") for r in rows},
        "stderr": noteworthy(step),
    }


def tree(root: Path) -> dict[str, bytes]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def compare(ref: Path, other: Path) -> dict:
    a, b = tree(ref), tree(other)
    diff = sorted(f"only in reference: {n}" for n in a.keys() - b.keys())
    diff += sorted(f"only in export: {n}" for n in b.keys() - a.keys())
    diff += sorted(f"content differs: {n}" for n in a.keys() & b.keys() if a[n] != b[n])
    return {"identical": not diff, "files": len(b), "diff": diff[:40]}


def counters(stats_dir: Path) -> dict:
    total = {k: 0 for k in COUNTERS}
    broken = []
    files = sorted(stats_dir.glob("*.json")) if stats_dir.exists() else []
    for f in files:
        body = json.loads(f.read_text())
        for k in COUNTERS:
            total[k] += int(body.get(k, 0))
        if body.get("broken"):
            broken.append(body["broken"])
    return {**total, "processes": len(files), "broken": broken}


def run_mode(py: Path, mode: str, spec: dict, env0: dict[str, str], work: Path, ref: Path, ref_keys: dict) -> dict:
    mdir = work / mode
    mdir.mkdir()
    home, d = mdir / "home", work / "D"
    env = {**env0, **MODES[mode], "TRITON_CACHE_DIR": str(d), "KDB_HOME": str(home)}
    kdb_env = {**env0, "KDB_HOME": str(home)}
    out: dict = {"mode": mode}

    first = compile_step(
        py, spec, {**env, "KDB_CAPTURE_TAG": "c1", "KDB_CAPTURE_STATS": str(mdir / "S1")}, mdir, "first"
    )
    out["first"] = {k: first[k] for k in ("rc", "seconds", "compiled", "errors", "stderr")}
    out["first"]["keys_match_reference"] = first["keys"] == ref_keys
    out["first"]["counters"] = counters(mdir / "S1")
    out["triton_dir_after_first"] = d.exists()
    if d.exists():  # RemoteCacheManager: Triton's own folder, filled as without kdb
        out["triton_dir_vs_reference"] = compare(ref, d)
        d.rename(mdir / "D.triton")

    exp = run([str(py), "-m", "kdb", "export", "c1", str(d)], kdb_env, mdir)
    out["export"] = {"rc": exp["rc"], "stderr": noteworthy(exp), **compare(ref, d)}
    if d.exists():
        shutil.rmtree(d)

    second = compile_step(
        py, spec, {**env, "KDB_CAPTURE_TAG": "c2", "KDB_CAPTURE_STATS": str(mdir / "S2")}, mdir, "second"
    )
    out["second"] = {k: second[k] for k in ("rc", "seconds", "compiled", "errors", "stderr")}
    out["second"]["keys_match_reference"] = second["keys"] == ref_keys
    out["second"]["counters"] = c = counters(mdir / "S2")
    out["second"]["compiled_nothing"] = (
        c["processes"] >= 1
        and c["lookups"] > 0
        and c["hits"] == c["lookups"]
        and c["misses"] == 0
        and c["puts"] == 0
        and not c["broken"]
    )
    out["triton_dir_after_second"] = d.exists()
    if d.exists():  # RemoteCacheManager writes what kdb served into Triton's own (empty) folder
        out["triton_dir_after_second_vs_reference"] = compare(ref, d)
        shutil.rmtree(d)

    ver = run([str(py), "-m", "kdb", "verify"], kdb_env, mdir)
    out["verify"] = {"rc": ver["rc"], "stdout": ver["stdout"].strip().splitlines()[-3:], "stderr": noteworthy(ver)}
    tags = run([str(py), "-m", "kdb", "tags", "--format", "json"], kdb_env, mdir)
    try:
        out["tags"] = {t["tag"]: t.get("kernels", t.get("kernel_count")) for t in json.loads(tags["stdout"])}
    except (ValueError, KeyError, TypeError):
        out["tags"] = tags["stdout"][-300:]
    return out


def run_case(py: Path, release: str, snapshot: str, build, work_root: Path) -> dict:
    backend, target, warp, configs, corpus = case_target(build, release, snapshot)
    work = Path(tempfile.mkdtemp(prefix=f"t{release}-{backend}{target}-", dir=work_root))
    env0 = base_env(work, backend)
    spec = {"backend": backend, "target": target, "warp_size": warp, "configs": configs}
    case: dict = {
        "release": release,
        "snapshot": snapshot if corpus else None,
        "backend": backend,
        "target": target,
        "corpus_snapshot": corpus,
        "configs": [c["config"] for c in configs],
        "work": str(work),
    }
    d, ref = work / "D", work / "D.ref"
    reference = compile_step(py, spec, {**env0, "TRITON_CACHE_DIR": str(d)}, work, "reference")
    d.rename(ref) if d.exists() else ref.mkdir()
    case["reference"] = {k: reference[k] for k in ("rc", "seconds", "compiled", "errors", "stderr")}
    case["reference"]["files"] = len(tree(ref))
    case["modes"] = [run_mode(py, mode, spec, env0, work, ref, reference["keys"]) for mode in MODES]
    case["ok"] = (
        all(
            m["export"]["identical"]
            and m["second"]["compiled_nothing"]
            and m["verify"]["rc"] == 0
            and m["first"]["rc"] == 0
            and m["second"]["rc"] == 0
            and m["first"]["keys_match_reference"]
            and m["second"]["keys_match_reference"]
            and not m["first"]["counters"]["broken"]
            and (m["mode"] != "CacheManager" or not (m["triton_dir_after_first"] or m["triton_dir_after_second"]))
            for m in case["modes"]
        )
        and reference["compiled"] > 0
    )
    return case


def capture_check(py: Path, extra_path: Path | None = None) -> dict:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
    if extra_path is not None:
        env["PYTHONPATH"] = str(extra_path)
    step = run([str(py), "-m", "kdb", "capture", "check"], env, ROOT)
    return {"rc": step["rc"], "stdout": step["stdout"].strip(), "stderr": step["stderr"].strip()[-300:]}


def torch_stub(root: Path) -> Path:
    """Triton 2.2 imports torch at import (`is_hip()` at module level of triton/compiler/compiler.py); no
    torch wheel here: a stub that reports a CUDA build, as the corpus build does for 2.3.1."""
    pkg = root / "torch_stub" / "torch"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("import types\nversion = types.SimpleNamespace(hip=None, cuda='12.1')\n")
    return pkg.parent


# -- report ------------------------------------------------------------------------------------------------
def table(doc: dict) -> str:
    rows = [
        "| release | target | mode | configs | ref files | export identical | 2nd: lookups/hits/misses/puts "
        "| verify rc | ok |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case in doc["cases"]:
        tgt = f"{case['backend']} {case['target']}" + ("" if case["corpus_snapshot"] else " (not in corpus)")
        for m in case["modes"]:
            c = m["second"]["counters"]
            ident = "yes" if m["export"]["identical"] else f"NO ({len(m['export']['diff'])} files)"
            mode_ok = m["export"]["identical"] and m["second"]["compiled_nothing"] and m["verify"]["rc"] == 0
            rows.append(
                f"| {case['release']} | {tgt} | {m['mode']} | {m['first']['compiled']}/{len(case['configs'])} "
                f"| {case['reference']['files']} | {ident} | {c['lookups']}/{c['hits']}/{c['misses']}/{c['puts']} "
                f"| {m['verify']['rc']} | {'yes' if mode_ok else 'NO'} |"
            )
    lines = ["\n".join(rows), ""]
    for name, chk in doc.get("capture_check", {}).items():
        lines.append(f"- `kdb capture check` {name}: rc {chk['rc']}: {chk['stdout'] or chk['stderr']}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="release(s) to run (default: all); others' results are kept")
    ap.add_argument("--venvs", type=Path, default=Path("/var/tmp/kdb-corpus/venvs"))
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "kdb-capture-releases")
    ap.add_argument("--keep", action="store_true", help="keep each case's folders")
    ap.add_argument("--no-check", action="store_true", help="skip the `kdb capture check` lines")
    args = ap.parse_args()
    os.nice(10)
    build = corpus_build()
    args.work.mkdir(parents=True, exist_ok=True)
    doc = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"cases": [], "capture_check": {}}
    doc["notes"] = NOTES
    wanted = [(r, s) for r, s in CASES if not args.only or r in args.only]
    for release, snapshot in wanted:
        py = ensure_venv(args.venvs, release)
        t0 = time.monotonic()
        case = run_case(py, release, snapshot, build, args.work)
        case["seconds"] = round(time.monotonic() - t0, 1)
        print(f"{release} {snapshot}: ok={case['ok']} ({case['seconds']} s)", file=sys.stderr, flush=True)
        doc["cases"] = [c for c in doc["cases"] if (c["release"], c.get("case", "")) != (release, snapshot)]
        case["case"] = snapshot
        doc["cases"].append(case)
        if not args.keep:
            shutil.rmtree(case.pop("work"), ignore_errors=True)
        doc["cases"].sort(key=lambda c: ([int(x) for x in c["release"].split(".")], c["backend"] == "cuda"))
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if not args.no_check:
        checks = doc.setdefault("capture_check", {})
        for release in sorted({r for r, _ in wanted}, key=lambda v: [int(x) for x in v.split(".")]):
            checks[release] = capture_check(ensure_venv(args.venvs, release))
        if not args.only or "2.2.0" in args.only:
            py22 = ensure_venv(args.venvs, "2.2.0")
            checks["2.2.0 (no torch)"] = capture_check(py22)
            checks["2.2.0 (torch stub)"] = capture_check(py22, torch_stub(args.work))
        RESULTS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
