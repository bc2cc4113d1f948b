"""Issue 37, profiles: nothing wrong is served, nothing stored is lost (items 6, 7 and 9).

Real data only: the torch.profiler traces and Proton profiles of three torch.compile runs on an H100
(corpus/profiles), the Inductor caches those runs used, the same Inductor kernels recompiled for gfx942
(corpus/inductor/amd) and a corpus snapshot compiled for sm_80. Every damaged input is a real profile file with one
thing changed. What a file says (its device, its launches, its sums) is read here with plain json, gzip and hashlib,
never through kdb; what an AMD folder holds from its own files (Triton's JSON, the asm's `.vgpr_count`)."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import math
import os
import re
import signal
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from conftest import ROOT, archive_of, load_manifest
from corpus_cache import INGEST_CODE, cached, code_version, file_sha256, unpacked
from helpers import assert_verified, kdb

PROFILES = ROOT / "corpus" / "profiles" / "h100-torch2.11-t3.6.0" / "profiles.tar.xz"
GFX942 = ROOT / "corpus" / "inductor" / "amd" / "gpt2_train-t3.6.0-gfx942.tar.zst"
SM80 = "t3.6.0-sm80"
H100_SCENARIOS = ("gpt2_train", "mlp_train")
AMD_TAG = "gpt2_train-gfx942"  # the kernels of the H100 gpt2 run, recompiled for gfx942: the same names


@pytest.fixture(scope="module")
def tree() -> Path:
    """The profiles archive unpacked (shared, read-only): caches/<scenario>/, profiles/<scenario>.*"""
    return unpacked(PROFILES)


def _ingested(tree: Path, scenarios: tuple[str, ...], others: bool) -> Path:
    """A home holding the H100 caches of `scenarios` (tagged by name) and, with `others`, the gfx942 recompile of
    gpt2's kernels (AMD_TAG) and a corpus snapshot for sm_80 (SM80): built once per inputs and ingest code, shared
    read-only."""
    amd, sm80 = (unpacked(GFX942), unpacked(archive_of(SM80))) if others else (None, None)
    inputs = [PROFILES, *((GFX942, archive_of(SM80)) if others else ())]
    parts = {
        "trust-profiles": [file_sha256(p) for p in inputs],
        "scenarios": list(scenarios),
        "sass": False,
        "code": code_version(INGEST_CODE),
    }

    def build(home: Path) -> None:
        from kdb.analysis.model import AnalysisOptions
        from kdb.ingest.snapshot import IngestRequest, ingest
        from kdb.store.home import Home

        sources = [(s, tree / "caches" / s) for s in scenarios] + ([(AMD_TAG, amd), (SM80, sm80)] if others else [])
        for tag, source in sources:
            ingest(Home(home), IngestRequest(source, tag, options=AnalysisOptions(sass=False)))

    return cached("homes", parts, build)


@pytest.fixture
def home(tree, home_copy) -> Path:
    """A private copy of a home holding the H100 caches of gpt2_train and mlp_train, AMD_TAG and SM80."""
    return home_copy(_ingested(tree, H100_SCENARIOS, others=True))


@pytest.fixture
def mlp_home(tree, home_copy) -> Path:
    """A private copy of a home holding the H100 cache of mlp_train only (small: quick to copy and verify)."""
    return home_copy(_ingested(tree, ("mlp_train",), others=False))


def _objects(home: Path) -> list[str]:
    return sorted(p.relative_to(home).as_posix() for p in (home / "objects").rglob("*") if p.is_file())


def _sql(capsys, home: Path, query: str) -> list[dict]:
    """The catalog's rows, read with DuckDB directly (a `kdb sql` in-process builds the whole CLI first)."""
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    try:
        cur = con.execute(query)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()


def _profile_rows(capsys, home: Path, tag: str) -> list[dict]:
    return _sql(
        capsys,
        home,
        "SELECT p.* EXCLUDE (snapshot_id) FROM profile_files p JOIN snapshots s USING (snapshot_id) "
        f"WHERE s.tag = '{tag}' ORDER BY p.name",
    )


def _times(capsys, home: Path, tag: str) -> dict[str, tuple]:
    rows = _sql(capsys, home, f"SELECT * FROM kernel_times WHERE tag = '{tag}'")
    return {r["cache_key"]: (r["launches"], r["total_ns"], r["share"]) for r in rows}


