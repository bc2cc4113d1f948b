#!/usr/bin/env python3
"""Why did it compile (issue 42) on a real `torch.compile` workload on a GPU: the same scenario run twice through
kdb's Triton cache manager, each run a fresh process with a fresh TORCHINDUCTOR_CACHE_DIR, then every compile of
the second run checked against `kdb capture misses --format json` and against the two runs' stored artifacts.

Per scenario (corpus/profiles/make_profiles.py, run by bench/capture_torch.py's phase runner):
  why1  KDB_CAPTURE_TAG=why1-<s>: Inductor generates and Triton compiles every kernel
  why2  KDB_CAPTURE_TAG=why2-<s>: a fresh Inductor cache again; what Triton compiles now (not served by kdb) is what
        `kdb capture misses --tag why2-<s>` must explain
Checks, each written to OUT/why_compiled_torch.json:
  explained     every folder run 2 compiled (its snapshot's folders less run 1's, from the catalog) has a
                compile listed by `kdb capture misses`, and every listed compile a folder; none says the key differs in
                a part kdb could not read, or is a first compile of a kernel run 1 compiled too
  right part    for each listed compile whose nearest is a run-1 folder, the two stored TTIRs (`kdb cat`) compared:
                identical: the parts named must be ones that leave the TTIR unchanged (not a constexpr, an argument
                type or attribute, or a changed kernel body); identical once the paths in debug locations are
                replaced: a part named must be the source or a path (`source moved …`, `… differs only in a path`, a
                function it calls changed); identical once debug locations are dropped: no part named may be one that
                changes the code (a constexpr, an argument type or attribute)

Usage (device machine):  python3 bench/why_compiled_torch.py --work W --out OUT [--scenario resnet18_infer ...]
         (no GPU: --help, and the import check `python3 bench/why_compiled_torch.py --check`)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Parts whose change changes the TTIR: a kernel whose TTIR is identical cannot have compiled for one of these.
TTIR_CHANGING = re.compile(r"^(constexpr |arg \d+ (dtype|type|attributes) |kernel source changed)")
# Parts that name the source's place or a path: what a TTIR differing only in location paths should be named by.
SOURCE_OR_PATH = re.compile(r"(source moved|differs? only in a path|a function it calls|kernel source changed)")
# A later stage's compiler (ptxas, or the backend's hash): leaves the TTIR as it was; checked against the PTX headers.
BACKEND = re.compile(r"^backend (compiler|hash) ")
_QUOTED_PATH = re.compile(r'"/[^"]*"')
_DEBUG_BYTES = re.compile(r"^\s*\.b8\s+\d+\s*$")
UNEXPLAINED = ("not exposed by", "no recorded part differs")  # kdb/capture/misses.py's words for an unknown
_LOC_PATH = re.compile(r'loc\("[^"]*"')
_LOC_USE = re.compile(r'\s?loc\((#loc\d*|unknown|"[^"]*":\d+:\d+)\)')


def _without_locations(ttir: str) -> str:
    """The TTIR with its debug locations dropped: the `#locN = loc(...)` lines and every `loc(...)` use."""
    return _LOC_USE.sub("", "\n".join(line for line in ttir.splitlines() if not line.startswith("#loc")))


def _capture_torch():
    spec = importlib.util.spec_from_file_location("capture_torch", ROOT / "bench" / "capture_torch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _json(done) -> object:  # noqa: ANN001 - a CompletedProcess
    text = done.stdout.strip()
    return json.loads(text) if text[:1] in "[{" else None


def _ttir(ct, home: Path, tag: str | None, folder: str | None, kernel: str | None) -> str | None:  # noqa: ANN001
    return _cat(ct, home, tag, folder, kernel, "ttir")


def _ptx_but_paths(text: str) -> str:
    """The PTX without what names the source's place: quoted paths, and the debug sections' byte data (`.b8 N`
    lines: DWARF strings, where a run's Inductor folder name is spelled byte by byte)."""
    return "\n".join(ln for ln in _QUOTED_PATH.sub('"<path>"', text).splitlines() if not _DEBUG_BYTES.match(ln))


def _cubin(home: Path, tag: str | None, folder: str | None, kernel: str | None) -> bytes | None:
    """The stored cubin's bytes: with the PTX equal but for paths, cubins that differ say the stage after the PTX
    (ptxas) made other code — the oracle for a 'backend compiler ptxas A → B' reason."""
    import subprocess

    if not (tag and folder and kernel):
        return None
    code = "import sys; from kdb.cli import main; sys.argv[0] = 'kdb'; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "cat", tag, f"{folder}/{kernel}.cubin"],
        env={**os.environ, "KDB_HOME": str(home)},
        capture_output=True,
        timeout=300,
        cwd="/",
    )
    return done.stdout if done.returncode == 0 and done.stdout[:4] == b"\x7fELF" else None


