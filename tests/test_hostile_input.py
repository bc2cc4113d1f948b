"""Hostile input: damaged copies of real corpus caches, hostile export destinations, hostile option text.

Every damage is applied to a copy of a real corpus snapshot (truncating, flipping bits, replacing a real
file's bytes with random ones, wrapping a real JSON in the wrong shape, ...) and must end as a recorded
problem with a one-line reason while the rest of the cache is ingested: exit 1, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from helpers import kdb, kdb_subprocess, plant_catalog_path, tree_hashes

from kdb.errors import ExitCode

SEED = 20251121
SPARSE_BYTES = 2 << 30  # 2 GiB, larger than the default --max-file-size (1 GiB)
DEEP_LEVELS = 100


@dataclass
class Injection:
    what: str
    path: str  # the problem's path (its prefix for a non-UTF-8 name, which is shown with U+FFFD)
    reason: str  # a word the problem's reason must contain
    damaged_key: str | None = None  # a kernel folder whose analysis this damages


def _smallest(manifest: dict, backend: str) -> str | None:
    names = [(e["archive_bytes"], n) for n, e in manifest["snapshots"].items() if e.get("backend") == backend]
    return min(names)[1] if names else None


def _kernel_folders(cache: Path, binary: str) -> list[tuple[str, str]]:
    """(folder, kernel name) of every kernel folder holding NAME.json beside NAME.<binary>."""
    out = []
    for folder in sorted(p for p in cache.iterdir() if p.is_dir()):
        for f in sorted(folder.glob(f"*.{binary}")):
            if (folder / f"{f.stem}.json").is_file():
                out.append((folder.name, f.stem))
                break
    return out


def _flip_section_table_offset(data: bytes) -> bytes:
    """Flip one high bit of ELF64 e_shoff (bytes 0x28..0x2f): the section headers now lie far past EOF."""
    damaged = bytearray(data)
    damaged[0x2E] ^= 0x40
    return bytes(damaged)


def damage_binaries(cache: Path, binary: str, folders: list[tuple[str, str]], rng: random.Random) -> list[Injection]:
    """Truncated, bit-flipped, zero-byte and random-bytes copies of the real code objects (.hsaco / .cubin)."""
    out = []
    damages = [
        ("truncated", lambda d: d[: len(d) // 2]),
        ("bit-flipped", _flip_section_table_offset),
        ("zero-byte", lambda d: b""),
        ("random bytes", lambda d: rng.randbytes(len(d))),
    ]
    for (label, damage), (folder, name) in zip(damages, folders, strict=False):
        path = cache / folder / f"{name}.{binary}"
        path.write_bytes(damage(path.read_bytes()))
        out.append(Injection(f"{label} .{binary}", f"{folder}/{name}.{binary}", "", folder))
    return out


def damage_text_artifacts(
    cache: Path, kinds: list[str], folders: list[tuple[str, str]], rng: random.Random
) -> list[Injection]:
    """A real IR/asm file (.amdgcn, .ttgir, .ptx) replaced by random bytes of the same length."""
    out = []
    for kind, (folder, name) in zip(kinds, folders, strict=False):
        path = cache / folder / f"{name}.{kind}"
        path.write_bytes(rng.randbytes(path.stat().st_size))
        out.append(Injection(f"random bytes .{kind}", f"{folder}/{name}.{kind}", "", folder))
    return out


def damage_json(cache: Path, folders: list[tuple[str, str]]) -> list[Injection]:
    damages = [
        ("empty JSON", lambda t: b""),
        ("truncated JSON (not JSON)", lambda t: t[: len(t) // 2]),
        ("JSON list", lambda t: b"[" + t + b"]"),
        ("JSON string", lambda t: json.dumps(t.decode()).encode()),
    ]
    out = []
    for (label, damage), (folder, name) in zip(damages, folders, strict=False):
        path = cache / folder / f"{name}.json"
        path.write_bytes(damage(path.read_bytes()))
        out.append(Injection(label, f"{folder}/{name}.json", "", folder))
    return out


def plant_filesystem_hazards(cache: Path, folder: str, name: str, outside: Path) -> tuple[list[Injection], list[str]]:
    """Symlinks, a FIFO, a non-UTF-8 name, deep nesting and a 2 GiB sparse file, beside a real kernel.

    Returns the injections and the paths (relative) of files that are not stored.
    """
    base = cache / folder
    real = base / f"{name}.ttir"
    out = []
    os.symlink(f"{name}.loop-b.ttgir", base / f"{name}.loop-a.ttgir")
    os.symlink(f"{name}.loop-a.ttgir", base / f"{name}.loop-b.ttgir")
    out += [
        Injection("symlink loop", f"{folder}/{name}.loop-a.ttgir", "link"),
        Injection("symlink loop", f"{folder}/{name}.loop-b.ttgir", "link"),
    ]
    secret = outside / "secret.json"
    secret.write_bytes(real.read_bytes())
    os.symlink(secret, base / "outside.json")
    out.append(Injection("symlink out of the cache", f"{folder}/outside.json", "link"))
    os.mkfifo(base / "pipe.ttir")
    out.append(Injection("FIFO", f"{folder}/pipe.ttir", "regular"))
    with open(os.fsencode(base) + b"/\xff\xfe" + name.encode() + b".ttir", "wb") as fh:
        fh.write(real.read_bytes())
    out.append(Injection("non-UTF-8 file name", f"{folder}/", "UTF-8"))
    deep = base.joinpath(*["d"] * DEEP_LEVELS)
    deep.mkdir(parents=True)
    shutil.copy(real, deep / real.name)
    out.append(Injection(f"{DEEP_LEVELS} levels of nesting", f"{folder}/" + "/".join(["d"] * 31), "deeper"))
    huge = base / f"{name}.huge.llir"
    shutil.copy(base / f"{name}.llir", huge)
    os.truncate(huge, SPARSE_BYTES)
    out.append(Injection("2 GiB sparse file", f"{folder}/{name}.huge.llir", "larger"))
    not_stored = [f"{folder}/{name}.huge.llir", f"{folder}/" + "/".join(["d"] * DEEP_LEVELS) + f"/{real.name}"]
    return out, not_stored


def build_hostile_cache(
    src: Path, dest: Path, binary: str, text_kinds: list[str], outside: Path, seed: int = SEED
) -> tuple[list[Injection], list[str]]:
    """Copy a real cache to dest and damage it; returns the injections and the relative paths that must not be stored."""
    rng = random.Random(seed)
    shutil.copytree(src, dest, symlinks=True)
    folders = _kernel_folders(dest, binary)
    assert len(folders) >= 16, "the snapshot has too few kernel folders to damage one per injection"
    injections = damage_binaries(dest, binary, folders[0:4], rng)
    injections += damage_json(dest, folders[4:8])
    injections += damage_text_artifacts(dest, text_kinds, folders[8 : 8 + len(text_kinds)], rng)
    hazards, not_stored = plant_filesystem_hazards(dest, *folders[-1], outside)
    return injections + hazards, not_stored


def stored_files_expected(cache: Path, not_stored: list[str]) -> dict[str, str]:
    """sha256 of every regular file with a UTF-8 name that ingest must store, found without kdb."""
    out = {}
    for dirpath, _dirnames, filenames in os.walk(cache):  # never follows symlinks
        for name in filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(cache).as_posix()
            try:
                rel.encode()
            except UnicodeEncodeError:
                continue
            if path.is_symlink() or not path.is_file() or rel in not_stored:
                continue
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _query(home: Path, sql: str, params: list) -> list[tuple]:
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def _check_hostile_ingest(
    home: Path, cache: Path, injections: list[Injection], not_stored: list[str], entry: dict, tmp_path: Path, capsys
) -> dict[str, tuple]:
    started = time.monotonic()
    r = kdb_subprocess(home, "ingest", str(cache), "--tag", "hostile", "-q", timeout=300)
    elapsed = time.monotonic() - started
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    assert r.code == ExitCode.FINDINGS, r.err  # completed, with problems
    assert r.err == ""
    assert elapsed < 120, f"ingest took {elapsed:.0f} s: the sparse file was read?"

    shown = kdb(capsys, home, "show", "hostile", "--format", "json").json()
    problems = shown["problems"]
    for p in problems:
        assert p["reason"] and "\n" not in p["reason"] and "Traceback" not in p["reason"], p
    for inj in injections:
        matches = [
            p
            for p in problems
            if p["path"].startswith(inj.path)
            and inj.reason in p["reason"]
            and (inj.what != "non-UTF-8 file name" or "\ufffd" in p["path"])
        ]
        assert matches, f"{inj.what}: no problem recorded for {inj.path!r}; problems: {problems}"
    view = _query(home, "SELECT count(*) FROM problems WHERE tag = ?", ["hostile"])[0][0]
    assert view == len(problems) == shown["problem_count"]

    # All kernel folders are still listed, and every undamaged one was analysed.
    damaged = {i.damaged_key for i in injections if i.damaged_key}
    assert shown["kernel_count"] == entry["kernel_count"]
    rows = _query(home, "SELECT cache_key, vgpr_count, registers FROM kernels WHERE tag = ?", ["hostile"])
    facts = {key: (vgpr, regs) for key, vgpr, regs in rows}
    undamaged = set(facts) - damaged
    assert len(undamaged) == entry["kernel_count"] - len(damaged)
    assert all(facts[k][1] is not None for k in undamaged), "an undamaged kernel lost its register count"

    # Every storable file was stored byte for byte; nothing else was.
    expected = stored_files_expected(cache, not_stored)
    stored = dict(
        _query(home, "SELECT path, hash FROM files JOIN snapshots USING (snapshot_id) WHERE tag = ?", ["hostile"])
    )
    assert stored == expected
    dest = tmp_path / "export"
    assert kdb(capsys, home, "export", "hostile", str(dest), "--verbatim").code == 0
    assert tree_hashes(dest) == expected
    assert kdb(capsys, home, "verify").code == 0
    return facts


@pytest.fixture(scope="module")
def amd_name(corpus_manifest) -> str:
    return _smallest(corpus_manifest, "hip")


@pytest.mark.slow  # real ingests under test: 5-8 s of CPU
def test_damaged_amd_cache_records_problems_and_ingests_the_rest(
    amd_name, corpus_manifest, unpack_snapshot, tmp_path, capsys
):
    outside = tmp_path / "outside"
    outside.mkdir()
    cache = tmp_path / "cache"
    injections, not_stored = build_hostile_cache(
        unpack_snapshot(amd_name), cache, "hsaco", ["amdgcn", "ttgir"], outside
    )
    home = tmp_path / "home"
    facts = _check_hostile_ingest(
        home, cache, injections, not_stored, corpus_manifest["snapshots"][amd_name], tmp_path, capsys
    )
    # A damaged code object gives NULL VGPRs for its kernel (and a problem row, checked above).
    for inj in injections:
        if inj.what.endswith(".hsaco"):
            assert facts[inj.damaged_key][0] is None, inj.what
    assert list(outside.iterdir()) == [outside / "secret.json"]  # the link target was not touched


@pytest.mark.slow  # real ingests under test: 5-8 s of CPU
def test_damaged_nvidia_cache_records_problems_and_ingests_the_rest(corpus_manifest, unpack_snapshot, tmp_path, capsys):
    name = _smallest(corpus_manifest, "cuda")
    if name is None:
        pytest.skip("the corpus has no NVIDIA snapshot")
    outside = tmp_path / "outside"
    outside.mkdir()
    cache = tmp_path / "cache"
    injections, not_stored = build_hostile_cache(unpack_snapshot(name), cache, "cubin", ["ptx", "ttgir"], outside)
    home = tmp_path / "home"
    facts = _check_hostile_ingest(
        home, cache, injections, not_stored, corpus_manifest["snapshots"][name], tmp_path, capsys
    )
    for inj in injections:
        if inj.what.endswith(".cubin"):
            assert facts[inj.damaged_key][1] is None, inj.what


def test_unreadable_file_is_a_problem(amd_name, unpack_snapshot, tmp_path, capsys):
    cache = tmp_path / "cache"
    shutil.copytree(unpack_snapshot(amd_name), cache)
    folder, name = _kernel_folders(cache, "hsaco")[0]
    target = cache / folder / f"{name}.llir"
    target.chmod(0)
    try:
        try:
            target.open("rb").close()
            pytest.skip(
                "running with CAP_DAC_OVERRIDE (root): chmod 000 does not block reads here; "
                "the FIFO case covers a file that cannot be read as a regular file"
            )
        except PermissionError:
            pass
        home = tmp_path / "home"
        r = kdb_subprocess(home, "ingest", str(cache), "--tag", "t", "-q")
        assert r.code == ExitCode.FINDINGS and "Traceback" not in r.err, r.err
        problems = kdb(capsys, home, "show", "t", "--format", "json").json()["problems"]
        assert any(p["path"] == f"{folder}/{name}.llir" and "cannot read" in p["reason"] for p in problems), problems
    finally:
        target.chmod(0o644)


# -- export destinations ------------------------------------------------------------------------


@pytest.fixture
def ingested(amd_name, unpack_snapshot, ingested_copy):
    """(home, cache): a private copy of a home holding the smallest AMD snapshot tagged `snap` (`kdb ingest`
    exit 0, cached once per inputs and kdb version), which the test may damage."""
    return ingested_copy([("snap", amd_name)]), unpack_snapshot(amd_name)


def _set_first_path(home: Path, new_path: str) -> None:
    plant_catalog_path(home, new_path)


def _all_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize(
    "evil",
    [
        "/ABS/escaped.json",
        "a/../../escaped.json",
        "a/b/../../../escaped.json",
        "..",
        "./a/../../escaped.json",
        "a//b.json",
        "a\\..\\..\\escaped.json",
    ],
)
def test_export_refuses_paths_that_climb_out(ingested, tmp_path, capsys, evil):
    home, _ = ingested
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    if evil.startswith("/ABS"):
        evil = str(sandbox / "escaped.json")
    _set_first_path(home, evil)
    before = _all_files(tmp_path)
    r = kdb(capsys, home, "export", "snap", str(sandbox / "dest"))
    assert r.code == ExitCode.INTEGRITY and "unsafe path" in r.err, r.err
    created = _all_files(tmp_path) - before
    assert all(p.startswith("sandbox/dest") for p in created), created
    assert not (sandbox / "escaped.json").exists() and not (tmp_path / "escaped.json").exists()


def test_export_refuses_dest_with_planted_symlink(ingested, tmp_path, capsys):
    home, _ = ingested
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    first_folder = (
        kdb(capsys, home, "sql", "SELECT min(path) AS p FROM files", "--format", "json").json()[0]["p"].split("/")[0]
    )
    os.symlink(outside, dest / first_folder)
    r = kdb(capsys, home, "export", "snap", str(dest))
    assert r.code == ExitCode.USAGE and len(r.err.strip().splitlines()) == 1, r.err
    assert list(outside.iterdir()) == []
    os.symlink(outside, tmp_path / "link-dest")
    r = kdb(capsys, home, "export", "snap", str(tmp_path / "link-dest"))
    assert r.code == ExitCode.USAGE and "symbolic link" in r.err
    assert list(outside.iterdir()) == []


def test_export_refuses_symlink_planted_while_it_runs(ingested, tmp_path, capsys, monkeypatch):
    """An attacker swaps a not-yet-created folder of the export for a link out of it mid-export (in the folder
    the export is written into before it is renamed to DEST): nothing lands outside, DEST is not made."""
    from kdb.store.blobs import BlobStore

    home, _ = ingested
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    folders = sorted(
        {
            r["p"].split("/")[0]
            for r in kdb(capsys, home, "sql", "SELECT path AS p FROM files", "--format", "json").json()
        }
    )
    victim = folders[-1]
    real_get = BlobStore.get
    calls = []

    def get_and_plant(self, digest, size):
        calls.append(digest)
        if len(calls) == 2:
            (writing,) = tmp_path.glob(".kdb-export-*")
            os.symlink(outside, writing / victim)
        return real_get(self, digest, size)

    monkeypatch.setattr(BlobStore, "get", get_and_plant)
    r = kdb(capsys, home, "export", "snap", str(dest))
    assert r.code == ExitCode.INTEGRITY and "symbolic link" in r.err, r.err
    assert list(outside.iterdir()) == []
    assert not dest.exists() and not list(tmp_path.glob(".kdb-export-*"))


# -- user text never reaches SQL unparameterised -------------------------------------------------

EVIL_TAGS = ["'; DROP TABLE snapshots; --", "quo\"te's", "x' OR '1'='1", "tag; DELETE FROM files"]


@pytest.mark.slow  # real ingests under test: 5-8 s of CPU
def test_hostile_tags_and_labels_round_trip(ingested, tmp_path, capsys):
    home, cache = ingested
    files_before = kdb(capsys, home, "sql", "SELECT count(*) AS n FROM files", "--format", "json").json()[0]["n"]
    # A new tag follows the tag rules (kdb/store/tags.py): these are refused, one line, nothing recorded.
    for tag in EVIL_TAGS:
        r = kdb(capsys, home, "ingest", str(cache), "--tag", tag, "-q")
        assert r.code == ExitCode.USAGE and "invalid tag" in r.err and len(r.err.splitlines()) == 1, r.err
    assert [t["tag"] for t in kdb(capsys, home, "tags", "--format", "json").json()] == ["snap"]
    # Labels are free text; tags an older kdb stored are found by every command that reads a tag: planted here.
    for i, tag in enumerate(EVIL_TAGS):
        label = f"k'{i}=v\"'); DROP TABLE files; --"
        r = kdb(capsys, home, "ingest", str(cache), "--tag", f"legal{i}", "-q", "--label", label)
        assert r.code == 0, r.err
        con = duckdb.connect(str(home / "catalog.duckdb"))
        try:
            con.execute("UPDATE snapshots SET tag = ? WHERE tag = ?", [tag, f"legal{i}"])
        finally:
            con.close()
        shown = kdb(capsys, home, "show", tag, "--format", "json").json()
        assert shown["tag"] == tag
        assert shown["labels"] == {f"k'{i}": "v\"'); DROP TABLE files; --"}
    tags = [t["tag"] for t in kdb(capsys, home, "tags", "--format", "json").json()]
    assert sorted(tags) == sorted(["snap", *EVIL_TAGS])
    # Options that look up by tag, kernel pattern or path: no match means no match, never "everything".
    r = kdb(capsys, home, "show", "snap", "--kernel", "x' OR '1'='1")
    assert r.code == ExitCode.USAGE and "no kernel matching" in r.err
    r = kdb_subprocess(home, "cat", "snap", "x' OR '1'='1", binary=True)
    assert r.code == ExitCode.USAGE and r.out == b""
    assert kdb(capsys, home, "show", "' OR '1'='1").code == ExitCode.TAG
    dest = tmp_path / "out"
    assert kdb(capsys, home, "export", EVIL_TAGS[0], str(dest), "--verbatim").code == 0
    assert tree_hashes(dest) == tree_hashes(cache)
    r = kdb(capsys, home, "diff", EVIL_TAGS[0], EVIL_TAGS[1])
    assert r.code in (0, 1) and "error" not in r.err, r.err
    for tag in EVIL_TAGS:
        assert kdb(capsys, home, "rm", tag).code == 0
    # The catalog is intact: the original snapshot, all its rows, a clean verify.
    assert [t["tag"] for t in kdb(capsys, home, "tags", "--format", "json").json()] == ["snap"]
    assert (
        kdb(capsys, home, "sql", "SELECT count(*) AS n FROM files", "--format", "json").json()[0]["n"] == files_before
    )
    assert kdb(capsys, home, "verify").code == 0
