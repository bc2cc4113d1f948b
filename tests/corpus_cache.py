"""The test suite's cache outside the repository: corpus archives unpacked once per archive content, and kdb
homes ingested once per (inputs' content, kdb's code), reused read-only by every later run and every xdist
worker.

    $KDB_TEST_CACHE (default: $XDG_CACHE_HOME/kdb-tests, else ~/.cache/kdb-tests)
      unpacked/<sha256 of the archive>/tree/      the archive's files (never written after the build)
      homes/<key>/tree/                            a kdb home (catalog.duckdb + objects/), opened read-only
      <kind>/<key>/stat.json                       every entry's size and mtime when built: the tamper check

An entry is built under a lock file (one builder per key across processes: xdist workers, parallel runs)
into a temporary folder beside it and renamed into place when complete, so a killed build leaves nothing
a later run would take for whole. A home's key hashes the archives' content, the tags, the ingest options
and the source of every kdb module an ingest runs (kdb/ingest, store, analysis, triton, the schema
migrations, ...): changing any of them builds a new home; changing the diff, the renderers or the CLI
does not. Homes built through the CLI (a summary printed by `kdb ingest` is part of what tests check)
hash all of kdb.

Running as root, file modes do not stop a test from writing into a shared entry, so every entry a
process used is compared with its stat.json at the end of the session (conftest's `cache_guard`): a test
that wrote into one fails the run. A test that needs to write gets a copy (`clone`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parent.parent
ENV = "KDB_TEST_CACHE"
FORMAT = 1  # bump when the layout of the cache or the way an entry is built changes
# Unused entries are removed after this long (each use touches the entry's `used` stamp).
KEEP_UNUSED_S = 3 * 24 * 3600
# Code that decides what an ingest stores; everything else (diff, render, report, cli) reads homes only.
INGEST_CODE = (
    "kdb/__init__.py",
    "kdb/errors.py",
    "kdb/ingest",
    "kdb/store",
    "kdb/analysis",
    "kdb/triton",
    "schema",
)
ALL_CODE = ("kdb", "schema")


def cache_root() -> Path:
    explicit = os.environ.get(ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kdb-tests"


# -- hashing ----------------------------------------------------------------------------------------

_FILE_HASHES: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    st = path.stat()
    memo = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _FILE_HASHES:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        _FILE_HASHES[memo] = h.hexdigest()
    return _FILE_HASHES[memo]


def _source_files(parts: Iterable[str]) -> list[Path]:
    out: list[Path] = []
    for part in parts:
        p = ROOT / part
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
    return out


_CODE_HASHES: dict[tuple[str, ...], str] = {}


def code_version(parts: tuple[str, ...] = INGEST_CODE) -> str:
    """A hash of kdb's source files under `parts` (paths and bytes) and of what else decides an ingest's
    result: the DuckDB library (the catalog's file format) and the NVIDIA disassemblers found (SASS)."""
    if parts not in _CODE_HASHES:
        import duckdb

        from kdb.analysis.nvidia import tools

        h = hashlib.sha256()
        for f in _source_files(parts):
            h.update(f.relative_to(ROOT).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        found = []
        for d in [*tools.nvidia_wheel_bin_dirs(), tools.triton_bin_dir()]:
            exe = d / "nvdisasm" if d else None
            if exe and exe.is_file():
                found.append([str(exe), exe.stat().st_size, exe.stat().st_mtime_ns])
        env = os.environ.get(tools.ENV_VAR)
        h.update(json.dumps([duckdb.__version__, sys.version_info[:2], found, env]).encode())
        _CODE_HASHES[parts] = h.hexdigest()
    return _CODE_HASHES[parts]


# -- the tamper check -----------------------------------------------------------------------------


def _listing(tree: Path) -> dict[str, list[int]]:
    """Every entry under `tree`: files with size and mtime, folders and links by name."""
    out: dict[str, list[int]] = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        rel = os.path.relpath(dirpath, tree)
        for name in dirnames:
            out[os.path.join(rel, name) + "/"] = []
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.join(rel, name)] = [st.st_size, st.st_mtime_ns]
    return out


def _changes(entry: Path) -> list[str]:
    try:
        want = json.loads((entry / "stat.json").read_text())
    except (OSError, ValueError):
        return ["stat.json missing or unreadable"]
    got = _listing(entry / "tree")
    changed = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
    return changed


USED: set[Path] = set()  # entries this process handed out: checked by check_untouched() at the end


def check_untouched() -> list[str]:
    """One line per cache entry handed out in this process whose files changed since it was built."""
    problems = []
    for entry in sorted(USED):
        changed = _changes(entry)
        if changed:
            problems.append(f"{entry}: written by a test (shared read-only cache entry): {changed[:5]}")
    return problems


# -- building an entry ----------------------------------------------------------------------------


def _remove(path: Path) -> None:
    """Rename out of the way first (atomic), then delete: a reader never sees a half-deleted entry."""
    if not path.exists():
        return
    trash = path.with_name(f".trash-{path.name}-{uuid.uuid4().hex[:8]}")
    with contextlib.suppress(FileNotFoundError):
        path.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


def key_of(key_parts: dict) -> str:
    return hashlib.sha256(json.dumps({"format": FORMAT, **key_parts}, sort_keys=True).encode()).hexdigest()[:32]


def cached(kind: str, key_parts: dict, build: Callable[[Path], None]) -> Path:
    """The `tree` folder of cache entry `kind`/hash(key_parts), built by `build(tree)` when missing."""
    return cached_at(kind, key_of(key_parts), key_parts, build)


def cached_at(kind: str, key: str, key_parts: dict, build: Callable[[Path], None]) -> Path:
    base = cache_root() / kind
    entry = base / key
    if entry in USED:
        return entry / "tree"
    if not (entry / "stat.json").exists() or _changes(entry):
        base.mkdir(parents=True, exist_ok=True)
        with FileLock(str(base / f"{key}.lock")):
            if (entry / "stat.json").exists() and _changes(entry):
                print(f"kdb-tests cache: {entry} was modified; rebuilding it", file=sys.stderr)
                _remove(entry)
            if not (entry / "stat.json").exists():
                _prune(base)
                tmp = base / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                try:
                    build(tmp / "tree")
                    (tmp / "key.json").write_text(json.dumps(key_parts, indent=1, sort_keys=True, default=str) + "\n")
                    (tmp / "stat.json").write_text(json.dumps(_listing(tmp / "tree")))
                    _remove(entry)  # a leftover without stat.json (never: rename is atomic), to be sure
                    tmp.rename(entry)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    (entry / "used").touch()
    USED.add(entry)
    return entry / "tree"


def _prune(base: Path) -> None:
    """Entries of `base` unused for KEEP_UNUSED_S, and temporaries of killed builds older than a day."""
    now = time.time()
    for p in base.iterdir():
        try:
            if p.name.startswith((".tmp-", ".trash-")):
                if now - p.stat().st_mtime > 24 * 3600:
                    shutil.rmtree(p, ignore_errors=True)
            elif p.is_dir() and now - (p / "used").stat().st_mtime > KEEP_UNUSED_S:
                _remove(p)
            elif p.is_file() and now - p.stat().st_mtime > 24 * 3600:  # runs/: results of a finished run
                p.unlink()
        except OSError:
            continue


# -- what the tests use ---------------------------------------------------------------------------


def _extract(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    if archive.name.endswith(".tar.zst"):
        sys.path.insert(0, str(ROOT / "corpus"))
        from unpack import unpack_archive

        unpack_archive(archive, dest)
        return
    with tarfile.open(archive, "r:*") as tar:
        tar.extractall(dest, filter="data")


def unpacked(archive: Path) -> Path:
    """The files of a corpus archive (.tar.zst or .tar.xz), unpacked once per archive content. Read-only."""
    digest = file_sha256(archive)
    return cached_at("unpacked", digest, {"archive": archive.name}, lambda tree: _extract(archive, tree))


def ingested_home(snapshots: list[tuple[str, Path]], *, sass: bool = True, via_cli: bool = False) -> Path:
    """A kdb home holding each (tag, archive) in order, ingested once per inputs and code. Read-only: open
    its catalog read-only (kdb diff/sql/show/tags/export/cat do); a test that writes takes `clone()`.

    With `via_cli`, each ingest runs as `python -m kdb ingest DIR --tag T --format json [--no-sass] -j 2`.
    Each ingest's summary (what `kdb ingest --format json` prints) is kept: see `summaries()`."""
    parts = _home_parts(snapshots, sass, via_cli)

    def build(tree: Path) -> None:
        caches = [(tag, unpacked(archive)) for tag, archive in snapshots]
        if via_cli:
            found = {}
            for tag, cache in caches:
                cmd = [sys.executable, "-m", "kdb", "--home", str(tree), "ingest", str(cache), "--tag", tag]
                cmd += ["--format", "json", "-j", "2", *([] if sass else ["--no-sass"])]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                if proc.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-3000:]}")
                found[tag] = json.loads(proc.stdout)
            (tree.parent / "summaries.json").write_text(json.dumps(found))
            return
        from kdb.analysis.model import AnalysisOptions
        from kdb.ingest.snapshot import IngestRequest, ingest
        from kdb.store.home import Home

        found = {}
        for tag, cache in caches:
            found[tag] = ingest(Home(tree), IngestRequest(cache, tag, options=AnalysisOptions(sass=sass))).__dict__
        (tree.parent / "summaries.json").write_text(json.dumps(found, default=str))

    return cached("homes", parts, build)


