"""Issue 37, the store's part: a damaged blob is repaired by good bytes and named with every snapshot that uses
it, an export that fails leaves nothing, an export is a working Triton cache where it lands (group files point
into it, modes are Triton's), and `kdb verify` reads a home that has blobs but no catalog.

Every blob damaged here is a real stored blob of a corpus snapshot, truncated or with a byte flipped; the
oracles are the corpus caches' own bytes and the installed Triton's FileCacheManager."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pytest
from conftest import load_manifest
from helpers import assert_verified, kdb, tree_hashes

from kdb.errors import ExitCode
from kdb.render import listings
from kdb.store.home import Home
from kdb.store.maintenance import relocate_group
from kdb.store.transfer import transfer

SNAPSHOT = "t3.4.0-gfx942"  # a current AMD code object (conftest.FAST_SNAPSHOTS)
FOUR = ("a", "b", "c", "d")


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _blob(home: Path, kind: str) -> tuple[str, Path, set[str]]:
    """(digest, stored file, tags of the snapshots holding it) of the first blob of KIND, by path."""
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    try:
        digest = con.execute(
            "SELECT hash FROM files WHERE kind = ? GROUP BY hash ORDER BY min(path) LIMIT 1", [kind]
        ).fetchone()[0]
        rows = con.execute(
            "SELECT DISTINCT tag FROM files JOIN snapshots USING (snapshot_id) WHERE hash = ?", [digest]
        ).fetchall()
        tags = {r[0] for r in rows}
    finally:
        con.close()
    return digest, Home(home).store.path_for(digest), tags


def _truncate(path: Path, drop: int = 7) -> None:
    path.write_bytes(path.read_bytes()[:-drop])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture
def four_tags(ingested_copy, unpack_snapshot) -> tuple[Path, Path]:
    """(home, cache): the same corpus snapshot ingested as four tags (`kdb ingest` exit 0 each): every blob is used
    by the four snapshots."""
    return ingested_copy([(tag, SNAPSHOT) for tag in FOUR]), unpack_snapshot(SNAPSHOT)


# -- item 2: a damaged blob is named with every snapshot, refused whole by export, and repaired --------------------


def test_verify_names_every_snapshot_and_a_failed_export_leaves_nothing(four_tags, tmp_path, capsys):
    home, _ = four_tags
    truncated, truncated_path, truncated_tags = _blob(home, "hsaco")
    flipped, flipped_path, flipped_tags = _blob(home, "llir")
    assert truncated_tags == flipped_tags == set(FOUR)
    _truncate(truncated_path)
    _flip(flipped_path)
    # export: one line, exit 5, and no trace (neither DEST nor the folder it was written into)
    work = tmp_path / "work"
    work.mkdir()
    r = kdb(capsys, home, "export", "a", str(work / "out" / "cache"))
    assert r.code == ExitCode.INTEGRITY and len(r.err.strip().splitlines()) == 1, r.err
    assert "nothing was written" in r.err
    assert list(work.iterdir()) == []
    empty = work / "empty"
    empty.mkdir()
    r = kdb(capsys, home, "export", "b", str(empty))
    assert r.code == ExitCode.INTEGRITY
    assert list(work.iterdir()) == [empty] and list(empty.iterdir()) == []
    # verify: each damaged blob once, naming all four snapshots
    assert_verified(capsys, home, {truncated: set(FOUR), flipped: set(FOUR)})


@pytest.mark.slow  # a real ingest and two exports: ~2 s
def test_ingesting_a_file_repairs_its_truncated_blob(four_tags, tmp_path, capsys):
    """A put of good bytes replaces a damaged stored blob it would reuse: the frame check every put makes finds a
    truncated one, and the new snapshot (and the four old ones) export whole."""
    home, cache = four_tags
    truncated, truncated_path, _ = _blob(home, "hsaco")
    _truncate(truncated_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(cache, elsewhere)  # the same files under another path: read again, every folder known
    r = kdb(capsys, home, "ingest", str(elsewhere), "--tag", "e", "-j", "1", "--format", "json")
    assert r.code == 0 and r.json()["blobs_repaired"] == 1, r.out + r.err
    assert "repaired 1 damaged stored blob" in listings.render_ingest(SimpleNamespace(**r.json()))
    for tag in ("a", "e"):
        out = tmp_path / f"export-{tag}"
        assert kdb(capsys, home, "export", tag, str(out), "--verbatim").code == 0
        assert tree_hashes(out) == tree_hashes(cache)
    assert_verified(capsys, home)


@pytest.mark.slow  # two real ingests: ~3 s
def test_ingest_rehash_repairs_a_flipped_byte(four_tags, tmp_path, capsys):
    """A byte flipped inside a compressed block passes the frame check; ingesting the same directory again reads
    nothing (its files' metadata is unchanged) and repairs nothing, verify names the blob with the new snapshot
    too, and `--rehash` (each stored blob decompressed and compared with the file) repairs it."""
    home, cache = four_tags
    flipped, flipped_path, _ = _blob(home, "llir")
    _flip(flipped_path)
    r = kdb(capsys, home, "ingest", str(cache), "--tag", "e", "-j", "1", "--format", "json")
    assert r.code == 0 and r.json()["files_unchanged"] == r.json()["files"] and r.json()["blobs_repaired"] == 0
    assert_verified(capsys, home, {flipped: {*FOUR, "e"}})
    r = kdb(capsys, home, "ingest", str(cache), "--tag", "f", "--rehash", "-j", "1", "--format", "json")
    assert r.code == 0 and r.json()["blobs_repaired"] == 1, r.out + r.err
    out = tmp_path / "export"
    assert kdb(capsys, home, "export", "a", str(out), "--verbatim").code == 0
    assert tree_hashes(out) == tree_hashes(cache)
    assert_verified(capsys, home)


def test_every_put_repairs_a_damaged_blob(unpack_snapshot, tmp_path, capsys):
    """Each way a blob is written (put_bytes: ingest; put_file: a file over STREAM_THRESHOLD, in streaming passes;
    put_compressed: push and pull) replaces a truncated stored blob, and with the full check a flipped byte."""
    cache = unpack_snapshot(SNAPSHOT)
    files = sorted(cache.rglob("*.hsaco"), key=lambda p: p.stat().st_size)
    home = tmp_path / "home"
    store = Home(home).store
    store.ensure()
    for put in (
        lambda source, **check: store.put_bytes(source.read_bytes(), **check),
        lambda source, **check: store.put_file(source, source.stat().st_size, **check),
    ):
        source = files.pop()
        size = source.stat().st_size
        first = put(source)
        assert first.new and not first.repaired
        stored = store.path_for(first.digest)
        _truncate(stored)
        assert store.check(first.digest, size).problem is not None
        assert put(source).repaired and store.check(first.digest, size).problem is None
        _flip(stored)
        assert not put(source).repaired  # a byte flipped inside a block passes the frame check
        assert store.check(first.digest, size).problem is not None
        assert put(source, full_check=True).repaired
        assert store.get(first.digest, size) == source.read_bytes()
    # put_compressed: the frame another store holds
    other = Home(tmp_path / "other").store
    other.ensure()
    source = files.pop()
    digest = other.put_bytes(source.read_bytes()).digest
    size = source.stat().st_size
    assert store.put_compressed(digest, size, other.read_compressed(digest))
    _truncate(store.path_for(digest))
    assert not store.repair.holds(digest, size)
    assert store.put_compressed(digest, size, other.read_compressed(digest))
    assert store.repair.holds(digest, size) and not store.put_compressed(digest, size, other.read_compressed(digest))
    assert not list(store.root.rglob(".tmp-*"))
    assert_verified(capsys, home)  # a home with blobs and no catalog (item 12)


@pytest.mark.slow  # two homes and a transfer: ~2 s
def test_pull_and_push_repair_a_damaged_blob_at_the_destination(ingested_copy, capsys):
    """kdb push/pull copy the blobs the destination lacks, and those it holds damaged."""
    source = ingested_copy([("a", SNAPSHOT)])
    dest = ingested_copy([("a", SNAPSHOT)])
    digest, path, _ = _blob(dest, "hsaco")
    _truncate(path)
    assert_verified(capsys, dest, {digest: {"a"}})
    (result,) = transfer(Home(source), Home(dest), ["a"], 60, as_tag="a2")
    assert (result.status, result.blobs_copied) == ("copied", 1)
    assert_verified(capsys, source)
    assert_verified(capsys, dest)


# -- item 3: an export is a working Triton cache where it lands -------------------------------------------------

# Runs in a fresh interpreter under umask 022 with TRITON_CACHE_DIR set to an export: what the installed Triton's
# FileCacheManager finds there, and what it writes when it puts the same files and group itself.
TRITON_ORACLE = textwrap.dedent(
    """
    import json, os, stat, sys
    from pathlib import Path
    os.umask(0o022)
    from triton.runtime.cache import FileCacheManager

    root = Path(os.environ["TRITON_CACHE_DIR"])
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)
    out = {"groups": 0, "complete": 0, "missing": [], "outside": [], "bytes_differ": [], "modes_differ": []}
    before = {p: (p.read_bytes(), mode(p)) for p in root.rglob("*") if p.is_file()}
    for grp in sorted(root.rglob("__grp__*.json")):
        out["groups"] += 1
        manager = FileCacheManager(grp.parent.name)
        name = grp.name[len("__grp__"):]
        children = json.loads(grp.read_text())["child_paths"]
        found = manager.get_group(name) or {}
        if list(found) == list(children):
            out["complete"] += 1
        out["missing"] += [f"{grp}: {c}" for c in children if c not in found]
        out["outside"] += [p for p in found.values() if Path(p).parent != grp.parent]
        if sys.argv[1] == "rewrite":  # Triton puts the same files and group: the bytes and modes it writes
            put = {c: manager.put(Path(p).read_bytes(), c) for c, p in found.items()}
            manager.put_group(name, put)
            for p in [grp, *map(Path, put.values())]:
                if p.read_bytes() != before[p][0]:
                    out["bytes_differ"].append(str(p))
                if mode(p) != before[p][1]:
                    out["modes_differ"].append(f"{p}: kdb {before[p][1]:o}, Triton {mode(p):o}")
    fresh = Path(sys.argv[2])
    os.environ["TRITON_CACHE_DIR"] = str(fresh)
    FileCacheManager("key")  # creates TRITON_CACHE_DIR/key as Triton does
    out["file_mode"] = f"{mode(next(p for p in root.rglob('*') if p.is_file())):o}"
    out["triton_dir_modes"] = sorted({f"{mode(fresh):o}", f"{mode(fresh / 'key'):o}"})
    print(json.dumps(out))
    """
)


def _triton(export: Path, action: str, fresh: Path) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": str(export)}
    proc = subprocess.run(
        [sys.executable, "-c", TRITON_ORACLE, action, str(fresh)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.triton
def test_export_is_a_working_triton_cache_at_its_new_path(ingested_copy, unpack_snapshot, tmp_path, capsys):
    """Exported to a path other than the one it was compiled into, every group of a real snapshot is found whole
    by Triton's FileCacheManager.get_group; every group file is the bytes Triton writes when it puts the same
    files into that folder, and every file and folder has the mode Triton gives it (umask 022: 0644, 0755).
    --verbatim keeps the stored bytes, with which (the problem this fixes) Triton finds no group whole."""
    home = ingested_copy([("a", SNAPSHOT)])
    cache = unpack_snapshot(SNAPSHOT)
    compiled_into = {
        os.path.dirname(os.path.dirname(p))
        for g in cache.rglob("__grp__*.json")
        for p in json.loads(g.read_text())["child_paths"].values()
    }
    assert len(compiled_into) == 1 and not Path(next(iter(compiled_into))).exists()
    export = tmp_path / "moved" / "cache"
    with umask(0o022):
        r = kdb(capsys, home, "export", "a", str(export))
    assert r.code == 0, r.err
    groups = sorted(export.rglob("__grp__*.json"))
    assert len(groups) == load_manifest()["snapshots"][SNAPSHOT]["kernel_count"]
    assert f"{len(groups)} group files pointing into it" in r.out
    found = _triton(export, "rewrite", tmp_path / "fresh")
    assert (found["groups"], found["complete"], found["missing"], found["outside"]) == (
        len(groups),
        len(groups),
        [],
        [],
    )
    assert (found["bytes_differ"], found["modes_differ"], found["file_mode"]) == ([], [], "644")
    dir_modes = {f"{os.stat(d).st_mode & 0o777:o}" for d in [export, *(p for p in export.rglob("*") if p.is_dir())]}
    assert dir_modes == set(found["triton_dir_modes"]) == {"755"}
    # every other file is the stored bytes
    exported = tree_hashes(export)
    original = tree_hashes(cache)
    assert {p for p in exported if exported[p] != original[p]} == {g.relative_to(export).as_posix() for g in groups}
    verbatim = tmp_path / "verbatim"
    with umask(0o022):
        assert kdb(capsys, home, "export", "a", str(verbatim), "--verbatim").code == 0
    assert tree_hashes(verbatim) == original
    stale = _triton(verbatim, "find", tmp_path / "fresh2")
    assert (stale["groups"], stale["complete"]) == (len(groups), 0)
    assert_verified(capsys, home)


@pytest.mark.triton
def test_blobs_and_exports_take_the_modes_triton_gives_under_a_group_umask(unpack_snapshot, tmp_path, capsys):
    """A store shared by a group of users (umask 002): blobs are 0664 like the files Triton writes, not 0600."""
    cache = unpack_snapshot(SNAPSHOT)
    home = tmp_path / "home"
    files = sorted(p for p in cache.rglob("*") if p.is_file())[:20]
    with umask(0o002):
        store = Home(home).store
        store.ensure()
        digests = [store.put_bytes(p.read_bytes()).digest for p in files]
    script = (
        "import os, stat; os.umask(0o002)\n"
        "from triton.runtime.cache import FileCacheManager\n"
        "path = FileCacheManager('key').put(b'x', 'f.bin')\n"
        "print(f'{stat.S_IMODE(os.stat(path).st_mode):o}')"
    )
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    triton_mode = proc.stdout.strip()
    assert triton_mode == "664"
    assert {f"{os.stat(store.path_for(d)).st_mode & 0o777:o}" for d in digests} == {triton_mode}
    assert not list(store.root.rglob(".tmp-*"))
    assert_verified(capsys, home)


@pytest.mark.slow  # every corpus cache unpacked: 47 snapshots and 12 Inductor caches
def test_group_files_of_every_release_are_written_as_that_release_wrote_them(unpack_snapshot, unpacked_archive):
    """relocate_group, asked for the folder a corpus cache was compiled into, gives back the stored bytes of every
    group file of every release 2.3.1-3.9.0 (3.x: paths into the folder; 2.x: names, which move with it), and
    that folder ends with the group file's own folder in the cache (what export joins to DEST)."""
    archives = [unpack_snapshot(name) for name in sorted(load_manifest()["snapshots"])]
    inductor = Path(__file__).resolve().parent.parent / "corpus" / "inductor"
    archives += [unpacked_archive(a) for a in sorted([*inductor.rglob("*.tar.zst"), *inductor.rglob("*.tar.xz")])]
    shapes = {"list": 0, "dict": 0}
    for cache in archives:
        for grp in cache.rglob("__grp__*.json"):
            data = grp.read_bytes()
            children = json.loads(data)["child_paths"]
            if isinstance(children, list):
                shapes["list"] += 1
                assert relocate_group(data, "/anywhere") == data
                continue
            shapes["dict"] += 1
            folders = {os.path.dirname(p) for p in children.values()}
            assert len(folders) == 1, grp
            folder = folders.pop()
            assert folder.endswith("/" + grp.parent.relative_to(cache).as_posix()), (grp, folder)
            assert relocate_group(data, folder) == data, grp
    assert shapes["list"] > 0 and shapes["dict"] > 0


