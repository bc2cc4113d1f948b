"""Measured time (issue 29): real torch.profiler traces and Proton profiles of three torch.compile runs on an H100
(corpus/profiles), imported beside the TorchInductor caches those runs used.

Every link is checked against an oracle kdb did not compute: the registers per thread and block CUPTI recorded
for each launch against the linked folder's cubin as NVIDIA's cuobjdump reads it (with the driver's launch floor
of 16 registers, 32 for a kernel calling into the driver) and its num_warps from Triton's JSON, the grid against
Inductor's own rule (xnumel of the generated module over the winner's XBLOCK, read here with plain Python), and
every per-kernel total against the trace's own sums (plain json)."""

from __future__ import annotations

import csv
import functools
import gzip
import json
import math
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import ROOT
from corpus_cache import INGEST_CODE, cached, clone, code_version, file_sha256
from helpers import kdb_subprocess

ARCHIVE = ROOT / "corpus" / "profiles" / "h100-torch2.11-t3.6.0" / "profiles.tar.xz"
SCENARIOS = ["gpt2_train", "mlp_train", "resnet18_infer"]
FORMATS = {"torch-trace": "{}.torch.json.gz", "proton-hatchet": "{}.proton.hatchet"}
# The one share of Triton time kdb cannot link, said exactly: Proton keeps a kernel's name only and sums the
# launches of every kernel of that name, and two of gpt2's generated modules (forward and backward graphs) define a
# `triton_poi_fused__to_copy_12` (each its own autotune winner; the torch trace's grids tell them apart, below).
PROTON_GPT2_AMBIGUOUS = {("triton_poi_fused__to_copy_12", "ambiguous: 2 folders fit"): (12, 15295)}


def _sql(home: Path, query: str) -> list[dict]:
    r = kdb_subprocess(home, "sql", query, "--format", "json")
    assert r.code == 0, r.err
    return r.json()


@pytest.fixture(scope="module")
def tree(unpacked_archive) -> Path:
    """The archive unpacked once: caches/<scenario>/ and profiles/<scenario>.{torch.json.gz,proton.hatchet}."""
    return unpacked_archive(ARCHIVE)


@pytest.fixture(scope="module")
def snapshots(tree) -> Path:
    """A home holding each scenario's cache tagged by its name (`--no-sass`), built once per archive and ingest
    code, shared read-only."""
    parts = {"profiles": file_sha256(ARCHIVE), "scenarios": SCENARIOS, "sass": False, "code": code_version(INGEST_CODE)}

    def build(home: Path) -> None:
        from kdb.analysis.model import AnalysisOptions
        from kdb.ingest.snapshot import IngestRequest, ingest
        from kdb.store.home import Home

        for name in SCENARIOS:
            ingest(Home(home), IngestRequest(tree / "caches" / name, name, options=AnalysisOptions(sass=False)))

    return cached("homes", parts, build)


@pytest.fixture(scope="module")
def imported(snapshots, tree, tmp_path_factory) -> tuple[Path, dict[str, dict[str, dict]]]:
    """(home, summaries): a copy of `snapshots` into which `kdb profile import` read each scenario's two files;
    summaries[scenario][format] is what it printed with --format json."""
    home = clone(snapshots, tmp_path_factory.mktemp("profiles") / "home")
    summaries: dict[str, dict[str, dict]] = {}
    for name in SCENARIOS:
        files = [str(tree / "profiles" / pattern.format(name)) for pattern in FORMATS.values()]
        r = kdb_subprocess(home, "profile", "import", *files, "--tag", name, "--format", "json")
        assert r.code == 0, r.err
        summaries[name] = {f["format"]: f for f in r.json()["files"]}
    return home, summaries


def _torch_kernels(tree: Path, name: str) -> list[dict]:
    doc = json.loads(gzip.decompress((tree / "profiles" / f"{name}.torch.json.gz").read_bytes()))
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