def _home_parts(snapshots: list[tuple[str, Path]], sass: bool, via_cli: bool) -> dict:
    return {
        "snapshots": [(tag, file_sha256(archive)) for tag, archive in snapshots],
        "sass": sass,
        "via_cli": via_cli,
        "code": code_version(ALL_CODE if via_cli else INGEST_CODE),
    }


def is_built(snapshots: list[tuple[str, Path]], *, sass: bool = True, via_cli: bool = False) -> bool:
    return (cache_root() / "homes" / key_of(_home_parts(snapshots, sass, via_cli)) / "stat.json").exists()


def summaries(home: Path) -> dict[str, dict]:
    """The ingest summaries of a cached home by tag (`problems`: what makes `kdb ingest` exit 1)."""
    return json.loads((home.parent / "summaries.json").read_text())


def clone(src: Path, dest: Path) -> Path:
    """A private, writable copy of a cached tree (copy-on-write where the file system can)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dest)], capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.copytree(src, dest, symlinks=True)
    return dest


def once_per_run(name: str, compute: Callable[[], object]) -> object:
    """compute() once per pytest run, its JSON result shared by every xdist worker of the run (a session
    fixture otherwise runs in each worker that needs it); without xdist, simply compute()."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return compute()
    base = cache_root() / "runs"
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{run}-{name}.json"
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            _prune(base)
            tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
            tmp.write_text(json.dumps(compute()))
            tmp.rename(path)
        return json.loads(path.read_text())


