"""Issue 37, the capture items: kdb.capture under damage and misuse, on real compiles.

Real Triton 3.6.0 compiles of corpus kernels for gfx942, offline, through `kdb.capture:CacheManager` (the driver
tests/test_capture.py uses, bench/capture_compile.py), real corpus snapshots, a real forked `multiprocessing`
worker, a real SIGKILL, a real full disk (a small tmpfs in a private mount namespace), a real shadowing module
and a real Triton whose native library is damaged. The oracle for what a capture holds is Triton's own cache
folder for the same compiles; `kdb verify` ends every test (0 problems, or exactly the planted ones).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_verified, kdb
from test_capture import counters  # every process's KDB_CAPTURE_STATS summed, as tests/test_capture.py reads them

from kdb.errors import ExitCode
from kdb.store.spool import GROUP_PREFIX, SpoolLayout

ROOT = Path(__file__).resolve().parent.parent
COMPILE = ROOT / "bench" / "capture_compile.py"
LLD = "/usr/lib/llvm-22/bin/ld.lld"
SPEC = {"backend": "hip", "target": "gfx942", "warp_size": 64}
OLD, NEW = "t3.3.1-gfx942", "t3.4.0-gfx942"  # a Triton 3.3.1 snapshot and its upgrade, ingested

# Tests that compile with Triton (or import it) are marked `triton`, which makes them `slow` (tests/conftest.py).


# -- compiling ---------------------------------------------------------------------------------------------


def _configs(count: int) -> list[dict]:
    from capture_compile import build_module  # bench/ (tests/conftest.py puts it on the path)

    # vector_add fp32 then fp16: two small kernels of one source, each compiled in well under a second
    return build_module().configs_for("t3.6.0-gfx942")[:count]


def _env(work: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "TRITON_CACHE_DIR": str(work / "triton-cache"),
        "TRITON_HIP_LLD_PATH": LLD,
        "TRITON_HOME": str(work / "triton-home"),
        **extra,
    }


def _spec(work: Path, configs: list[dict], name: str) -> tuple[Path, Path]:
    results = work / f"{name}.jsonl"
    spec = work / f"{name}.json"
    spec.write_text(json.dumps({**SPEC, "configs": configs, "results": str(results)}))
    return spec, results


def compile_with(work: Path, configs: list[dict], name: str, env: dict[str, str], driver: Path = COMPILE):
    """One process compiling `configs` (a user's job): (its exit status, its result lines, its stderr)."""
    spec, results = _spec(work, configs, name)
    proc = subprocess.run(
        [sys.executable, str(driver), str(spec)], env=env, capture_output=True, text=True, cwd=work, timeout=600
    )
    lines = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    return proc.returncode, lines, proc.stderr


def capture_env(work: Path, home: Path, tag: str, stats: Path, **extra: str) -> dict[str, str]:
    return _env(
        work,
        TRITON_CACHE_MANAGER="kdb.capture:CacheManager",
        KDB_HOME=str(home),
        KDB_CAPTURE_TAG=tag,
        KDB_CAPTURE_STATS=str(stats),
        **extra,
    )


def capture_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("kdb capture:")]


def cache_tree(root: Path) -> dict[str, object]:
    """A Triton cache folder as a comparable value: every file's sha256, but a group file by the files it names
    (its child paths name the folder it was written for, which an export relocates)."""
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if path.name.startswith(GROUP_PREFIX):
            out[rel] = ("group", sorted(json.loads(path.read_bytes())["child_paths"]))
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def exported(capsys, home: Path, tag: str, dest: Path) -> dict[str, object]:
    r = kdb(capsys, home, "export", tag, str(dest))
    assert r.code == 0, r.err
    return cache_tree(dest)