def _proton_frames(tree: Path, name: str) -> list[dict]:
    out, stack = [], [json.loads((tree / "profiles" / f"{name}.proton.hatchet").read_text())[0]]
    while stack:
        node = stack.pop()
        if "device_type" in node["metrics"] and node["metrics"]["count"]:
            out.append(node)
        stack += node["children"]
    return out


def _per_name(tree: Path, name: str, fmt: str) -> dict[str, tuple[int, int]]:
    """Kernel name -> (launches, ns), summed here from the file with plain json."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    if fmt == "torch-trace":
        for e in _torch_kernels(tree, name):
            sums[e["name"]][0] += 1
            sums[e["name"]][1] += round(e["dur"] * 1000)
    else:
        for node in _proton_frames(tree, name):
            sums[node["frame"]["name"]][0] += node["metrics"]["count"]
            sums[node["frame"]["name"]][1] += node["metrics"]["time (ns)"]
    return {k: (n, ns) for k, (n, ns) in sums.items()}


def _rows(home: Path, name: str, fmt: str, table: str) -> list[dict]:
    return _sql(
        home,
        f"SELECT t.* FROM {table} t JOIN profile_files p USING (snapshot_id, profile_hash) "
        f"JOIN snapshots s USING (snapshot_id) WHERE s.tag = '{name}' AND p.format = '{fmt}'",
    )


# -- what is linked -------------------------------------------------------------------------------------------


@pytest.mark.slow  # outside the inner loop: 4 s on 2 cores (bench/test_suite.py)
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("name", SCENARIOS)
def test_the_triton_kernel_time_is_linked(imported, tree, name, fmt):
    home, summaries = imported
    summary = summaries[name][fmt]
    per_name = _per_name(tree, name, fmt)
    # Triton's kernels are Inductor's here (`triton_` names); everything else is cuBLAS, cuDNN or aten
    triton = {k: v for k, v in per_name.items() if k.startswith("triton_")}
    assert summary["triton_launches"] == sum(n for n, _ in triton.values())
    assert summary["triton_ns"] == sum(ns for _, ns in triton.values())
    foreign = summary["unlinked"].pop("not a Triton kernel")
    assert foreign == [
        sum(n for k, (n, _) in per_name.items() if k not in triton),
        sum(ns for k, (_, ns) in per_name.items() if k not in triton),
    ]
    missed = {
        (r["kernel_name"], r["reason"]): (r["launches"], r["total_ns"])
        for r in _rows(home, name, fmt, "profile_unlinked")
        if r["reason"] != "not a Triton kernel"
    }
    if (name, fmt) == ("gpt2_train", "proton-hatchet"):
        assert missed == PROTON_GPT2_AMBIGUOUS
        assert summary["linked_ns"] / summary["triton_ns"] > 0.97
    else:
        assert missed == {} and summary["unlinked"] == {}
        assert summary["linked_ns"] / summary["triton_ns"] >= 0.99


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("name", SCENARIOS)
def test_per_kernel_totals_equal_the_files_own_sums(imported, tree, name, fmt):
    home, summaries = imported
    per_name = _per_name(tree, name, fmt)
    got: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for table in ("profile_kernel_times", "profile_unlinked"):
        for r in _rows(home, name, fmt, table):
            got[r["kernel_name"]][0] += r["launches"]
            got[r["kernel_name"]][1] += r["total_ns"]
    assert {k: tuple(v) for k, v in got.items()} == per_name
    (profile,) = _sql(
        home,
        f"SELECT p.* FROM profile_files p JOIN snapshots s USING (snapshot_id) "
        f"WHERE s.tag = '{name}' AND p.format = '{fmt}'",
    )
    assert (profile["launches"], profile["total_ns"]) == (
        sum(n for n, _ in per_name.values()),
        sum(ns for _, ns in per_name.values()),
    )
    assert summaries[name][fmt]["total_ns"] == profile["total_ns"]


@pytest.mark.slow  # outside the inner loop: 3 s on 2 cores (bench/test_suite.py)
def test_kernel_times_view_sums_the_profiles_and_shares_the_whole_gpu_time(imported):
    home, _ = imported
    for name in SCENARIOS:
        rows = _sql(home, f"SELECT * FROM kernel_times WHERE tag = '{name}'")
        (whole,) = _sql(
            home,
            f"SELECT sum(total_ns) AS ns FROM profile_files p JOIN snapshots s USING (snapshot_id) "
            f"WHERE s.tag = '{name}'",
        )
        parts = _sql(
            home,
            f"SELECT cache_key, sum(launches) AS n, sum(total_ns) AS ns FROM profile_kernel_times t "
            f"JOIN snapshots s USING (snapshot_id) WHERE s.tag = '{name}' GROUP BY ALL",
        )
        assert {r["cache_key"]: (r["launches"], r["total_ns"]) for r in rows} == {
            p["cache_key"]: (p["n"], p["ns"]) for p in parts
        }
        for r in rows:
            assert math.isclose(r["share"], r["total_ns"] / whole["ns"]) and math.isclose(
                r["mean_ns"], r["total_ns"] / r["launches"]
            )
        assert 0 < sum(r["share"] for r in rows) < 1  # cuBLAS, cuDNN and aten take the rest


# -- every link is right: the oracle --------------------------------------------------------------------------


def _cubin_figures(cuda_bin: Path, cubin: Path) -> tuple[int, bool]:
    """(registers per thread, calls into the driver) of a cubin as NVIDIA's cuobjdump reads it."""
    usage = subprocess.run([cuda_bin / "cuobjdump", "--dump-resource-usage", cubin], capture_output=True, text=True)
    (registers,) = re.findall(r"REG:(\d+)", usage.stdout)
    elf = subprocess.run([cuda_bin / "cuobjdump", "-elf", cubin], capture_output=True, text=True).stdout
    symtab = elf.split(".section .symtab", 1)[1].split("\n\n", 1)[0]
    calls = any(f[3] == "FUNC" and f[7] == "0" for f in (ln.split() for ln in symtab.splitlines()) if len(f) >= 9)
    return int(registers), calls


