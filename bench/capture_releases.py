#!/usr/bin/env python3
"""kdb as Triton's cache on every corpus Triton release: export equals Triton's own folder, a second process
compiles nothing, `kdb verify` passes — with TRITON_CACHE_MANAGER=kdb.capture:CacheManager and with
Triton's RemoteCacheManager + TRITON_REMOTE_CACHE_BACKEND=kdb.capture:RemoteBackend.

    nice python bench/capture_releases.py [--only 3.6.0 …] [--case t3.6.0-gfx942 …] [--only-concurrency]
                                          [--no-concurrency] [--venvs DIR] [--work DIR]

Per release and target (a corpus snapshot's configs: a few small kernels and a matmul), in fresh folders:
  1. reference: bench/capture_compile.py with TRITON_CACHE_DIR=D alone; D is kept as D.ref;
  2. per mode, a fresh KDB_HOME: a capture compile (KDB_CAPTURE_TAG=c1) with the same TRITON_CACHE_DIR=D
     (CacheManager: D must stay absent; RemoteBackend: D is Triton's own folder, compared and moved away),
     `kdb export c1 D` compared file by file with D.ref, then a second process (KDB_CAPTURE_TAG=c2, D absent)
     whose counters (KDB_CAPTURE_STATS) must read hits == lookups, no misses, no puts; `kdb verify`.
Each release runs in its own venv (VENVS/t<version>: the wheel, no deps, and a .pth that appends this
checkout, the host's site-packages and kdb's editable-install finder, so kdb and its deps come from the host
without shadowing the venv's Triton); kdb runs inside as `VENV/bin/python -m kdb`. Also `kdb capture check` on every venv and on 2.2.0.
Concurrency phase (CacheManager), per release and target, after the above (alone: --only-concurrency):
8 processes started at once, process i compiling configs[(i + j) % 6] for j in 0..3 (every config by 5 or 6
of them), all with KDB_CAPTURE_TAG=T and KDB_CAPTURE_WAIT=60, once on a fresh local home (KDB_HOME) and once
on a fresh shared one (KDB_CATALOG: a new database of one PostgreSQL server for the whole run, tests/pgserver.py;
KDB_STORE: a fresh folder). After all exit: each rc 0 with no `kdb capture:` line on its stderr, Triton's
folder never made, `kdb capture commit --tag T`, `kdb verify`, `kdb export T D` equal to the reference
(a compile of the 6 with TRITON_CACHE_DIR=D alone), and T's snapshot holding each cache key once.
Writes bench/results/capture_releases.json (merged with earlier runs' cases; the concurrency phase's under
"concurrency") and prints markdown tables.
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
from collections.abc import Callable
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
    "concurrency: 8 capture processes at once (CacheManager, tag T, KDB_CAPTURE_WAIT=60), process i compiling "
    "configs[(i + j) % n] for j in 0..3; local: a fresh KDB_HOME; shared: a fresh PostgreSQL database as "
    "KDB_CATALOG and a fresh KDB_STORE; seconds: from the first start to the last exit; rows: `SELECT count(*) n, "
    "count(DISTINCT cache_key) d` of T's kernels, which must both equal the number of configs",
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

    exp = run([str(py), "-m", "kdb", "export", "c1", str(d), "--verbatim"], kdb_env, mdir)
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


def start_case(py: Path, release: str, snapshot: str, build, work_root: Path, prefix: str, name: dict) -> tuple:
    """A case's folder, environment, spec and record, and its reference: the configs compiled with
    TRITON_CACHE_DIR alone (kept as D.ref). Returns (work, env0, spec, case, ref, reference)."""
    backend, target, warp, configs, corpus = case_target(build, release, snapshot)
    work = Path(tempfile.mkdtemp(prefix=f"{prefix}{release}-{backend}{target}-", dir=work_root))
    env0 = base_env(work, backend)
    spec = {"backend": backend, "target": target, "warp_size": warp, "configs": configs}
    case: dict = {
        "release": release,
        **name,
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
    return work, env0, spec, case, ref, reference


def run_case(py: Path, release: str, snapshot: str, build, work_root: Path) -> dict:
    corpus = case_target(build, release, snapshot)[4]
    name = {"snapshot": snapshot if corpus else None}
    work, env0, spec, case, ref, reference = start_case(py, release, snapshot, build, work_root, "t", name)
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


# -- concurrency ---------------------------------------------------------------------------------------
CONC_PROCS, CONC_EACH, CONC_TAG, CONC_WAIT_S = 8, 4, "T", "60"


def pg_server():
    """One PostgreSQL server (tests/pgserver.py, loaded by path) with a database for every shared case."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kdb_tests_pgserver", ROOT / "tests" / "pgserver.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.find_bin_dir() is None:
        raise SystemExit("PostgreSQL is not installed (initdb, pg_ctl, postgres): the shared cases need it")
    module.DATABASES = max(module.DATABASES, len(CASES))  # made before the server starts, one per case
    return module.PgServer().start()