def _cat(ct, home: Path, tag: str | None, folder: str | None, kernel: str | None, ext: str) -> str | None:  # noqa: ANN001
    if not (tag and folder and kernel):
        return None
    done = ct._kdb(home, "cat", tag, f"{folder}/{kernel}.{ext}")
    return done.stdout if done.returncode == 0 else None


def _folders(ct, home: Path, tag: str) -> set[str] | None:  # noqa: ANN001
    rows = _json(
        ct._kdb(
            home,
            "sql",
            f"SELECT k.cache_key FROM kernels k JOIN snapshots s USING (snapshot_id) WHERE s.tag = '{tag}'",
            "--format",
            "json",
        )
    )
    return {r["cache_key"] for r in rows} if isinstance(rows, list) else None


def _compiled_folders(ct, home: Path, tag1: str, tag2: str) -> set[str] | None:  # noqa: ANN001
    """Run 2's snapshot's folders less run 1's (a folder of both was served to run 2 from run 1): what Triton
    compiled in run 2, read from the catalog (the artifacts), not from kdb's records."""
    one, two = _folders(ct, home, tag1), _folders(ct, home, tag2)
    return None if one is None or two is None else two - one


def check(entry: dict, ttir_a: str | None, ttir_b: str | None) -> dict:
    """One compile of run 2 against its nearest of run 1: are the parts named consistent with the two TTIRs?"""
    named = entry["differs"]
    out = {"kernel": entry["kernel"], "folder": entry["folder"], "differs": named}
    if ttir_a is None or ttir_b is None:
        out["ttir"] = "unavailable"
        return out
    if ttir_a == ttir_b:
        out["ttir"] = "identical"
        out["right"] = not any(TTIR_CHANGING.match(w) for w in named)
    elif _LOC_PATH.sub('loc("<path>"', ttir_a) == _LOC_PATH.sub('loc("<path>"', ttir_b):
        out["ttir"] = "identical but for location paths"
        out["right"] = any(SOURCE_OR_PATH.search(w) or BACKEND.match(w) for w in named) and not any(
            TTIR_CHANGING.match(w) and "kernel source changed" not in w for w in named
        )
    elif _without_locations(ttir_a) == _without_locations(ttir_b):
        out["ttir"] = "identical but for debug locations"  # lines too: a part named must not change the code
        out["right"] = not any(TTIR_CHANGING.match(w) and "kernel source changed" not in w for w in named)
    else:
        out["ttir"] = "different"
    return out