def _import(capsys, home: Path, tag: str, *files: Path | str, extra: tuple[str, ...] = ()):
    return kdb(capsys, home, "profile", "import", *map(str, files), "--tag", tag, *extra)


def _one_line_refusal(r, path: Path | str, *words: str) -> None:
    assert r.code == 3, (r.code, r.out, r.err)
    assert r.out == "" and r.err.count("\n") == 1, r.err
    assert r.err.startswith(f"kdb: error: {path}: "), r.err
    for word in words:
        assert word in r.err, (word, r.err)


def _torch_doc(tree: Path, scenario: str) -> dict:
    return json.loads(gzip.decompress((tree / "profiles" / f"{scenario}.torch.json.gz").read_bytes()))


def _kernel_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


# -- item 6: a profile of another GPU, of another run -----------------------------------------------------------


@pytest.mark.parametrize("tag", [AMD_TAG, SM80])
def test_a_profile_recorded_on_another_gpu_is_refused(home, tree, capsys, tag):
    """The H100 gpt2 run's trace and Proton profile linked 67% of their Triton time by name to the gfx942 recompile
    of the same kernels. Each file names its GPU (the trace's deviceProperties, Proton's device item): one whose GPU
    runs none of the snapshot's targets is refused with one line, exit 3, nothing stored (on its own H100 snapshot
    it is imported: test_a_run_of_another_cache_is_refused_and_rm_removes_one_profile)."""
    doc = _torch_doc(tree, "gpt2_train")
    (gpu,) = doc["deviceProperties"]  # the file's own words: one H100, compute capability 9.0
    proton = tree / "profiles" / "gpt2_train.proton.hatchet"
    proton_arch = json.loads(proton.read_text())[1]["CUDA"]["0"]["arch"]
    devices = {
        tree
        / "profiles"
        / "gpt2_train.torch.json.gz": f"{gpu['name']} (cuda sm{gpu['computeMajor']}{gpu['computeMinor']})",
        proton: f"cuda sm{proton_arch}",
    }
    (target,) = _sql(capsys, home, f"SELECT unnest(targets) AS t FROM snapshots WHERE tag = '{tag}'")
    backend, arch, warp = target["t"].split(":")
    before = _objects(home)
    for path, device in devices.items():
        r = _import(capsys, home, tag, path)
        _one_line_refusal(
            r,
            path,
            f"recorded on {device}, but snapshot {tag!r} holds kernels for {backend} {arch} (warp size {warp}) only",
        )
    assert _objects(home) == before and _profile_rows(capsys, home, tag) == []
    assert_verified(capsys, home)


def _vgpr_count(asm: Path) -> int:
    (count,) = re.findall(r"^\s*\.vgpr_count:\s+(\d+)$", asm.read_text(), re.M)
    return int(count)


