"""Integrity tests for the committed corpus of real Triton caches (corpus/)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

import pytest
import zstandard
from conftest import CORPUS, snapshot_names

SNAPSHOTS = snapshot_names()
AMD = [n for n in SNAPSHOTS if "-gfx" in n]
REQUIRED = {
    "t3.3.1-gfx942",
    "t3.4.0-gfx942",
    "t3.6.0-gfx950",
    "t3.7.1-gfx950",
    "t3.1.0-gfx90a",
    "t3.4.0-gfx1100",
    "t3.4.0-sm90",
    "t3.6.0-sm80",
}
SCRATCH_RE = re.compile(r"^\s*;\s*ScratchSize:\s*(\d+)", re.M)


def _members(name: str, manifest: dict) -> list[tarfile.TarInfo]:
    data = (CORPUS / manifest["snapshots"][name]["archive"]).read_bytes()
    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        return tar.getmembers()


def _kernel_folders(root: Path) -> list[Path]:
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        if any(
            f.suffix == ".json" and not f.name.startswith("__grp__") and not f.name.endswith(".autotune.json")
            for f in d.iterdir()
        ):
            out.append(d)
    return out


def test_required_snapshots_present(corpus_manifest):
    assert set(corpus_manifest["snapshots"]) >= REQUIRED


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_archive_hash_and_size(corpus_manifest, name):
    entry = corpus_manifest["snapshots"][name]
    data = (CORPUS / entry["archive"]).read_bytes()
    assert len(data) == entry["archive_bytes"]
    assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert entry["build_command"] == f"python corpus/build.py --snapshot {name}"


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_archive_is_deterministic_tar(corpus_manifest, name):
    members = _members(name, corpus_manifest)
    names = [m.name for m in members]
    assert names == sorted(names)
    for m in members:
        assert m.mtime == 0 and m.uid == 0 and m.gid == 0, m.name
        assert not m.name.startswith(("/", "./")) and ".." not in m.name.split("/"), m.name
        assert m.isfile() or m.isdir(), m.name
    # no top-level folder: top-level entries are cache folders (Triton folder names)
    tops = {n.split("/")[0] for n in names}
    assert all(re.fullmatch(r"[A-Za-z0-9_\-]{32,64}", t) for t in tops), tops


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_unpacked_counts(corpus_manifest, unpack_snapshot, name):
    entry = corpus_manifest["snapshots"][name]
    root = unpack_snapshot(name)
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == entry["file_count"]
    assert len(_kernel_folders(root)) == entry["kernel_count"]
    assert entry["kernel_count"] > 0


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_records_point_at_matching_kernels(corpus_manifest, unpack_snapshot, name):
    entry = corpus_manifest["snapshots"][name]
    root = unpack_snapshot(name)
    records = json.loads((CORPUS / entry["records"]).read_text())
    assert records, "empty records"
    ids = [r["config"] for r in records]
    assert len(ids) == len(set(ids)), "duplicate config ids"
    seen = set()
    for r in records:
        folder = root / r["cache_key"]
        meta_path = folder / f"{r['kernel']}.json"
        assert meta_path.is_file(), f"{r['config']}: {meta_path} missing"
        meta = json.loads(meta_path.read_text())
        if entry["triton_version"].startswith("2."):
            # 2.3.x names the compiled function <kernel>_<argument suffix>, e.g. add_kernel_0d1d2d3de
            assert re.fullmatch(re.escape(r["kernel"]) + r"_[0-9cde]+", meta["name"]), r["config"]
        else:
            assert meta["name"] == r["kernel"], r["config"]
        assert (CORPUS / r["source"]).is_file(), r["source"]
        for opt in ("num_warps",):
            if opt in r["options"]:
                assert meta[opt] == r["options"][opt], r["config"]
        seen.add(r["cache_key"])
    # every kernel folder in the snapshot is accounted for by a record
    assert {d.name for d in _kernel_folders(root)} == seen
    # a failed config has no record
    failed = {f["config"] for f in entry["failed"]}
    assert not failed & set(ids)


def test_config_ids_shared_across_releases(corpus_manifest):
    recs = {
        n: {r["config"]: r for r in json.loads((CORPUS / e["records"]).read_text())}
        for n, e in corpus_manifest["snapshots"].items()
    }
    for a, b in [("t3.3.1-gfx942", "t3.4.0-gfx942"), ("t3.6.0-gfx950", "t3.7.1-gfx950")]:
        common = set(recs[a]) & set(recs[b])
        assert len(common) >= 35, (a, b, len(common))
        for cid in common:
            assert recs[a][cid]["kernel"] == recs[b][cid]["kernel"]
            assert recs[a][cid]["constexprs"] == recs[b][cid]["constexprs"]
            # the folder hash changes with every release
            assert recs[a][cid]["cache_key"] != recs[b][cid]["cache_key"]


def test_same_name_two_sources(corpus_manifest):
    for name, entry in corpus_manifest["snapshots"].items():
        recs = [r for r in json.loads((CORPUS / entry["records"]).read_text()) if r["kernel"] == "scale_kernel"]
        assert {r["source"] for r in recs} == {"kernels/scale_a.py", "kernels/scale_b.py"}, name
        assert len({r["cache_key"] for r in recs}) == 2, name


def test_specialized_to_1_argument_disappears(corpus_manifest, unpack_snapshot):
    for name in ("t3.1.0-gfx90a", "t3.4.0-gfx942"):
        entry = corpus_manifest["snapshots"][name]
        recs = {r["config"]: r for r in json.loads((CORPUS / entry["records"]).read_text())}
        root = unpack_snapshot(name)

        def nargs(cid, root=root, recs=recs):
            ttir = (root / recs[cid]["cache_key"] / "strided_copy_kernel.ttir").read_text()
            sig = re.search(r"tt\.func public @strided_copy_kernel\((.*?)\) attributes", ttir).group(1)
            return sig.count("%arg")

        assert recs["strided_copy/stride1/b1024"]["specialized_to_1"] == ["src_stride"]
        assert nargs("strided_copy/stride_any/b1024") == nargs("strided_copy/stride1/b1024") + 1, name


def _amdgcn(root: Path) -> list[Path]:
    return sorted(root.rglob("*.amdgcn"))


def test_kernel_info_block_by_release(unpack_snapshot):
    old = _amdgcn(unpack_snapshot("t3.1.0-gfx90a"))
    new = _amdgcn(unpack_snapshot("t3.4.0-gfx942"))
    assert old and new
    for p in old:
        assert "; Kernel info:" not in p.read_text(), p
    for p in new:
        assert "; Kernel info:" in p.read_text(), p


def test_some_amd_kernel_spills(unpack_snapshot):
    spilling = []
    for name in AMD:
        for p in _amdgcn(unpack_snapshot(name)):
            if any(int(v) > 0 for v in SCRATCH_RE.findall(p.read_text())):
                spilling.append((name, p.parent.name))
    assert spilling, "no AMD kernel with ScratchSize > 0"


def test_autotune_cache_present_from_3_4(corpus_manifest, unpack_snapshot):
    for name, entry in corpus_manifest["snapshots"].items():
        at = sorted(unpack_snapshot(name).rglob("*.autotune.json"))
        if tuple(int(x) for x in entry["triton_version"].split(".")[:2]) >= (3, 4):
            assert at, name
            data = json.loads(at[0].read_text())
            assert len(data["configs_timings"]) == 3
        else:
            assert not at, name