def subsets(configs: list[dict]) -> list[list[dict]]:
    """What each of the processes compiles, in its order: configs[(i + j) % n] for j in 0..3."""
    n = len(configs)
    return [[configs[(i + j) % n] for j in range(min(CONC_EACH, n))] for i in range(CONC_PROCS)]


def triton_variants(py: Path, spec: dict, env0: dict[str, str], work: Path, d: Path) -> dict[str, Path]:
    """Triton alone (TRITON_CACHE_DIR=d) compiling each process's configs in its order, one process each: some
    releases' files depend on what the process compiled before (3.2/3.3 NVIDIA: the .llir's target
    datalayout), so a folder written by whichever process came first can equal one of these, not the reference."""
    out: dict[str, Path] = {}
    for i, subset in enumerate(subsets(spec["configs"])):
        order = ",".join(c["config"] for c in subset)
        if order in {k.split(":", 1)[1] for k in out}:
            continue
        compile_step(py, {**spec, "configs": subset}, {**env0, "TRITON_CACHE_DIR": str(d)}, work, f"variant{i}")
        dest = work / f"D.variant{i}"
        d.rename(dest) if d.exists() else dest.mkdir()
        out[f"p{i}:{order}"] = dest
    return out


def explain(diff: list[str], export: Path, variants: dict[str, Path]) -> dict:
    """For each file whose content differs from the reference's: the processes whose Triton-alone run wrote
    exactly the exported bytes."""
    found: dict[str, list[str]] = {}
    for line in diff:
        kind, _, name = line.partition(": ")
        if kind != "content differs":
            return {"all": False, "files": found, "unexplained": line}
        data = (export / name).read_bytes()
        found[name] = [
            k.split(":", 1)[0] for k, v in variants.items() if (v / name).is_file() and (v / name).read_bytes() == data
        ]
    return {"all": all(found.values()), "files": found}