def test_cuda_launch_rules_apply_to_cuda_folders_only(home, tree, tmp_path, capsys):
    """The torch trace linked 36 launches to gfx942 folders: a CUDA block of 128 threads equals 2 AMD waves of 64,
    and the CUDA driver's 16-register floor was applied to AMD VGPRs. A launch recorded on a CUDA device fits no AMD
    folder; with the device taken out of the trace (a file that names none), the floor is CUDA's alone: every link
    is a record that equals the AMD folder's own figures (num_warps × 64 from Triton's JSON, `shared`, the asm's
    `.vgpr_count`) exactly, and no launch that only the floor would fit is linked."""
    from kdb.profile.formats import parse_profile
    from kdb.profile.importer import folders_by_kernel
    from kdb.profile.link import link_launches
    from kdb.store.catalog import Catalog
    from kdb.store.home import Home

    trace = tree / "profiles" / "gpt2_train.torch.json.gz"
    profile = parse_profile(trace.read_bytes())
    assert {launch.backend for launch in profile.launches} == {"cuda"}  # its deviceProperties: Kineto's CUDA build
    names = sorted({launch.name for launch in profile.launches})
    with Catalog.open(Home(home).catalog, read_only=True, wait_s=60) as catalog:
        folders = folders_by_kernel(Home(home), catalog.profiles.profile_folders(AMD_TAG, names))
    assert {f.backend for fs in folders.values() for f in fs} == {"hip"}
    assert all(link_launches(launch, folders.get(launch.name, [])).cache_key is None for launch in profile.launches)

    # the oracle: each AMD folder's figures from its own files, and which trace launches fit them
    cache = unpacked(GFX942)
    facts: dict[str, list[tuple[str, tuple]]] = {}
    for meta_path in cache.glob("*/*.json"):
        if meta_path.name.startswith("__grp__"):
            continue
        meta = json.loads(meta_path.read_text())
        figures = (
            [meta["num_warps"] * meta["warp_size"], 1, 1],
            meta["shared"],
            _vgpr_count(meta_path.with_suffix(".amdgcn")),
        )
        facts.setdefault(meta["name"], []).append((meta_path.parent.name, figures))
    doc = _torch_doc(tree, "gpt2_train")
    exact: Counter = Counter()  # folder -> launches whose record equals its figures, the only folder that does
    floor_only = 0  # launches that fit a folder only by the CUDA floor (16/32 recorded over fewer VGPRs)
    for e in _kernel_events(doc):
        a = e["args"]
        fits = [
            k
            for k, (block, shared, _) in facts.get(e["name"], [])
            if (a["block"], a["shared memory"]) == (block, shared)
        ]
        regs = {k: f[2] for k, f in facts.get(e["name"], [])}
        equal = [k for k in fits if regs[k] == a["registers per thread"]]
        if len(equal) == 1:
            exact[equal[0]] += 1
        elif not equal and any(regs[k] < a["registers per thread"] in (16, 32) for k in fits):
            floor_only += 1
    assert floor_only > 0  # what the old rule linked

    del doc["deviceProperties"]
    nameless = tmp_path / "gpt2_train.torch.json"
    nameless.write_text(json.dumps(doc))
    r = _import(capsys, home, AMD_TAG, nameless, extra=("--allow-unlinked",))
    assert r.code == 0, r.err
    assert "  device: the file names none, so it was not checked against the snapshot's targets\n" in r.out
    assert "  warning: " in r.out  # most of its Triton launches find no AMD folder
    linked = {r["cache_key"]: r["launches"] for r in _sql(capsys, home, "SELECT * FROM profile_kernel_times")}
    assert linked == dict(exact)
    assert_verified(capsys, home)


def test_a_run_of_another_cache_is_refused_unless_allowed(mlp_home, tree, capsys):
    """A run of another cache (the gpt2 trace into the mlp snapshot, same GPU) finds no kernel for most Triton
    launches; imported, its GPU time lowers every share of the snapshot. It is refused with one line naming how many
    launches find none and --allow-unlinked, nothing stored; allowed, it is imported with a warning, and the shares
    of the kernels it did not run are lower (its time is in every share's denominator)."""
    home = mlp_home
    own = tree / "profiles" / "mlp_train.torch.json.gz"
    assert _import(capsys, home, "mlp_train", own).code == 0
    shares = _times(capsys, home, "mlp_train")
    before = _objects(home)
    foreign = tree / "profiles" / "gpt2_train.torch.json.gz"
    triton = sum(1 for e in _kernel_events(_torch_doc(tree, "gpt2_train")) if e["name"].startswith("triton_"))
    r = _import(capsys, home, "mlp_train", foreign)
    _one_line_refusal(
        r, foreign, f"of its {triton} Triton kernel launches", "find no kernel folder", "--allow-unlinked"
    )
    assert _objects(home) == before and _times(capsys, home, "mlp_train") == shares

    r = _import(capsys, home, "mlp_train", foreign, extra=("--allow-unlinked",))
    assert r.code == 0 and "  warning: " in r.out, r.err
    diluted = _times(capsys, home, "mlp_train")
    foreign_hash = hashlib.sha256(foreign.read_bytes()).hexdigest()
    also = {
        r["cache_key"]
        for r in _sql(capsys, home, f"SELECT cache_key FROM profile_kernel_times WHERE profile_hash = '{foreign_hash}'")
    }
    untouched = set(shares) - also  # the mlp kernels the gpt2 run did not launch: only their share moved, down
    assert untouched and all(diluted[k][:2] == shares[k][:2] and diluted[k][2] < shares[k][2] for k in untouched)
    assert_verified(capsys, home)