def layout(home: Path, tag: str) -> SpoolLayout:
    return SpoolLayout(home / "capture", tag)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Triton's own cache folder for the two kernels (TRITON_CACHE_DIR alone): the cache keys, in the configs'
    order, and the folder."""
    work = tmp_path_factory.mktemp("reference")
    configs = _configs(2)
    code, lines, err = compile_with(work, configs, "reference", _env(work))
    assert code == 0 and all("cache_key" in r for r in lines), err[-2000:]
    return [r["cache_key"] for r in lines], work / "triton-cache", configs


def subset(tree: dict[str, object], keys: list[str]) -> dict[str, object]:
    return {rel: value for rel, value in tree.items() if rel.split("/", 1)[0] in keys}


# -- 1. capture changes only snapshots it made ---------------------------------------------------------------


@pytest.mark.triton
def test_capture_never_adds_kernels_to_a_snapshot_it_did_not_make(capsys, tmp_path, ingested_copy, reference):
    """KDB_CAPTURE_TAG naming an ingested Triton 3.3.1 snapshot: the 3.6.0 compiles go on (one stderr line says
    why kdb stays out), and the snapshot and its diff against 3.4.0 are what they were."""
    home = ingested_copy([(OLD, OLD), (NEW, NEW)])
    _, _, configs = reference
    show = kdb(capsys, home, "show", OLD, "--format", "json")
    diff = kdb(capsys, home, "diff", OLD, NEW, "--format", "json")
    assert show.code == 0 and diff.out.startswith("{"), show.err + diff.err

    code, lines, err = compile_with(tmp_path, configs, "into-old", capture_env(tmp_path, home, OLD, tmp_path / "stats"))
    assert code == 0 and [("cache_key" in r) for r in lines] == [True, True], err[-2000:]
    said = capture_lines(err)
    assert len(said) == 1, err
    assert f"snapshot '{OLD}' was not made by a capture" in said[0] and "Triton goes on" in said[0], said

    assert kdb(capsys, home, "show", OLD, "--format", "json").out == show.out
    again = kdb(capsys, home, "diff", OLD, NEW, "--format", "json")
    assert (again.code, again.out) == (diff.code, diff.out)
    assert not layout(home, OLD).spool.exists()  # nothing spooled for it either
    assert_verified(capsys, home)


@pytest.mark.slow  # 1.8 s: a commit, three catalog reads and two verifies of a corpus snapshot
def test_a_commit_refuses_a_tag_ingested_after_its_folders_were_spooled(capsys, ingested_copy, unpack_snapshot):
    """The other order: folders spooled for a tag that `kdb ingest` then made (a real Triton 3.6.0 kernel folder of
    the corpus, as a capture spools it). `kdb capture commit` refuses in one line (exit 4), a command reading the
    tag says what waits and why it cannot join, and the snapshot is unchanged."""
    home = ingested_copy([(OLD, OLD)])
    source = unpack_snapshot("t3.6.0-gfx942")
    folder = sorted(p for p in source.iterdir() if any(n.name.startswith(GROUP_PREFIX) for n in p.iterdir()))[0]
    shutil.copytree(folder, layout(home, OLD).spool / folder.name)
    show = kdb(capsys, home, "show", OLD, "--format", "json")
    assert show.code == 0
    assert show.err.count("kdb: warning:") == 1, show.err
    assert f"1 captured folders wait for {OLD} and cannot join it" in show.err, show.err

    r = kdb(capsys, home, "capture", "commit", "--tag", OLD)
    assert r.code == ExitCode.TAG and r.out == "", r.out + r.err
    assert len(r.err.strip().splitlines()) == 1 and "not made by a capture" in r.err, r.err
    assert kdb(capsys, home, "show", OLD, "--format", "json").out == show.out
    report = kdb(capsys, home, "verify", "--format", "json").json()
    assert [n for n in report["notes"] if OLD in n] == [
        f"capture {OLD}: 1 folders wait to be recorded (`kdb capture commit --tag {OLD}`, or any command that "
        "reads the tag, records them)"
    ]
    assert_verified(capsys, home)


@pytest.mark.slow  # ~1 s of CPU: outside the inner loop's 60 s
def test_a_commit_refuses_a_tag_ingested_while_it_was_looking(capsys, ingested_copy, unpack_snapshot, monkeypatch):
    """The race between the commit's look and its append: `kdb ingest` makes the tag after the look (planted here
    by passing the look). The append itself, inside the writing transaction, refuses a snapshot made another way:
    ForeignSnapshot, the snapshot unchanged, the folders still spooled."""
    from kdb.capture import cache, recording

    home = ingested_copy([(OLD, OLD)])
    source = unpack_snapshot("t3.6.0-gfx942")
    folder = sorted(p for p in source.iterdir() if any(n.name.startswith(GROUP_PREFIX) for n in p.iterdir()))[0]
    spooled = layout(home, OLD)
    shutil.copytree(folder, spooled.spool / folder.name)
    before = kdb(capsys, home, "show", OLD, "--format", "json")
    monkeypatch.setattr(recording, "check_own_snapshot", lambda *args, **kwargs: None)
    from kdb.store.home import Home

    with pytest.raises(cache.ForeignSnapshot, match="not made with captured_by=kdb.capture"):
        cache.record(Home(home), spooled, 5.0)
    monkeypatch.undo()
    assert kdb(capsys, home, "show", OLD, "--format", "json").out == before.out
    assert sorted(p.name for p in (spooled.spool.iterdir() if spooled.spool.is_dir() else [])) + sorted(
        p.name for p in (spooled.commit.iterdir() if spooled.commit.is_dir() else [])
    ) == [folder.name]
    assert_verified(capsys, home)


# -- 2. a damaged store is said once, and never served ---------------------------------------------------------


@pytest.mark.triton
def test_damaged_blobs_are_said_once_and_recompiled(capsys, tmp_path, reference):
    keys, triton_dir, configs = reference
    home = tmp_path / "home"
    code, _, err = compile_with(tmp_path, configs, "a", capture_env(tmp_path, home, "first", tmp_path / "stats-a"))
    assert code == 0 and capture_lines(err) == [], err[-2000:]
    from kdb.store.blobs import BlobStore

    store = BlobStore(home / "objects")
    damaged = []
    for key in keys:  # both code objects, truncated as a disk or a user truncates a file
        entry = layout(home, "first").read_index(key)
        name, (digest, _) = next((name, value) for name, value in entry["files"].items() if name.endswith(".hsaco"))
        # both copies kdb holds: the blob, and the recorded file a hit is served from (kdb/store/spool.py)
        served = layout(home, "first").served_path(key, entry["folder_digest"]) / name
        for path in (store.path_for(digest), served):
            path.chmod(0o644)
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        damaged += [digest, f"{served.parent.name}/{name}"]
    assert_verified(capsys, home, {what: {"first"} for what in damaged})

    code, lines, err = compile_with(tmp_path, configs, "b", capture_env(tmp_path, home, "again", tmp_path / "stats-b"))
    assert code == 0 and [r.get("cache_key") for r in lines] == keys, err[-2000:]
    said = capture_lines(err)
    assert len(said) == 1 and "the store is damaged" in said[0] and "Triton compiles" in said[0], err
    c = counters(tmp_path / "stats-b")
    assert c["damaged"] == 2 and c["misses"] >= 2, c  # neither damaged code object reached Triton
    assert exported(capsys, home, "again", tmp_path / "export") == cache_tree(triton_dir)
    assert_verified(capsys, home)  # the recompiled bytes replaced the damaged blobs


# -- 4. compiles that end without exit hooks are recorded before anything reads them --------------------------

FORKED_DRIVER = """
import multiprocessing, sys
sys.path.insert(0, {bench!r})
import capture_compile