# -- the whole corpus, built in the background while the other tests run ----------------------------


def corpus_home_inputs() -> list[tuple[str, Path]]:
    """(tag, archive) of every corpus snapshot: the kernel suite, then the recompiled Inductor kernels."""
    sys.path.insert(0, str(ROOT / "bench"))
    import pairing_matrix

    snapshots = pairing_matrix.suite_snapshots() + pairing_matrix.inductor_snapshots()
    return [(snap.tag, snap.archive) for snap in snapshots]


def start_corpus_home_build() -> subprocess.Popen | None:
    """Build the corpus home in a process of its own (it waits on the entry's lock if another builds it),
    unless it is built already."""
    if is_built(corpus_home_inputs()):
        return None
    cache_root().mkdir(parents=True, exist_ok=True)
    log_path = cache_root() / f"corpus-home-build-{os.getpid()}.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "corpus-home"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc.log_path = log_path  # type: ignore[attr-defined]  (removed by conftest once the build succeeded)
    return proc


def main(argv: list[str]) -> int:
    import argparse
    import signal

    parser = argparse.ArgumentParser(description="Build or locate the test suite's cached corpus.")
    parser.add_argument("what", choices=["corpus-home", "unpack-all", "where"])
    args = parser.parse_args(argv)
    # a terminated build still removes its temporary folder (the `finally` of cached_at)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.what == "where":
        print(cache_root())
    elif args.what == "unpack-all":
        for _, archive in corpus_home_inputs():
            print(unpacked(archive))
    else:
        print(ingested_home(corpus_home_inputs()))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