def test_profile_rm_removes_one_profile_by_name_or_hash(mlp_home, tree, capsys):
    """`kdb profile rm NAME|SHA256 --tag T` removes exactly one profile: its rows (the kernels' times are those of
    the profiles left); its file stays in the store until `kdb gc`, like a snapshot's after `kdb rm`. A name or hash
    that names none is exit 2, a tag that does not exist exit 4."""
    home = mlp_home
    (gpu,) = _torch_doc(tree, "mlp_train")["deviceProperties"]
    gz, proton = (tree / "profiles" / f"mlp_train.{s}" for s in ("torch.json.gz", "proton.hatchet"))
    gz_hash, proton_hash = (hashlib.sha256(f.read_bytes()).hexdigest() for f in (gz, proton))
    r = _import(capsys, home, "mlp_train", gz, proton)
    assert r.code == 0 and f"  device: {gpu['name']} (cuda sm{gpu['computeMajor']}{gpu['computeMinor']})\n" in r.out
    (gz_row,) = [p for p in _profile_rows(capsys, home, "mlp_train") if p["profile_hash"] == gz_hash]
    gz_times = {  # what the kernels' times are with the trace alone: its own rows, over its own GPU time
        t["cache_key"]: (t["launches"], t["total_ns"], t["total_ns"] / gz_row["total_ns"])
        for t in _sql(capsys, home, f"SELECT * FROM profile_kernel_times WHERE profile_hash = '{gz_hash}'")
    }
    r = kdb(capsys, home, "profile", "rm", proton_hash[:10], "--tag", "mlp_train")
    assert r.code == 0 and f"removed profile {proton.name} (sha256 {proton_hash})" in r.out, r.err
    alone = _times(capsys, home, "mlp_train")
    assert alone.keys() == gz_times.keys()
    assert all(alone[k][:2] == gz_times[k][:2] and math.isclose(alone[k][2], gz_times[k][2]) for k in alone)
    assert [p["name"] for p in _profile_rows(capsys, home, "mlp_train")] == [gz.name]
    r = kdb(capsys, home, "profile", "rm", proton.name, "--tag", "mlp_train")
    assert r.code == 2 and r.err.count("\n") == 1 and "no profile" in r.err
    assert kdb(capsys, home, "profile", "rm", gz.name, "--tag", "nope").code == 4
    assert kdb(capsys, home, "profile", "rm", gz.name, "--tag", "mlp_train").code == 0
    assert _profile_rows(capsys, home, "mlp_train") == [] and _times(capsys, home, "mlp_train") == {}
    r = kdb(capsys, home, "verify", "--format", "json")  # their two files are what `kdb gc` would free now
    assert r.code == 0 and r.json()["unreferenced_blobs"] == 2
    assert all((home / "objects" / h[:2] / h[2:]).exists() for h in (proton_hash, gz_hash))
    assert_verified(capsys, home)


# -- item 7: the same run counted twice; --replace; reading a profile back --------------------------------------


def _plain_and_fast(tree: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """The real mlp trace as given (gzipped), decompressed, and gzipped again at another level."""
    gz = tree / "profiles" / "mlp_train.torch.json.gz"
    plain = tmp_path / "mlp_train.torch.json"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    fast = tmp_path / "mlp_train.fast.json.gz"
    fast.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1))
    return gz, plain, fast


@pytest.mark.slow  # ~1 s of CPU: outside the inner loop's 60 s
def test_the_same_run_plain_and_gzipped_is_one_profile(mlp_home, tree, tmp_path, capsys):
    """A trace imported gzipped and then plain doubled its launches and time. One run's trace, however compressed
    (plain, gzipped at two levels, or all three in one command), is one profile: its launches and time are the
    file's own sums, the linked kernels' times too, and the second import says it replaced the first."""
    home = mlp_home
    gz, plain, fast = _plain_and_fast(tree, tmp_path)
    events = _kernel_events(json.loads(plain.read_bytes()))
    own = [(len(events), sum(round(e["dur"] * 1000) for e in events))]

    def profile_sums() -> list[tuple[int, int]]:
        return [(p["launches"], p["total_ns"]) for p in _profile_rows(capsys, home, "mlp_train")]

    assert _import(capsys, home, "mlp_train", gz).code == 0
    (first,) = _profile_rows(capsys, home, "mlp_train")
    linked = _times(capsys, home, "mlp_train")
    r = _import(capsys, home, "mlp_train", plain, extra=("--format", "json"))
    assert r.code == 0, r.err
    (summary,) = r.json()["files"]
    assert (summary["replaced"], summary["replaced_name"]) == (True, gz.name)
    assert profile_sums() == own and _times(capsys, home, "mlp_train") == linked
    (row,) = _profile_rows(capsys, home, "mlp_train")
    assert (row["name"], row["imported_at"]) == (plain.name, first["imported_at"])  # the first import's time
    assert row["content_hash"] == hashlib.sha256(plain.read_bytes()).hexdigest() == first["content_hash"]
    r = _import(capsys, home, "mlp_train", gz, plain, fast, extra=("--format", "json"))
    assert r.code == 0 and [f["same_as"] for f in r.json()["files"]] == [[plain.name, fast.name]], r.err
    assert profile_sums() == own and _times(capsys, home, "mlp_train") == linked
    assert_verified(capsys, home)