if __name__ == "__main__":
    worker = multiprocessing.get_context("fork").Process(target=capture_compile.main, args=(sys.argv[1],))
    worker.start()  # the worker compiles; it ends with os._exit, as every forked multiprocessing worker does
    worker.join()
    sys.exit(worker.exitcode)
"""


@pytest.mark.triton
def test_forked_worker_compiles_are_recorded_by_the_next_read(capsys, tmp_path, reference):
    keys, triton_dir, configs = reference
    home = tmp_path / "home"
    driver = tmp_path / "forked.py"
    driver.write_text(FORKED_DRIVER.format(bench=str(ROOT / "bench")))
    code, lines, err = compile_with(
        tmp_path, configs, "forked", capture_env(tmp_path, home, "cap", tmp_path / "stats"), driver
    )
    assert code == 0 and [r.get("cache_key") for r in lines] == keys, err[-2000:]
    waiting = len(layout(home, "cap").waiting())  # the worker's own commit may have recorded the first kernel
    assert waiting >= 1
    status = kdb(capsys, home, "capture", "status", "--tag", "cap")
    assert status.out.startswith(f"cap: {waiting} whole folders wait to be recorded, 0 still being written"), status

    # the catalog busy (a long ingest holds the home's writer lock): the read says how many wait and how to record
    import fcntl

    home.joinpath("write.lock").touch()
    fd = os.open(home / "write.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        busy = kdb(capsys, home, "--wait", "1", "show", "cap")
    finally:
        os.close(fd)
    warned = [line for line in busy.err.splitlines() if line.startswith("kdb: warning:")]
    assert warned == [
        f"kdb: warning: {waiting} captured folders wait for cap (the catalog is busy): "
        "`kdb capture commit --tag cap` records them"
    ], busy.err

    assert exported(capsys, home, "cap", tmp_path / "export") == cache_tree(triton_dir)  # recorded first
    assert kdb(capsys, home, "capture", "status", "--tag", "cap").out.startswith("cap: 0 whole folders wait")
    assert_verified(capsys, home)


KILL_SHIM = """
import os, signal
from kdb.capture import CacheManager
from kdb.capture import cache