# -- item 12 (verify): a home with blobs and no catalog ---------------------------------------------------------


def test_verify_reports_the_blobs_of_a_home_without_a_catalog(ingested_copy, capsys):
    home = ingested_copy([("a", SNAPSHOT)])
    digest, path, _ = _blob(home, "hsaco")
    (home / "catalog.duckdb").unlink()
    store = Home(home).store
    dictionaries = {name.rsplit("-", 1)[1] for name in os.listdir(store.dictionaries.directory)}
    blob_files = [p for shard in store.root.iterdir() if shard.name != "dictionaries" for p in shard.iterdir()]
    r = kdb(capsys, home, "verify", "--format", "json")
    assert r.code == 0, r.out + r.err
    report = r.json()
    assert report["catalog"] is False and report["problems"] == []
    assert report["blobs_checked"] == len(blob_files)
    assert report["unreferenced_blobs"] == len(blob_files) - len(dictionaries)
    r = kdb(capsys, home, "verify")
    assert r.code == 0 and "no catalog" in r.out and "run `kdb ingest` first" not in r.out + r.err
    _truncate(path)
    assert_verified(capsys, home, {digest: set()})


def test_gc_without_a_catalog_deletes_nothing(ingested_copy, capsys):
    """A home whose catalog was lost or moved: every blob would look unreferenced, so gc refuses (exit 5) and
    the store keeps every file."""
    home = ingested_copy([("a", SNAPSHOT)])
    (home / "catalog.duckdb").unlink()
    before = tree_hashes(home / "store")
    r = kdb(capsys, home, "gc")
    assert r.code == 5 and "deleted nothing" in r.err and len(r.err.strip().splitlines()) == 1, r.out + r.err
    assert tree_hashes(home / "store") == before and not (home / "catalog.duckdb").exists()
    assert_verified(capsys, home)