def test_a_gzipped_profile_imported_before_013_is_known_by_its_content(mlp_home, tree, tmp_path, capsys):
    """Migration 013 could not hash the JSON of a file imported gzipped before it (content_hash NULL): the next
    import works it out from the stored file, so the same run imported plain still replaces it."""
    home = mlp_home
    gz, plain, _ = _plain_and_fast(tree, tmp_path)
    assert _import(capsys, home, "mlp_train", gz).code == 0
    con = duckdb.connect(str(home / "catalog.duckdb"))
    con.execute("UPDATE profile_files SET content_hash = NULL")  # as migration 013 leaves a gzipped file's row
    con.close()
    r = _import(capsys, home, "mlp_train", plain, extra=("--format", "json"))
    assert r.code == 0 and r.json()["files"][0]["replaced_name"] == gz.name, r.err
    (row,) = _profile_rows(capsys, home, "mlp_train")
    assert (row["name"], row["content_hash"]) == (plain.name, hashlib.sha256(plain.read_bytes()).hexdigest())
    assert_verified(capsys, home)


@pytest.mark.slow  # ~1 s of CPU: outside the inner loop's 60 s
def test_a_stored_profile_is_read_back_by_cat(mlp_home, tree, tmp_path, capsysbinary):
    """`kdb cat TAG NAME|SHA256` writes a stored profile's file as it was imported, byte for byte: by its name, by the
    sha256 of the file or of its JSON, or a prefix of 8+ digits of either; one that names none is exit 2."""
    home, capsys = mlp_home, capsysbinary  # (stdout as bytes: the gzip file's)
    _, plain, fast = _plain_and_fast(tree, tmp_path)
    proton = tree / "profiles" / "mlp_train.proton.hatchet"
    assert _import(capsys, home, "mlp_train", fast, proton).code == 0
    content = hashlib.sha256(plain.read_bytes()).hexdigest()
    for path, keys in (
        (fast, [fast.name, hashlib.sha256(fast.read_bytes()).hexdigest(), content[:8]]),
        (proton, [proton.name, hashlib.sha256(proton.read_bytes()).hexdigest()[:12]]),
    ):
        for key in keys:
            r = kdb(capsys, home, "cat", "mlp_train", key)
            assert (r.code, r.out) == (0, path.read_bytes()), key
    r = kdb(capsys, home, "cat", "mlp_train", "no-such-profile.json")
    assert r.code == 2 and r.err.count(b"\n") == 1 and b"no file or profile" in r.err
    assert_verified(capsys, home)