class KillMidCompile(CacheManager):
    \"\"\"Triton's cache manager, SIGKILLed right after the second kernel's code object is put (before its
    metadata and group file): the first kernel's commit is let finish first, so only the second is cut.\"\"\"

    code_objects = 0

    def put(self, data, filename, binary=True):
        path = super().put(data, filename, binary)
        if filename.endswith(".hsaco"):
            KillMidCompile.code_objects += 1
            if KillMidCompile.code_objects == 2:
                if cache._capture is not None and cache._capture._committer is not None:
                    cache._capture._committer.join()
                os.kill(os.getpid(), signal.SIGKILL)
        return path
"""


@pytest.mark.triton
def test_a_folder_whose_writer_was_killed_mid_compile_is_named_and_collected(capsys, tmp_path, reference):
    keys, triton_dir, configs = reference
    home = tmp_path / "home"
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "killshim.py").write_text(KILL_SHIM)
    env = capture_env(tmp_path, home, "kill", tmp_path / "stats")
    env["TRITON_CACHE_MANAGER"] = "killshim:KillMidCompile"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")]))
    code, lines, _ = compile_with(tmp_path, configs, "killed", env)
    assert code == -9 and [r.get("cache_key") for r in lines] == keys[:1]
    cut = keys[1]
    assert sorted(p.name for p in layout(home, "kill").spool.iterdir()) == [cut]

    status = kdb(capsys, home, "capture", "status", "--tag", "kill").out.splitlines()
    assert status[0].startswith("kill: 0 whole folders wait to be recorded, 0 still being written, 1 left by a "), (
        status
    )
    assert re.fullmatch(rf"  {cut} was left unfinished: its writer \(process \d+\) died mid-compile", status[1]), status
    report = kdb(capsys, home, "verify", "--format", "json").json()
    assert report["problems"] == [] and len(report["notes"]) == 1, report
    assert f"capture kill: folder {cut} was left unfinished" in report["notes"][0], report

    gc = kdb(capsys, home, "gc", "--format", "json")
    assert gc.code == 0 and gc.json()["capture_folders_removed"] == 1, gc.out + gc.err
    assert not (layout(home, "kill").spool / cut).exists()
    assert kdb(capsys, home, "capture", "status", "--tag", "kill").out.splitlines() == [
        "kill: 0 whole folders wait to be recorded, 0 still being written, 0 left by a writer that died "
        "mid-compile (`kdb gc` removes them); the index serves 1 folders (all tags)"
    ]
    assert exported(capsys, home, "kill", tmp_path / "export") == subset(cache_tree(triton_dir), keys[:1])
    assert kdb(capsys, home, "verify", "--format", "json").json()["notes"] == []
    assert_verified(capsys, home)


def test_a_folder_being_written_is_never_collected(capsys, tmp_path, ingested_copy, unpack_snapshot):
    """Liveness comes from the writer's lock, not from age: a folder whose writer (this process) holds its lock
    stays through `kdb gc` however old; once the writer has let go without its group file, gc removes it."""
    home = ingested_copy([(OLD, OLD)])
    source = unpack_snapshot("t3.6.0-gfx942")
    folder = sorted(p for p in source.iterdir() if any(n.name.startswith(GROUP_PREFIX) for n in p.iterdir()))[0]
    compiled = tmp_path / folder.name  # what Triton wrote before its group file
    shutil.copytree(folder, compiled, ignore=shutil.ignore_patterns(f"{GROUP_PREFIX}*"))
    spool = layout(home, "live")
    lock = spool.start_writing(folder.name)
    for path in sorted(compiled.iterdir()):
        spool.install(path, folder.name, path.name)
    os.utime(spool.spool / folder.name, (0, 0))  # as old as can be
    try:
        status = kdb(capsys, home, "capture", "status", "--tag", "live").out
        assert status.startswith("live: 0 whole folders wait to be recorded, 1 still being written, 0 left by"), status
        assert kdb(capsys, home, "gc", "--format", "json").json()["capture_folders_removed"] == 0
        assert (spool.spool / folder.name).is_dir()
    finally:
        spool.done_writing(*lock)
    status = kdb(capsys, home, "capture", "status", "--tag", "live").out.splitlines()
    assert status[0].startswith("live: 0 whole folders wait to be recorded, 0 still being written, 1 left by"), status
    assert status[1] == f"  {folder.name} was left unfinished: its writer (a process) died mid-compile", status
    assert kdb(capsys, home, "gc", "--format", "json").json()["capture_folders_removed"] == 1
    assert not (spool.spool / folder.name).exists()
    assert_verified(capsys, home)


# -- 5. an index entry is served only when its files hash to its folder digest ---------------------------------


@pytest.mark.triton
def test_an_index_entry_naming_another_kernels_code_object_is_never_served(capsys, tmp_path, reference):
    keys, triton_dir, configs = reference
    fp32, fp16 = keys  # vector_add fp32, then fp16: one name, one file list, different code objects
    home = tmp_path / "home"
    code, _, err = compile_with(tmp_path, configs, "a", capture_env(tmp_path, home, "first", tmp_path / "stats-a"))
    assert code == 0 and capture_lines(err) == [], err[-2000:]
    index = layout(home, "first")
    entry, other = index.read_index(fp32), index.read_index(fp16)
    code_object = next(name for name in entry["files"] if name.endswith(".hsaco"))
    assert entry["files"][code_object] != other["files"][code_object]
    entry["files"][code_object] = other["files"][code_object]  # another valid blob: the fp16 kernel's
    index.index_path(fp32).write_text(json.dumps(entry, sort_keys=True))
    assert_verified(capsys, home, {f"capture index entry {fp32}": {"first"}})

    code, lines, err = compile_with(tmp_path, configs, "b", capture_env(tmp_path, home, "again", tmp_path / "stats-b"))
    assert code == 0 and [r.get("cache_key") for r in lines] == keys, err[-2000:]
    said = capture_lines(err)
    assert len(said) == 1 and f"capture index entry {fp32} is damaged" in said[0], err
    c = counters(tmp_path / "stats-b")
    fp32_files = sum(1 for p in (triton_dir / fp32).iterdir())
    assert c["damaged"] == 1 and c["puts"] == fp32_files, c  # the fp32 kernel compiled again, fp16 served
    assert exported(capsys, home, "again", tmp_path / "export") == cache_tree(triton_dir)
    assert_verified(capsys, home)  # the second run's commit wrote the entry again


# -- 12. a full disk, and a Triton that is not the installed one ------------------------------------------------

FULL_DISK = """
set -e
mount -t tmpfs -o size={size} tmpfs {mount}
cp -a {home} {mount}/home
dd if=/dev/zero of={mount}/filler bs=4k 2>/dev/null || true
truncate -s -{free} {mount}/filler
set +e
{python} {compile} {spec} 2> {tmp}/compile.err
echo $? > {tmp}/compile.rc
{python} -m kdb --home {mount}/home verify --format json > {tmp}/verify.json
"""


@pytest.mark.triton
def test_a_full_disk_is_said_once_per_process(capsys, tmp_path, ingested_copy, reference):
    """The home on a file system with 64 KiB free (a tmpfs in a private mount namespace): the first kernel's files
    may spool, its commit and every later put fail. Triton compiles both kernels; kdb says one line."""
    if shutil.which("unshare") is None:
        pytest.fail("needs unshare (util-linux) to mount a small tmpfs in a private mount namespace")
    probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True, text=True)
    if probe.returncode != 0:  # a kernel or container that forbids user namespaces: not an install step
        pytest.skip(f"this machine forbids private mount namespaces (unshare -Urm: {probe.stderr.strip()})")
    keys, _, configs = reference
    home = ingested_copy([(OLD, OLD)])
    mount = tmp_path / "full"
    mount.mkdir()
    spec, results = _spec(tmp_path, configs, "full")
    size = sum(p.stat().st_size for p in home.rglob("*") if p.is_file()) + (8 << 20)
    script = FULL_DISK.format(
        size=size,
        mount=mount,
        home=home,
        free=64 * 1024,
        python=sys.executable,
        compile=COMPILE,
        spec=spec,
        tmp=tmp_path,
    )
    env = capture_env(tmp_path, mount / "home", "full", tmp_path / "stats")
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    err = (tmp_path / "compile.err").read_text()
    assert (tmp_path / "compile.rc").read_text().strip() == "0", err[-2000:]
    assert [json.loads(line).get("cache_key") for line in results.read_text().splitlines()] == keys, err[-2000:]
    said = capture_lines(err)
    assert len(said) == 1 and "No space left on device" in said[0], err
    report = json.loads((tmp_path / "verify.json").read_text())  # `kdb verify` of the full home, in its namespace
    assert report["problems"] == [], report
    assert_verified(capsys, home)  # the home it was copied from


def _check_with_pythonpath(capsys, monkeypatch, home: Path, path: Path):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")])))
    return kdb(capsys, home, "capture", "check")


@pytest.mark.triton
def test_capture_check_says_when_a_module_shadows_triton(capsys, tmp_path, monkeypatch, ingested_copy):
    import triton

    home = ingested_copy([(OLD, OLD)])
    shadow = tmp_path / "shadow"
    (shadow / "triton").mkdir(parents=True)
    (shadow / "triton" / "__init__.py").write_text("# a project's own package named triton\n")
    r = _check_with_pythonpath(capsys, monkeypatch, home, shadow)
    assert r.code == ExitCode.BAD_INPUT and r.out == "", r
    assert len(r.err.strip().splitlines()) == 1, r.err
    assert f"loads {shadow / 'triton' / '__init__.py'}, which shadows Triton {triton.__version__}" in r.err, r.err
    assert_verified(capsys, home)


@pytest.mark.triton
def test_capture_check_says_when_triton_cannot_be_imported(capsys, tmp_path, monkeypatch, ingested_copy):
    """The installed Triton, installed again under PYTHONPATH (its files linked, its metadata copied), with its
    native library damaged: cut to its first 16 bytes `import triton` raises ImportError, cut to 4 KiB it kills
    the importing process (SIGBUS); both are said in one line, and kdb itself goes on."""
    import triton

    home = ingested_copy([(OLD, OLD)])
    installed = Path(triton.__file__).parent
    site = tmp_path / "site"
    site.mkdir()
    subprocess.run(["cp", "-rs", str(installed), str(site / "triton")], check=True)
    dist = next(installed.parent.glob(f"triton-{triton.__version__}.dist-info"))
    shutil.copytree(dist, site / dist.name)
    library = site / "triton" / "_C" / "libtriton.so"
    data = library.read_bytes()
    library.unlink()
    for cut, why in ((16, "(ImportError: "), (4096, "(the import killed the process: SIGBUS)")):
        library.write_bytes(data[:cut])
        r = _check_with_pythonpath(capsys, monkeypatch, home, site)
        assert r.code == ExitCode.BAD_INPUT and r.out == "", r
        assert len(r.err.strip().splitlines()) == 1, r.err
        assert f"Triton {triton.__version__} in {site / 'triton'} cannot be imported by this Python {why}" in r.err
    assert_verified(capsys, home)
