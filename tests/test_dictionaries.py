"""zstd dictionaries per file kind in the blob store (issue 16): trained on the first real cache a store
sees, used for every later blob of the kind, transparent to every reader, checked by verify, kept by gc,
carried by push/pull. Real caches: the gfx942 Inductor kernels of the corpus (corpus/inductor/amd)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import zstandard
from helpers import kdb, tree_hashes

from kdb.store import dictionaries
from kdb.store.blobs import COMPRESSION_LEVEL, BlobStore, hash_bytes
from kdb.store.home import Home
from kdb.store.transfer import transfer

AMD = Path(__file__).resolve().parent.parent / "corpus" / "inductor" / "amd"
MLP = "mlp_train_maxautotune-t3.6.0-gfx942"
GPT2 = "gpt2_train-t3.6.0-gfx942"


pytestmark = pytest.mark.slow  # every test ingests real Inductor caches and trains dictionaries: 12-26 s of CPU each


@pytest.fixture(scope="module")
def caches(unpacked_archive) -> dict[str, Path]:
    """The two caches, unpacked once per archive content and shared read-only."""
    return {name: unpacked_archive(AMD / f"{name}.tar.zst") for name in (MLP, GPT2)}


def _files_by_kind(capsys, home: Path, tag: str) -> list[dict]:
    r = kdb(
        capsys,
        home,
        "sql",
        f"SELECT f.path, f.hash, f.size, f.kind FROM files f JOIN snapshots s USING (snapshot_id) WHERE s.tag = '{tag}'",
        "--format",
        "json",
    )
    assert r.code == 0, r.err
    return r.json()


def _frame_dict_id(store: BlobStore, digest: str) -> int:
    return zstandard.get_frame_parameters(store.path_for(digest).read_bytes()).dict_id


def _objects_bytes(store: BlobStore) -> int:
    return sum(os.lstat(os.path.join(r, f)).st_size for r, _, fs in os.walk(store.root) for f in fs)


def test_a_real_cache_is_stored_with_a_dictionary_per_kind_and_restored_byte_for_byte(caches, tmp_path, capsys):
    home = tmp_path / "home"
    assert kdb(capsys, home, "ingest", str(caches[MLP]), "--tag", "mlp", "--no-sass", "-q").code == 0
    store = Home(home).store
    entries = store.dictionaries.entries()
    files = _files_by_kind(capsys, home, "mlp")
    kinds = {f["kind"] for f in files}
    count = {k: sum(1 for f in files if f["kind"] == k) for k in kinds}
    # the kinds with many files in this cache have a dictionary; none was trained for a kind with too few
    assert {e.kind for e in entries} >= {"json", "llir", "amdgcn", "ttir", "ttgir"}
    assert all(count[e.kind] >= dictionaries.MIN_FILES for e in entries)
    assert len({e.kind for e in entries}) == len(entries)  # one per kind
    # every blob of a kind with a dictionary was compressed with it, every other one without
    by_kind = {e.kind: e.dict_id for e in entries}
    for f in files:
        assert _frame_dict_id(store, f["hash"]) == by_kind.get(f["kind"], 0), f["path"]
    # smaller than each unique file compressed alone at the same level (measured here with zstd itself),
    # the dictionaries' own blobs counted
    unique = {f["hash"]: (caches[MLP] / f["path"]).read_bytes() for f in files}
    plain = sum(len(zstandard.ZstdCompressor(level=COMPRESSION_LEVEL).compress(d)) for d in unique.values())
    stored = _objects_bytes(store)
    assert stored < 0.8 * plain, (stored, plain)
    # transparent: export is the cache byte for byte, verify re-hashes every blob through its dictionary
    assert kdb(capsys, home, "export", "mlp", str(tmp_path / "out"), "--verbatim").code == 0
    assert tree_hashes(tmp_path / "out") == tree_hashes(caches[MLP])
    r = kdb(capsys, home, "verify")
    assert r.code == 0, r.out + r.err
    assert "0 unreferenced" in r.out


def test_later_ingests_reuse_the_dictionaries_and_train_only_for_new_kinds(caches, tmp_path, capsys):
    home = tmp_path / "home"
    assert kdb(capsys, home, "ingest", str(caches[GPT2]), "--tag", "gpt2", "--no-sass", "-q").code == 0
    store = Home(home).store
    first = {e.kind: e for e in store.dictionaries.entries()}
    assert first
    assert kdb(capsys, home, "ingest", str(caches[MLP]), "--tag", "mlp", "--no-sass", "-q").code == 0
    second = {e.kind: e for e in store.dictionaries.entries()}
    assert all(second[k] == e for k, e in first.items())  # kept, not retrained
    for f in _files_by_kind(capsys, home, "mlp"):
        if f["kind"] in first:
            assert _frame_dict_id(store, f["hash"]) == first[f["kind"]].dict_id


def _home_with_mlp(caches, tmp_path, capsys) -> tuple[Path, BlobStore, list[dict]]:
    home = tmp_path / "home"
    assert kdb(capsys, home, "ingest", str(caches[MLP]), "--tag", "mlp", "--no-sass", "-q").code == 0
    return home, Home(home).store, _files_by_kind(capsys, home, "mlp")


def test_a_damaged_dictionary_is_reported_and_nothing_is_returned_from_it(caches, tmp_path, capsys):
    home, store, files = _home_with_mlp(caches, tmp_path, capsys)
    entry = store.dictionaries.for_kind("llir")
    assert entry is not None
    victim = next(f for f in files if f["kind"] == "llir")
    # damage the stored dictionary in place: one byte of its frame, in a fresh process (no cached copy)
    path = store.path_for(entry.digest)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    cat = subprocess.run(
        ["python", "-m", "kdb", "--home", str(home), "cat", "mlp", victim["path"]], capture_output=True, text=True
    )
    assert cat.returncode == 5 and cat.stdout == ""
    assert len(cat.stderr.strip().splitlines()) == 1 and entry.digest in cat.stderr
    verify = subprocess.run(["python", "-m", "kdb", "--home", str(home), "verify"], capture_output=True, text=True)
    assert verify.returncode != 0
    assert "dictionary for llir files" in verify.stdout + verify.stderr
    # every llir blob is reported, and no blob of another kind
    damaged = {f["hash"] for f in files if f["kind"] == "llir"}
    report = verify.stdout + verify.stderr
    assert all(h in report for h in damaged)
    assert not any(f["hash"] in report for f in files if f["hash"] not in damaged)


def test_a_missing_dictionary_entry_is_named_and_verify_reports_its_blobs(caches, tmp_path, capsys):
    home, store, files = _home_with_mlp(caches, tmp_path, capsys)
    entry = store.dictionaries.for_kind("ttir")
    assert entry is not None
    (store.dictionaries.directory / entry.entry_name).unlink()
    victim = next(f for f in files if f["kind"] == "ttir")
    cat = subprocess.run(
        ["python", "-m", "kdb", "--home", str(home), "cat", "mlp", victim["path"]], capture_output=True, text=True
    )
    assert cat.returncode == 5
    assert f"dictionary {entry.dict_id} is missing from the store" in cat.stderr
    verify = subprocess.run(["python", "-m", "kdb", "--home", str(home), "verify"], capture_output=True, text=True)
    assert verify.returncode != 0
    ttir = {f["hash"] for f in files if f["kind"] == "ttir"}
    report = verify.stdout + verify.stderr
    assert {h for h in ttir if h in report} == ttir
    assert not any(f["hash"] in report for f in files if f["hash"] not in ttir)


def test_gc_keeps_dictionaries_when_no_snapshot_is_left(caches, tmp_path, capsys):
    home, store, _ = _home_with_mlp(caches, tmp_path, capsys)
    entries = store.dictionaries.entries()
    assert kdb(capsys, home, "rm", "mlp").code == 0
    assert kdb(capsys, home, "gc").code == 0
    assert store.dictionaries.entries(reload=True) == entries
    left = [name for name, _ in store.iter_blobs()]
    assert sorted(left) == sorted(e.digest for e in entries)  # every other blob went
    r = kdb(capsys, home, "verify")
    assert r.code == 0 and "0 unreferenced" in r.out, r.out
    # and the next ingest uses them: export still byte for byte
    assert kdb(capsys, home, "ingest", str(caches[MLP]), "--tag", "again", "--no-sass", "-q").code == 0
    assert store.dictionaries.entries(reload=True) == entries
    assert kdb(capsys, home, "export", "again", str(tmp_path / "out"), "--verbatim").code == 0
    assert tree_hashes(tmp_path / "out") == tree_hashes(caches[MLP])


def test_transfer_carries_dictionaries_and_recompresses_around_a_clashing_id(caches, tmp_path, capsys):
    source_dir, store, files = _home_with_mlp(caches, tmp_path, capsys)
    source = Home(source_dir)
    # a destination whose own dictionary (trained on real JSON files of another cache) has the id of the
    # source's llir dictionary: frames made with that id must not be copied as they are
    clash = store.dictionaries.for_kind("llir")
    assert clash is not None
    dest = Home(tmp_path / "dest")
    dest.store.ensure()
    samples = [p.read_bytes() for p in sorted(caches[GPT2].rglob("*.json"))]
    own = zstandard.train_dictionary(8192, samples, k=1024, d=8, dict_id=clash.dict_id).as_bytes()
    assert hash_bytes(own) != clash.digest
    dest.store.dictionaries.add("json", own)
    results = transfer(source, dest, ["mlp"], 60)
    assert results[0].status == "copied"
    dest_entries = {(e.kind, e.dict_id) for e in dest.store.dictionaries.entries(reload=True)}
    assert {(e.kind, e.dict_id) for e in store.dictionaries.entries() if e.dict_id != clash.dict_id} <= dest_entries
    for f in files:  # recompressed at the destination, which has no llir dictionary
        if f["kind"] == "llir":
            assert _frame_dict_id(dest.store, f["hash"]) == 0
    assert kdb(capsys, dest.root, "export", "mlp", str(tmp_path / "out"), "--verbatim").code == 0
    assert tree_hashes(tmp_path / "out") == tree_hashes(caches[MLP])
    r = kdb(capsys, dest.root, "verify")
    assert r.code == 0 and "0 unreferenced" in r.out, r.out