def scenario_check(ct, scenario: str, work: Path, out: Path) -> dict:  # noqa: ANN001
    home = work / "home"
    result: dict = {"scenario": scenario, "phases": []}
    for run in ("why1", "why2"):
        stats = work / f"stats-{scenario}-{run}"
        shutil.rmtree(stats, ignore_errors=True)
        env = {
            "TRITON_CACHE_MANAGER": "kdb.capture:CacheManager",
            "KDB_HOME": str(home),
            "KDB_CAPTURE_TAG": f"{run}-{scenario}",
            "KDB_CAPTURE_STATS": str(stats),
        }
        phase = ct._phase(scenario, work, env, run)
        phase["counters"] = ct._counters(stats)
        result["phases"].append(phase)
    tag1, tag2 = f"why1-{scenario}", f"why2-{scenario}"
    for tag in (tag1, tag2):  # whatever an exit left spooled
        ct._kdb(home, "capture", "commit", "--tag", tag)
    done = ct._kdb(home, "capture", "misses", "--tag", tag2, "--format", "json")
    (out / f"misses-{scenario}.json").write_text(done.stdout)
    document = _json(done)
    if not isinstance(document, dict):
        result["misses_error"] = done.stderr[-1500:]
        return result
    compiles = document["compiles"]
    listed = {c["folder"] for c in compiles}
    compiled = _compiled_folders(ct, home, tag1, tag2)
    names1 = {
        c["kernel"]
        for c in (_json(ct._kdb(home, "capture", "misses", "--tag", tag1, "--format", "json")) or {}).get(
            "compiles", []
        )
    }
    result["run2_compiles_listed"] = len(compiles)
    result["run2_folders_compiled"] = None if compiled is None else len(compiled)
    result["compiled_not_listed"] = None if compiled is None else sorted(compiled - listed)[:50]
    result["listed_not_compiled"] = None if compiled is None else sorted(listed - compiled)[:50]
    result["unexplained"] = [c for c in compiles if any(u in w for w in c["differs"] for u in UNEXPLAINED)]
    result["first_compile_of_a_run1_kernel"] = [
        c["kernel"] for c in compiles if c["differs"] == ["first compile of this kernel"] and c["kernel"] in names1
    ]
    result["reasons"] = dict(
        Counter(w.split(" ")[0] if not w.startswith(("source", "debug")) else w for c in compiles for w in c["differs"])
    )
    checks = []
    for c in compiles:
        if c["nearest_tag"] != tag1:
            continue
        ttir_a = _ttir(ct, home, tag1, c["nearest_folder"], c["kernel"])
        ttir_b = _ttir(ct, home, tag2, c["folder"], c["kernel"])
        checked = check(c, ttir_a, ttir_b)
        if any(BACKEND.match(w) for w in c["differs"]):  # the evidence: the stage after the PTX made other code
            pair = ((tag1, c["nearest_folder"]), (tag2, c["folder"]))
            ptx = [_cat(ct, home, t, f, c["kernel"], "ptx") for t, f in pair]
            cubins = [_cubin(home, t, f, c["kernel"]) for t, f in pair]
            same_ptx = None not in ptx and _ptx_but_paths(ptx[0]) == _ptx_but_paths(ptx[1])
            checked["ptx_same_but_paths"] = same_ptx
            checked["cubin_same"] = None not in cubins and cubins[0] == cubins[1]
            checked["backend_evidence"] = same_ptx and None not in cubins and cubins[0] != cubins[1]
            if None not in ptx and not same_ptx:  # what else differs in the PTX (the first few lines)
                import difflib

                lines = [_QUOTED_PATH.sub('"<path>"', t).splitlines() for t in ptx]
                changed = [d for d in difflib.unified_diff(*lines, n=0, lineterm="") if d[:1] in "+-"]
                checked["ptx_diff"] = changed[2:14]
            checked["ptx_missing"] = [t is None for t in ptx]
        checks.append(checked)
    result["ttir_checks"] = dict(Counter(k["ttir"] for k in checks))
    result["ttir_same_named_wrong"] = [k for k in checks if k.get("right") is False]
    result["ttir_same_named_right"] = sum(1 for k in checks if k.get("right") is True)
    result["ttir_same_examples"] = [k for k in checks if k.get("right") is True][:10]
    result["backend_named"] = sum(1 for k in checks if "backend_evidence" in k)
    result["backend_named_with_evidence"] = sum(1 for k in checks if k.get("backend_evidence") is True)
    result["all_explained"] = (
        compiled is not None
        and not result["compiled_not_listed"]
        and not result["listed_not_compiled"]
        and not result["unexplained"]
        and not result["first_compile_of_a_run1_kernel"]
    )
    result["all_right"] = (
        not result["ttir_same_named_wrong"] and result["backend_named"] == result["backend_named_with_evidence"]
    )
    table = ct._kdb(home, "capture", "misses", "--tag", tag2, "--format", "markdown")
    (out / f"misses-{scenario}.md").write_text(table.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description="issue 42 on a real torch.compile workload, run twice")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--scenario", action="append")
    parser.add_argument("--check", action="store_true", help="import what the run needs, and stop (no GPU)")
    args = parser.parse_args()
    ct = _capture_torch()
    if args.check:
        import kdb.capture.misses  # noqa: F401

        print("ok: bench/capture_torch.py and kdb.capture.misses import")
        return 0
    if args.work is None or args.out is None:
        parser.error("--work and --out are required")
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for scenario in args.scenario or ["resnet18_infer", "mlp_train"]:
        results.append(scenario_check(ct, scenario, args.work, args.out))
        (args.out / "why_compiled_torch.json").write_text(json.dumps(results, indent=1))
        print(json.dumps(results[-1], indent=1)[:4000], flush=True)
    return 0 if all(r.get("all_explained") and r.get("all_right") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