def _oracle(cuda_bin: Path, cache: Path, key: str) -> dict:
    """What a launch of the folder records, from the folder's files alone."""
    folder = cache / key
    (cubin,) = folder.glob("*.cubin")
    meta = json.loads(next(p for p in folder.glob("*.json") if not p.name.startswith("__grp__")).read_text())
    registers, calls = _cubin_figures(cuda_bin, cubin)
    return {
        "registers": max(registers, 32 if calls else 16),  # the driver's launch floor (kdb/profile/link.py)
        "block": [meta["num_warps"] * meta["warp_size"], 1, 1],
        "shared": meta["shared"],
        "cubin": cubin.read_bytes(),
    }


@functools.cache
def _inductor_grid(cache: Path, key: str) -> list[int] | None:
    """Inductor's Grid1D rule for a folder that is a module's autotune winner: ceil(xnumel / XBLOCK), with xnumel
    as the generated module writes it and XBLOCK from its .best_config (plain text and JSON here)."""
    folder = key.rsplit("/", 1)[-1]
    for best in cache.glob("*/*.best_config"):
        config = json.loads(best.read_text())
        if config.get("triton_cache_hash") != folder:
            continue
        (module,) = best.parent.glob("*.py")
        text = module.read_text()
        numel = re.search(r"^    xnumel = (\d+)$", text, re.M)
        if "'grid_type': 'Grid1D'" in text and numel:
            return [math.ceil(int(numel.group(1)) / config.get("XBLOCK", 1)), 1, 1]  # a list, as the trace's
    return None


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_torch_trace_link_is_right(imported, tree, cuda_bin, name):
    """Each launch of the trace, with what CUPTI recorded, fits exactly one folder kdb linked its kernel name to
    (by the oracle's registers, block, shared memory and grid), and kdb counted it on that folder."""
    home, _ = imported
    cache = tree / "caches" / name
    linked = _rows(home, name, "torch-trace", "profile_kernel_times")
    by_name: dict[str, list[str]] = defaultdict(list)
    for r in linked:
        by_name[r["kernel_name"]].append(r["cache_key"])
    oracle = {r["cache_key"]: _oracle(cuda_bin, cache, r["cache_key"]) for r in linked}
    counted: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    mismatches = []
    for e in _torch_kernels(tree, name):
        if e["name"] not in by_name:
            continue
        a = e["args"]
        fits = [
            key
            for key in by_name[e["name"]]
            if (oracle[key]["registers"], oracle[key]["block"], oracle[key]["shared"])
            == (a["registers per thread"], a["block"], a["shared memory"])
            and _inductor_grid(cache, key) in (None, a["grid"])
        ]
        if len(fits) != 1 and len({oracle[k]["cubin"] for k in fits}) != 1:  # or one binary, compiled twice
            mismatches.append((e["name"], a["registers per thread"], a["block"], a["grid"], fits))
            continue
        counted[min(fits)][0] += 1
        counted[min(fits)][1] += round(e["dur"] * 1000)
    assert mismatches == []
    assert {r["cache_key"]: [r["launches"], r["total_ns"]] for r in linked} == dict(counted)


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_proton_link_is_a_folder_the_torch_trace_ran(imported, tree, cuda_bin, name):
    """Proton keeps no launch record: each folder it linked must be the one the same scenario's torch trace ran
    under that name (links the test above checks against cuobjdump), and fit a launch record the trace holds."""
    home, _ = imported
    cache = tree / "caches" / name
    torch_links = defaultdict(set)
    for r in _rows(home, name, "torch-trace", "profile_kernel_times"):
        torch_links[r["kernel_name"]].add(r["cache_key"])
    records = defaultdict(set)
    for e in _torch_kernels(tree, name):
        a = e["args"]
        records[e["name"]].add((a["registers per thread"], tuple(a["block"]), a["shared memory"]))
    for r in _rows(home, name, "proton-hatchet", "profile_kernel_times"):
        assert r["cache_key"] in torch_links[r["kernel_name"]], r
        o = _oracle(cuda_bin, cache, r["cache_key"])
        assert (o["registers"], tuple(o["block"]), o["shared"]) in records[r["kernel_name"]], r
    if name == "gpt2_train":  # the name Proton cannot split: the torch trace ran both modules' kernels
        assert len(torch_links["triton_poi_fused__to_copy_12"]) == 2