def eight_at_once(
    py: Path,
    spec: dict,
    env0: dict[str, str],
    work: Path,
    d: Path,
    ref: Path,
    home: dict[str, str],
    variants: Callable[[], dict[str, Path]],
) -> dict:
    """d: the reference's TRITON_CACHE_DIR (group files name it), never made here; the export goes there."""
    configs = spec["configs"]
    n = len(configs)
    env = {
        **env0,
        **MODES["CacheManager"],
        **home,
        "TRITON_CACHE_DIR": str(d),
        "KDB_CAPTURE_TAG": CONC_TAG,
        "KDB_CAPTURE_WAIT": CONC_WAIT_S,
        "KDB_CAPTURE_STATS": str(work / "stats"),
    }
    kdb_env = {**env0, **home}
    procs = []
    for i, subset in enumerate(subsets(configs)):
        results = work / f"p{i}.jsonl"
        spec_path = work / f"p{i}.spec.json"
        spec_path.write_text(json.dumps({**spec, "configs": subset, "results": str(results)}))
        procs.append((i, subset, results, work / f"p{i}.err"))
    started = time.monotonic()
    running = []
    for i, _subset, _results, err_path in procs:  # all spawned before any is waited for
        with open(work / f"p{i}.out", "w") as out, open(err_path, "w") as err:
            cmd = [str(py), str(ROOT / "bench" / "capture_compile.py"), str(work / f"p{i}.spec.json")]
            running.append(subprocess.Popen(cmd, env=env, cwd=str(work), stdout=out, stderr=err))
    ends = []
    for p in running:
        try:
            rc = p.wait(timeout=max(1.0, STEP_TIMEOUT_S - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            p.kill()  # this script's own child
            p.wait()
            rc = 124
        ends.append((rc, round(time.monotonic() - started, 1)))
    elapsed = round(time.monotonic() - started, 1)

    out: dict = {"seconds": elapsed, "processes": []}
    for (_i, subset, results, err_path), (rc, end_s) in zip(procs, ends, strict=True):
        err = err_path.read_text()
        rows = [json.loads(ln) for ln in results.read_text().splitlines()] if results.exists() else []
        out["processes"].append(
            {
                "rc": rc,
                "exit_s": end_s,
                "configs": len(subset),
                "compiled": sum(1 for r in rows if "cache_key" in r),
                "errors": {r["config"]: r["error"] for r in rows if "error" in r},
                "kdb_capture_lines": [ln for ln in err.splitlines() if ln.startswith("kdb capture:")][:5],
                "stderr": noteworthy({"rc": rc, "stderr": err}),
            }
        )
    ps = out["processes"]
    out["all_rc0"] = all(p["rc"] == 0 for p in ps)
    out["all_compiled"] = all(p["compiled"] == p["configs"] for p in ps)
    out["no_kdb_capture_lines"] = not any(p["kdb_capture_lines"] for p in ps)
    out["triton_dir_made"] = d.exists()
    shutil.rmtree(d, ignore_errors=True)
    out["counters"] = counters(work / "stats")

    commit = run([str(py), "-m", "kdb", "capture", "commit", "--tag", CONC_TAG], kdb_env, work)
    out["commit"] = {"rc": commit["rc"], "stdout": commit["stdout"].strip()[-300:], "stderr": noteworthy(commit)}
    ver = run([str(py), "-m", "kdb", "verify"], kdb_env, work)
    out["verify"] = {"rc": ver["rc"], "stdout": ver["stdout"].strip().splitlines()[-3:], "stderr": noteworthy(ver)}
    exp = run([str(py), "-m", "kdb", "export", CONC_TAG, str(d), "--verbatim"], kdb_env, work)
    out["export"] = {"rc": exp["rc"], "stderr": noteworthy(exp), **compare(ref, d)}
    if exp["rc"] == 0 and not out["export"]["identical"]:
        kept = work / "D.export"
        d.rename(kept)  # the Triton-alone runs compile into d
        out["export"]["vs_triton_alone_per_process"] = explain(out["export"]["diff"], kept, variants())
    shutil.rmtree(d, ignore_errors=True)
    # identical to the reference, or each differing file byte for byte one that Triton alone writes for a process
    out["export_ok"] = exp["rc"] == 0 and (
        out["export"]["identical"] or out["export"].get("vs_triton_alone_per_process", {}).get("all", False)
    )
    query = (
        "SELECT count(*) AS n, count(DISTINCT cache_key) AS d FROM kernels k "
        f"JOIN snapshots s USING (snapshot_id) WHERE s.tag = '{CONC_TAG}'"
    )
    sql = run([str(py), "-m", "kdb", "sql", query, "--format", "json"], kdb_env, work)
    try:
        rows = json.loads(sql["stdout"])
    except ValueError:
        rows = sql["stdout"][-300:]
    out["rows"] = {"rc": sql["rc"], "result": rows, "stderr": noteworthy(sql)}
    out["rows_ok"] = sql["rc"] == 0 and rows == [{"n": n, "d": n}]
    out["ok"] = (
        out["all_rc0"]
        and out["all_compiled"]
        and out["no_kdb_capture_lines"]
        and not out["triton_dir_made"]
        and not out["counters"]["broken"]
        and out["commit"]["rc"] == 0
        and out["verify"]["rc"] == 0
        and out["export_ok"]
        and out["rows_ok"]
    )
    return out


def run_concurrency_case(py: Path, release: str, snapshot: str, build, work_root: Path, pg) -> dict:
    work, env0, spec, case, ref, reference = start_case(
        py, release, snapshot, build, work_root, "c", {"case": snapshot}
    )
    d, configs = work / "D", spec["configs"]
    homes = {
        "local": lambda w: {"KDB_HOME": str(w / "home")},
        "shared": lambda w: {"KDB_CATALOG": pg.catalog_url(pg.new_database()), "KDB_STORE": str(w / "store")},
    }
    made: dict[str, Path] = {}

    def variants() -> dict[str, Path]:  # made once per case, only where an export differs from the reference
        if not made:
            made.update(triton_variants(py, spec, env0, work, d))
        return made

    case["homes"] = {}
    for name, make in homes.items():
        hw = work / name
        hw.mkdir()
        case["homes"][name] = eight_at_once(py, spec, env0, hw, d, ref, make(hw), variants)
    case["kdb_tree"] = kdb_tree()
    case["ok"] = reference["compiled"] == len(configs) > 0 and all(h["ok"] for h in case["homes"].values())
    return case


def concurrency_table(doc: dict) -> str:
    rows = [
        "| release | target | local ok | local s | shared ok | shared s |",
        "|---|---|---|---|---|---|",
    ]
    for case in doc.get("concurrency", []):
        tgt = f"{case['backend']} {case['target']}" + ("" if case["corpus_snapshot"] else " (not in corpus)")
        cells = []
        for name in ("local", "shared"):
            h = case["homes"].get(name, {})
            mark = "yes" if h.get("ok") else "NO"
            if h.get("ok") and not h["export"]["identical"]:
                mark = "yes†"  # export = Triton alone in one process's config order, not the reference's
            cells += [mark, str(h.get("seconds", "-"))]
        rows.append(f"| {case['release']} | {tgt} | {' | '.join(cells)} |")
    rows.append(
        "\n† the export differs from the reference, each differing file byte for byte what Triton alone writes "
        "when a process compiles its configs in that order (the file depends on what the process compiled before)"
    )
    return "\n".join(rows)


def kdb_tree() -> dict:
    """The checkout's commit, and kdb/ files changed from it (the kdb that ran)."""

    def git(*args: str) -> str:
        p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return p.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "kdb_changed": git("status", "--porcelain", "--", "kdb").splitlines()}


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
    ap.add_argument("--case", action="append", help="case(s) to run, as CASES names them (t3.9.0-gfx942, sm90)")
    ap.add_argument("--only-concurrency", action="store_true", help="run the concurrency phase alone")
    ap.add_argument("--no-concurrency", action="store_true", help="skip the concurrency phase (no PostgreSQL)")
    args = ap.parse_args()
    if args.only_concurrency and args.no_concurrency:
        ap.error("--only-concurrency and --no-concurrency exclude each other")
    os.nice(10)
    build = corpus_build()
    args.work.mkdir(parents=True, exist_ok=True)
    doc = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"cases": [], "capture_check": {}}
    doc["notes"] = NOTES
    wanted = [(r, s) for r, s in CASES if (not args.only or r in args.only) and (not args.case or s in args.case)]
    for release, snapshot in [] if args.only_concurrency else wanted:
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
    if not args.no_concurrency:
        pg = pg_server()  # one server for the whole run, a fresh database per shared case
        try:
            for release, snapshot in wanted:
                py = ensure_venv(args.venvs, release)
                t0 = time.monotonic()
                case = run_concurrency_case(py, release, snapshot, build, args.work, pg)
                case["seconds"] = round(time.monotonic() - t0, 1)
                h = case["homes"]
                print(
                    f"{release} {snapshot} concurrency: ok={case['ok']} (local {h['local']['ok']} "
                    f"{h['local']['seconds']} s, shared {h['shared']['ok']} {h['shared']['seconds']} s)",
                    file=sys.stderr,
                    flush=True,
                )
                conc = [c for c in doc.get("concurrency", []) if (c["release"], c["case"]) != (release, snapshot)]
                conc.append(case)
                if not args.keep:
                    shutil.rmtree(case.pop("work"), ignore_errors=True)
                conc.sort(key=lambda c: ([int(x) for x in c["release"].split(".")], c["backend"] == "cuda"))
                doc["concurrency"] = conc
                RESULTS.parent.mkdir(parents=True, exist_ok=True)
                RESULTS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        finally:
            pg.stop()
    if not args.no_check and not args.only_concurrency:
        checks = doc.setdefault("capture_check", {})
        for release in sorted({r for r, _ in wanted}, key=lambda v: [int(x) for x in v.split(".")]):
            checks[release] = capture_check(ensure_venv(args.venvs, release))
        if not args.only or "2.2.0" in args.only:
            py22 = ensure_venv(args.venvs, "2.2.0")
            checks["2.2.0 (no torch)"] = capture_check(py22)
            checks["2.2.0 (torch stub)"] = capture_check(py22, torch_stub(args.work))
        RESULTS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if not args.only_concurrency:
        print(table(doc))
    if doc.get("concurrency") and not args.no_concurrency:
        print()
        print(concurrency_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