@pytest.mark.slow  # two ingests: ~2 s on 2 cores
def test_ingest_replace_keeps_and_relinks_profiles_or_names_what_it_drops(home, tree, capsys):
    """`kdb ingest --replace` dropped a snapshot's profiles without a word, and the next `kdb gc` deleted their only
    copy. Replaced by the same cache, each profile is kept and linked again (the same rows); `kdb gc` keeps its file,
    which `kdb cat` gives back. Replaced by a cache for another GPU, each is dropped and named with why."""
    files = [tree / "profiles" / f"mlp_train.{s}" for s in ("torch.json.gz", "proton.hatchet")]
    assert _import(capsys, home, "mlp_train", *files).code == 0
    rows, times = _profile_rows(capsys, home, "mlp_train"), _times(capsys, home, "mlp_train")
    r = kdb(capsys, home, "ingest", str(tree / "caches" / "mlp_train"), "--tag", "mlp_train", "--replace", "--no-sass")
    assert r.code == 0, r.err
    for f in files:
        assert f"  profile {f.name} kept and linked again: " in r.out
    assert _profile_rows(capsys, home, "mlp_train") == rows and _times(capsys, home, "mlp_train") == times
    assert kdb(capsys, home, "gc").code == 0
    r = kdb(capsys, home, "cat", "mlp_train", files[1].name)
    assert r.code == 0 and r.out.encode() == files[1].read_bytes()

    amd = unpacked(GFX942)
    r = kdb(capsys, home, "ingest", str(amd), "--tag", "mlp_train", "--replace", "--no-sass", "--format", "json")
    assert r.code == 0, r.err
    dropped = r.json()["profiles_dropped"]
    assert sorted(d["name"] for d in dropped) == sorted(f.name for f in files)
    for d in dropped:
        assert "recorded on" in d["reason"] and "cuda sm90" in d["reason"] and "hip gfx942" in d["reason"], d
        assert d["profile_hash"] == hashlib.sha256((tree / "profiles" / d["name"]).read_bytes()).hexdigest()
    assert r.json()["profiles_relinked"] == [] and _profile_rows(capsys, home, "mlp_train") == []
    assert_verified(capsys, home)


# -- item 9: numbers, special files, compression ------------------------------------------------------------------


def _first_kernel_value(text: str, key: str) -> tuple[int, int]:
    """(start, end) of the value of `key` in the first kernel event of a Kineto trace's text."""
    at = text.index('"cat": "kernel"')
    match = re.compile(rf'"{re.escape(key)}": (-?[0-9.e+]+)').search(text, at)
    assert match is not None
    return match.span(1)


def _with_value(text: str, key: str, value: str) -> str:
    start, end = _first_kernel_value(text, key)
    return text[:start] + value + text[end:]


def _proton_with(text: str, key: str, value: str) -> str:
    match = re.search(rf'"{re.escape(key)}": [1-9][0-9]*', text)  # the first GPU frame's (the root's are 0)
    assert match is not None
    return text[: match.start()] + f'"{key}": {value}' + text[match.end() :]


@pytest.fixture(scope="module")
def bomb_member() -> bytes:
    """One gzip member of 64 MiB of zeros (~65 KB): five of them in a row are a valid gzip file of 320 MiB."""
    return gzip.compress(bytes(64 << 20), compresslevel=9)


BIG = str(1 << 70)
DAMAGES = {
    # name: (what to write, the words of the one-line refusal)
    "duration 1e400": ("torch", ("dur", "1e400"), "a number beyond the range of any real figure: 1e400"),
    "duration 2**70 µs": ("torch", ("dur", BIG), "has a duration beyond 2**63 ns"),
    "negative duration": ("torch", ("dur", "-2.5"), "has a negative duration (dur -2.5 µs)"),
    "registers 2**70": ("torch", ("registers per thread", BIG), f"registers per thread {BIG} is out of range"),
    "Proton count 2**70": ("proton", ("count", BIG), f"count {BIG} or time (ns)"),
    "Proton time Infinity": ("proton", ("time (ns)", "Infinity"), "Infinity (JSON has no NaN or infinity)"),
    "Proton negative time": ("proton", ("time (ns)", "-1"), "has a negative duration"),
    "invalid UTF-8": ("utf8", None, "invalid UTF-8 at byte {offset} (0xff)"),
    "invalid UTF-8, gzipped": ("utf8.gz", None, "invalid UTF-8 at byte {offset} of the decompressed JSON (0xff)"),
    "gzip inside gzip": ("gzip2", None, "gzip inside gzip"),
    "gzip bomb": ("bomb", None, "the gzip stream expands beyond 256 MiB"),
    "a FIFO": ("fifo", None, "a FIFO (named pipe), not a regular file"),
    "/dev/zero": ("zero", None, "a character device, not a regular file"),
    "a directory": ("dir", None, "a directory, not a regular file"),
}