# -- bad files change nothing ---------------------------------------------------------------------------------

STATE = [
    "SELECT * EXCLUDE (imported_at) FROM profile_files ORDER BY ALL",
    "SELECT * FROM profile_kernel_times ORDER BY ALL",
    "SELECT * FROM profile_unlinked ORDER BY ALL",
    "SELECT * FROM blobs ORDER BY hash",
    "SELECT tag, kernel_count, file_count FROM snapshots ORDER BY tag",
]


def _state(home: Path) -> list[str]:
    objects = sorted(p.relative_to(home).as_posix() for p in (home / "objects").rglob("*") if p.is_file())
    return [kdb_subprocess(home, "sql", q, "--format", "csv").out for q in STATE] + objects


def _png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0\0")) + chunk(b"IEND", b"")


@pytest.mark.slow  # outside the inner loop: 11 s on 2 cores (bench/test_suite.py)
def test_malformed_truncated_and_foreign_files_are_refused_and_change_nothing(imported, tree, tmp_path):
    home, _ = imported
    gz = (tree / "profiles" / "mlp_train.torch.json.gz").read_bytes()
    hatchet = (tree / "profiles" / "mlp_train.proton.hatchet").read_bytes()
    plain = gzip.decompress(gz)
    bad = {
        "half.torch.json.gz": (gz[: len(gz) // 2], "truncated gzip stream"),
        "half.torch.json": (plain[: len(plain) // 2], "truncated JSON"),
        "half.proton.hatchet": (hatchet[: len(hatchet) // 2], "truncated JSON"),
        "broken.json": (plain.replace(b'"traceEvents"', b'"traceEvents" "'), "malformed JSON"),
        "picture.png": (_png(), "not a profile: a PNG image"),
        "other.json": (b'{"schema": 1, "rows": []}', "not a profile kdb reads"),
        "list.json": (b"[1, 2, 3]", "not a profile kdb reads"),
        "no-kernels.json": (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a"}]}', "without any GPU kernel"),
        "binary.bin": (bytes(range(256)), "binary data"),
    }
    before = _state(home)
    for file_name, (data, words) in bad.items():
        path = tmp_path / file_name
        path.write_bytes(data)
        # alone, and after a good file in the same command: nothing of either is recorded
        for args in ([str(path)], [str(tree / "profiles" / "mlp_train.proton.hatchet"), str(path)]):
            r = kdb_subprocess(home, "profile", "import", *args, "--tag", "mlp_train")
            assert r.code == 3, (file_name, r.err)
            assert r.err.count("\n") == 1 and r.err.startswith(f"kdb: error: {path}: ") and words in r.err, r.err
            assert r.out == ""
    r = kdb_subprocess(home, "profile", "import", str(tree / "profiles" / "mlp_train.proton.hatchet"), "--tag", "nope")
    assert r.code == 4 and r.err.startswith("kdb: error: no snapshot tagged 'nope'")
    r = kdb_subprocess(home, "profile", "import", str(tmp_path / "missing.json"), "--tag", "mlp_train")
    assert r.code == 3 and "no such file" in r.err
    assert _state(home) == before


@pytest.mark.slow  # outside the inner loop: 10 s on 2 cores (bench/test_suite.py)
def test_reimport_is_idempotent_and_gc_verify_rm_know_the_files(imported, tree, tmp_path):
    home = clone(imported[0], tmp_path / "home")
    before = _state(home)
    files = [str(tree / "profiles" / p.format("resnet18_infer")) for p in FORMATS.values()]
    r = kdb_subprocess(home, "profile", "import", *files, "--tag", "resnet18_infer", "--format", "json")
    assert r.code == 0 and all(f["replaced"] for f in r.json()["files"])
    assert _state(home) == before
    assert kdb_subprocess(home, "gc").code == 0 and _state(home) == before  # the profile blobs are referenced
    verified = kdb_subprocess(home, "verify", "--format", "json")
    assert verified.code == 0 and verified.json()["problems"] == []
    hashes = {
        r["profile_hash"]
        for r in _sql(
            home,
            "SELECT profile_hash FROM profile_files p JOIN snapshots s "
            "USING (snapshot_id) WHERE s.tag = 'resnet18_infer'",
        )
    }
    assert kdb_subprocess(home, "rm", "resnet18_infer").code == 0 and kdb_subprocess(home, "gc").code == 0
    assert not any((home / "objects" / h[:2] / h[2:]).exists() for h in hashes)
    assert _sql(
        home, "SELECT count(*) AS n FROM profile_files p WHERE snapshot_id NOT IN (SELECT snapshot_id FROM snapshots)"
    ) == [{"n": 0}]


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
def test_show_kernel_prints_its_measured_time(imported):
    home, _ = imported
    (top,) = _sql(
        home,
        "SELECT cache_key, kernel_name, launches FROM kernel_times WHERE tag = 'gpt2_train' "
        "ORDER BY total_ns DESC LIMIT 1",
    )
    r = kdb_subprocess(home, "show", "gpt2_train", "--kernel", top["cache_key"])
    assert r.code == 0 and "measured time:" in r.out
    assert "gpt2_train.torch.json.gz" in r.out and "gpt2_train.proton.hatchet" in r.out
    shown = kdb_subprocess(home, "show", "gpt2_train", "--kernel", top["cache_key"], "--format", "json").json()
    assert sum(t["launches"] for t in shown[0]["times"]) == top["launches"]
    # a kernel without measured time shows none
    (idle,) = _sql(
        home,
        "SELECT cache_key FROM kernels WHERE tag = 'gpt2_train' AND cache_key NOT IN "
        "(SELECT cache_key FROM kernel_times WHERE tag = 'gpt2_train') LIMIT 1",
    )
    r = kdb_subprocess(home, "show", "gpt2_train", "--kernel", idle["cache_key"])
    assert r.code == 0 and "measured time" not in r.out


# -- the shared home (DuckLake over PostgreSQL) ---------------------------------------------------------------


def test_a_shared_home_imports_and_push_carries_the_profiles(pg, imported, tree, tmp_path):
    """The same import into a shared catalog gives the local rows; `kdb push` of a local snapshot carries its
    profile rows and files."""
    import os

    local, _ = imported
    shared = ["--catalog", pg.catalog_url(pg.new_database()), "--store", str(tmp_path / "store")]
    name = "mlp_train"
    files = [str(tree / "profiles" / p.format(name)) for p in FORMATS.values()]
    env = {k: v for k, v in os.environ.items() if k not in ("KDB_CATALOG", "KDB_STORE")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "kdb", "--home", str(local), *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)

    assert run(*shared, "ingest", str(tree / "caches" / name), "--tag", "direct", "--no-sass", "-q").returncode == 0
    r = run(*shared, "profile", "import", *files, "--tag", "direct")
    assert r.returncode == 0, r.stderr
    assert run(*shared, "profile", "import", *files, "--tag", "direct").returncode == 0  # idempotent there too
    pushed = run(*shared, "push", name)
    assert pushed.returncode == 0, pushed.stderr
    times = "SELECT cache_key, kernel_name, launches, total_ns, share FROM kernel_times WHERE tag = '{}' ORDER BY ALL"
    unlinked = "SELECT reason, kernels, launches, total_ns FROM profile_unlinked_counts WHERE tag = '{}' ORDER BY ALL"
    want = [_sql(local, q.format(name)) for q in (times, unlinked)]
    for tag in ("direct", name):
        got = []
        for q in (times, unlinked):
            r = run(*shared, "sql", q.format(tag), "--format", "json")
            assert r.returncode == 0, r.stderr
            got.append(json.loads(r.stdout))
        assert got == want, tag
    verified = run(*shared, "verify", "--format", "json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["problems"] == []


# -- the linker's rules on their own --------------------------------------------------------------------------


def test_link_rules():
    from kdb.profile.formats import Launches
    from kdb.profile.link import Folder, link_launches, not_triton

    assert not_triton("nvjet_sm90_tst_64x48_64x15_2x4_h_bz_TNT") and not_triton("void at::native::f<8>(int)")
    assert not_triton("_ZN2at6native29vectorized_elementwise_kernel") and not not_triton("matmul_kernel")
    launch = Launches("k", 3, 300, grid=(8, 1, 1), block=(128, 1, 1), registers=16, shared=0)
    four = Folder("a", 4, 32, 10, 0, backend="cuda")
    assert link_launches(launch, [four]).cache_key == "a"  # 10 registers launch with the CUDA driver's 16
    assert link_launches(launch, [Folder("b", 4, 32, 18, 0)]).reason == "no folder of that name fits the launch"
    assert link_launches(launch, [Folder("c", 8, 32, 10, 0)]).reason == "no folder of that name fits the launch"
    assert link_launches(Launches("k", 1, 1), []).reason == "no kernel of that name"
    tied = [Folder("x", 4, 32, 7, 0, True, "m1", backend="cuda"), Folder("y", 4, 32, 10, 0, None, "m1", backend="cuda")]
    assert link_launches(launch, tied).cache_key == "x"  # the module's autotune winner
    two = [
        Folder("x", 4, 32, 7, 0, True, "m1", grid=(8, 1, 1), backend="cuda"),
        Folder("z", 4, 32, 14, 0, True, "m2", grid=(128, 1, 1), backend="cuda"),
    ]
    assert link_launches(launch, two).cache_key == "x"  # the winners of two modules told apart by the grid
    assert link_launches(Launches("k", 1, 1), two).reason == "ambiguous: 2 folders fit"  # no grid recorded
    same = [
        Folder("p", 4, 32, 7, 0, code_hash="h", backend="cuda"),
        Folder("q", 4, 32, 7, 0, code_hash="h", backend="cuda"),
    ]
    linked = link_launches(launch, same)
    assert (linked.cache_key, linked.rules, linked.detail) == ("p", ("same binary",), "identical code object in q")


# -- kdb diff: the time column and --rank time ----------------------------------------------------------------


@pytest.mark.slow  # outside the inner loop: 3 s on 2 cores (bench/test_suite.py)
def test_diff_shows_measured_time_and_ranks_by_it(imported):
    home, _ = imported
    a, b = "mlp_train", "gpt2_train"
    times = {
        (r["tag"], r["cache_key"]): r for r in _sql(home, f"SELECT * FROM kernel_times WHERE tag IN ('{a}', '{b}')")
    }
    # two different models: few kernels pair (--min-match 0), each kernel keeps its own side's time
    r = kdb_subprocess(home, "diff", a, b, "--all", "--rank", "time", "--min-match", "0", "--format", "json")
    assert r.code == 0, r.err
    kernels = r.json()["kernels"]
    for k in kernels:
        for side, tag in (("a", a), ("b", b)):
            key = k[f"{side}_cache_key"]
            want = times.get((tag, key))
            got = k["time"][side]
            assert got == (
                None
                if want is None
                else {"launches": want["launches"], "total_ns": want["total_ns"], "share": want["share"]}
            )
    measured = [(k["time"]["b"] or k["time"]["a"] or {}).get("total_ns") for k in kernels]
    first_unmeasured = measured.index(None) if None in measured else len(measured)
    assert measured[:first_unmeasured] == sorted(measured[:first_unmeasured], reverse=True)
    assert all(m is None for m in measured[first_unmeasured:])
    sides = {(tag, k[f"{side}_cache_key"]) for k in kernels for side, tag in (("a", a), ("b", b)) if k["time"][side]}
    assert sides == set(times)  # every measured folder of either side, on its row
    table = kdb_subprocess(home, "diff", a, b, "--all", "--rank", "time", "--min-match", "0", "--no-pager")
    lines = table.out.splitlines()
    header = next(line for line in lines if line.startswith("status"))
    assert " time " in header and any(line.startswith("time: the kernel's share") for line in lines)
    (top,) = [k for k in kernels[:1]]
    assert top["key"] in lines[lines.index(header) + 1]  # the longest-running kernel heads the table
    r = kdb_subprocess(home, "diff", a, b, "--rank", "cost")
    assert r.code == 2 and "unknown --rank 'cost'" in r.err


def test_diff_csv_carries_the_measured_time_of_each_side(imported):
    """The CSV of `kdb diff` has each side's launches, ns and share, the kernel_times view's figures."""
    home, _ = imported
    a, b = "mlp_train", "gpt2_train"
    times = {
        (r["tag"], r["cache_key"]): r for r in _sql(home, f"SELECT * FROM kernel_times WHERE tag IN ('{a}', '{b}')")
    }
    r = kdb_subprocess(home, "diff", a, b, "--all", "--min-match", "0", "--format", "csv")
    assert r.code == 0, r.err
    rows = list(csv.DictReader(line for line in r.out.splitlines() if not line.startswith("#")))
    seen = set()
    for row in rows:
        for side, tag in (("a", a), ("b", b)):
            want = times.get((tag, row[f"{side}_cache_key"]))
            got = [row[f"measured_{m}_{side}"] for m in ("launches", "ns", "share")]
            expected = ["", "", ""] if want is None else [want["launches"], want["total_ns"], want["share"]]
            assert [float(g) if g else "" for g in got] == [float(e) if e != "" else "" for e in expected], row
            seen |= {(tag, row[f"{side}_cache_key"])} if want else set()
    assert seen == set(times) and times  # every measured folder, on its row