@contextlib.contextmanager
def _no_hang(seconds: int):
    """Fail instead of hanging (a FIFO's open, /dev/zero's read were unbounded)."""

    def hung(*_):
        raise TimeoutError(f"still reading after {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# the bomb inflates 256 MiB before it is refused (that is its whole cost): outside the inner loop
@pytest.mark.parametrize(
    "damage", [pytest.param(d, marks=pytest.mark.slow) if d == "gzip bomb" else d for d in DAMAGES]
)
def test_a_damaged_profile_exits_3_with_one_line_and_stores_nothing(
    mlp_home, tree, tmp_path, capsys, bomb_member, damage
):
    """Numbers beyond int64 or infinite gave `internal error` (exit 7) and left an orphan blob per attempt; a FIFO
    hung, /dev/zero read until MemoryError, a gzip bomb had no bound. Each damaged copy of a real profile now stops
    the import with one line naming the real cause, exit 3, alone or after a good file in the same command, and the
    store and catalog are as they were."""
    home = mlp_home
    kind, edit, words = DAMAGES[damage]
    torch_text = gzip.decompress((tree / "profiles" / "mlp_train.torch.json.gz").read_bytes()).decode()
    proton_text = (tree / "profiles" / "mlp_train.proton.hatchet").read_text()
    path = tmp_path / "damaged.json"
    if kind == "torch":
        path.write_text(_with_value(torch_text, *edit))
    elif kind == "proton":
        path.write_text(_proton_with(proton_text, *edit))
    elif kind.startswith("utf8"):
        raw = torch_text.encode()
        offset = raw.index(b'"triton_per_fused') + 5  # a byte no UTF-8 text holds, inside a kernel name
        damaged = raw[:offset] + b"\xff" + raw[offset + 1 :]
        path.write_bytes(gzip.compress(damaged) if kind.endswith(".gz") else damaged)
        words = words.format(offset=offset)
    elif kind == "gzip2":
        path.write_bytes(gzip.compress((tree / "profiles" / "mlp_train.torch.json.gz").read_bytes()))
    elif kind == "bomb":
        path.write_bytes(bomb_member * 5)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path = Path("/dev/zero")
    else:
        path.mkdir()
    good = tree / "profiles" / "mlp_train.proton.hatchet"
    before = _objects(home)
    # alone, and after a good file in the same command (the bomb alone: expanding 256 MiB is its whole cost)
    attempts = ([path],) if kind == "bomb" else ([path], [good, path])
    for files in attempts:
        with _no_hang(60):
            r = _import(capsys, home, "mlp_train", *files)
        _one_line_refusal(r, path, words)
    assert _objects(home) == before and _profile_rows(capsys, home, "mlp_train") == []
    assert_verified(capsys, home)


@pytest.mark.slow  # an ingest of a 41-kernel snapshot: ~2 s on 2 cores
def test_a_triton_json_figure_beyond_the_catalog_is_a_problem_not_a_crash(tmp_path, capsys):
    """The same cause in the ingest: a kernel's JSON with an integer beyond its catalog column (`shared` 2**70,
    `num_warps` 2**32) stopped the commit with `internal error` (exit 7). The file is now a problem, with one line
    naming the figure, and the rest of the cache is ingested (exit 1)."""
    import shutil

    cache = tmp_path / "cache"
    shutil.copytree(unpacked(archive_of(SM80)), cache)
    meta_path = sorted(p for p in cache.glob("*/*.json") if not p.name.startswith("__grp__"))[0]
    text = re.sub(r'"shared": \d+', f'"shared": {BIG}', meta_path.read_text(), count=1)
    meta_path.write_text(re.sub(r'"num_warps": \d+', '"num_warps": 4294967296', text, count=1))
    home = tmp_path / "home"
    r = kdb(capsys, home, "ingest", str(cache), "--tag", "damaged", "--no-sass", "--format", "json")
    assert r.code == 1, r.err
    problems = [p for p in r.json()["problem_list"] if p["path"] == meta_path.relative_to(cache).as_posix()]
    assert len(problems) == 1 and "is out of range" in problems[0]["reason"], r.json()["problem_list"]
    assert r.json()["kernels"] == load_manifest()["snapshots"][SM80]["kernel_count"]  # the build's own count
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    figures = con.execute(  # the damaged folder is a kernel without its JSON's figures: unknown, not 2**70
        "SELECT num_warps, shared FROM kernels WHERE cache_key = ?", [meta_path.parent.name]
    ).fetchall()
    con.close()
    assert figures == [(None, None)]
    assert_verified(capsys, home)
