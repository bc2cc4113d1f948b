"""Shared fixtures: the real corpus of Triton caches, unpacked and ingested once into a cache outside the
repository (tests/corpus_cache.py), and the markers that say what a test needs and costs.

Markers (registered in pyproject.toml) come from the fixtures a test uses, so a new test is marked by what
it asks for (FIXTURE_MARKS below); a test that needs a tool without a fixture says so with the marker itself
(`@pytest.mark.llvm`). A test marked with a tool that is missing is skipped with one line naming the package
that provides it, or fails when $KDB_REQUIRE_ALL_TOOLS is set (CI: nothing may skip for a missing install)."""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import pytest

# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set (the development machine sets it): without it
# pytest rewrites the asserts of every test module again in every xdist worker of every run (~13 s of CPU a
# worker for the inner loop), and every `python -m kdb` a test starts compiles kdb's modules from source.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
sys.path.insert(0, str(CORPUS))

import corpus_cache  # noqa: E402  (tests/corpus_cache.py: the unpacked/ingested cache outside the repository)
import sampling  # noqa: E402  (tests/sampling.py: what an oracle check runs on, everything in the sweep)
from unpack import unpack_archive  # noqa: E402,F401  (corpus/unpack.py, also used by the quick start)

sys.path.insert(0, str(ROOT / "bench"))
import pairing_matrix  # noqa: E402  (bench/pairing_matrix.py: corpus snapshots with their build records)

# -- the tools some tests use as oracles or drivers -------------------------------------------------

LLVM_BIN = Path("/usr/lib/llvm-22/bin")
CHROMIUM = Path("/usr/bin/chromium")
REQUIRE_ALL_TOOLS = "KDB_REQUIRE_ALL_TOOLS"
# The one line of the README beside the test command, said by every skip for a missing system package.
SYSTEM_PACKAGES = "apt-get install llvm-22 lld-22 chromium postgresql-15 strace"


def nvidia_tool_dir() -> Path | None:
    """The NVIDIA oracles' folder (cuobjdump and nvdisasm), looked up without kdb's code: $KDB_CUDA_BIN, else
    NVIDIA's tool wheels (`kdb[nvidia]`, part of `.[test]`), else the triton wheel's copies."""
    candidates = [Path(os.environ["KDB_CUDA_BIN"])] if os.environ.get("KDB_CUDA_BIN") else []
    for package, subdirs in (("nvidia", ("cu13/bin", "cuda_cuobjdump/bin")), ("triton", ("backends/nvidia/bin",))):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for location in (spec.submodule_search_locations or []) if spec else []:
            candidates += [Path(location) / sub for sub in subdirs]
    for c in candidates:
        if (c / "cuobjdump").is_file() and (c / "nvdisasm").is_file():
            return c
    return None


def _pg_found() -> bool:
    from pgserver import find_bin_dir

    return find_bin_dir() is not None


def _browser_found() -> bool:
    return CHROMIUM.exists() and importlib.util.find_spec("playwright") is not None


# marker -> (is the tool there?, the one-line reason a test that needs it is skipped)
TOOLS = {
    "llvm": (
        lambda: (LLVM_BIN / "llvm-readelf").exists() and (LLVM_BIN / "llvm-objdump").exists(),
        f"needs LLVM 22's llvm-readelf/llvm-objdump: apt-get install llvm-22 (all tools: {SYSTEM_PACKAGES})",
    ),
    "browser": (
        _browser_found,
        f"needs Debian's Chromium: apt-get install chromium (all tools: {SYSTEM_PACKAGES})",
    ),
    "postgres": (
        _pg_found,
        f"needs PostgreSQL's initdb/pg_ctl/postgres: apt-get install postgresql-15 (all tools: {SYSTEM_PACKAGES})",
    ),
    "strace": (
        lambda: shutil.which("strace") is not None,
        f"needs strace: apt-get install strace (all tools: {SYSTEM_PACKAGES})",
    ),
    "triton": (
        lambda: importlib.util.find_spec("triton") is not None and Path("/usr/lib/llvm-22/bin/ld.lld").exists(),
        f"needs Triton and LLVM 22's ld.lld: pip install triton==3.6.0; apt-get install lld-22 (all tools: {SYSTEM_PACKAGES})",
    ),
    "nvidia_tools": (
        lambda: nvidia_tool_dir() is not None,
        "needs cuobjdump/nvdisasm: pip install -e '.[test]' (kdb[nvidia]) or set KDB_CUDA_BIN",
    ),
}
# Fixtures that mark every test using them (directly or through another fixture).
FIXTURE_MARKS = {
    "corpus_home": ("slow", "corpus_home"),
    "pg": ("postgres", "slow"),
    "llvm_bin": ("llvm",),
    "cuda_bin": ("nvidia_tools",),
}
# A test run once per corpus snapshot is in the fast tier for these only (the oldest and a current code object
# of each backend, PAIR's upgrade); for every other snapshot it is `slow`. So the fast tier does not grow with
# the corpus, and every such test still runs on every snapshot in the full run.
FAST_SNAPSHOTS = {"t3.3.1-gfx942", "t3.4.0-gfx942", "t3.1.0-gfx90a", "t2.3.1-sm80", "t3.4.0-sm90"}
# Markers bench/test_suite.py reports times by.
MARKER_NAMES = ("slow", "sweep", "corpus_home", "llvm", "browser", "postgres", "strace", "triton", "nvidia_tools")
# Markers that put a test outside the fast tier (`-m "not slow"` runs no external tool: cuobjdump per kernel is slow too).
SLOW_WITH = ("llvm", "browser", "postgres", "strace", "nvidia_tools", "corpus_home", "triton")


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    available = {name: check() for name, (check, _) in TOOLS.items()}
    snapshots = set(load_manifest()["snapshots"])
    require = bool(os.environ.get(REQUIRE_ALL_TOOLS))
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for fixture, marks in FIXTURE_MARKS.items():
            if fixture in fixtures:
                for mark in marks:
                    item.add_marker(mark)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(isinstance(v, str) and v in snapshots and v not in FAST_SNAPSHOTS for v in params.values()):
            item.add_marker("slow")
        names = {m.name for m in item.iter_markers()}
        if names & set(SLOW_WITH) and "slow" not in names:
            item.add_marker("slow")
        for tool in names & set(TOOLS):
            if not available[tool]:
                reason = TOOLS[tool][1]
                if require:
                    item.add_marker(pytest.mark.missing_tool(reason))
                else:
                    item.add_marker(pytest.mark.skip(reason=reason))
    # Tests kept for the sweep alone (`sweep`) run only there: python bench/sweep.py ($KDB_SWEEP=1).
    if not sampling.sweeping():
        swept = [item for item in items if item.get_closest_marker("sweep")]
        if swept:
            config.hook.pytest_deselected(items=swept)
            items[:] = [item for item in items if not item.get_closest_marker("sweep")]
    # Tests on the whole ingested corpus last: every xdist worker runs the rest while the corpus home is built.
    items.sort(key=lambda item: item.get_closest_marker("corpus_home") is not None)


_BUILDER: list = []  # the background build of the corpus home started by this process, if any


def pytest_collection_finish(session: pytest.Session) -> None:
    """When the run needs the whole ingested corpus and it is not cached yet, build it in a process of its own
    from the start: the tests that need no corpus home run meanwhile (they are ordered first)."""
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("corpus_home") for item in session.items):
        builder = corpus_cache.start_corpus_home_build()
        if builder is not None:
            _BUILDER.append(builder)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Wait for the background build (another xdist worker may be waiting for it); stop it when interrupted."""
    for builder in _BUILDER:
        if builder.poll() is None and exitstatus == pytest.ExitCode.INTERRUPTED:
            builder.terminate()
        if builder.wait() == 0:
            builder.log_path.unlink(missing_ok=True)


def pytest_runtest_setup(item: pytest.Item) -> None:
    missing = item.get_closest_marker("missing_tool")
    if missing:
        pytest.fail(f"${REQUIRE_ALL_TOOLS} is set and a tool is missing: {missing.args[0]}", pytrace=False)


# $KDB_TEST_TIMES names a folder: each test's wall and CPU seconds (this process and the processes it waited
# for: tools, kdb subprocesses), setup and teardown included, one JSON line per test and worker
# (bench/test_suite.py sums them per test file and marker).
TIMES_ENV = "KDB_TEST_TIMES"


def _cpu_seconds() -> float:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    folder = os.environ.get(TIMES_ENV)
    if not folder:
        yield
        return
    wall, cpu = time.monotonic(), _cpu_seconds()
    yield
    row = {
        "test": item.nodeid,
        "file": item.nodeid.split("::", 1)[0],
        "markers": sorted({m.name for m in item.iter_markers()} & set(MARKER_NAMES)),
        "wall_s": round(time.monotonic() - wall, 3),
        "cpu_s": round(_cpu_seconds() - cpu, 3),
    }
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(Path(folder) / f"times-{worker}-{os.getpid()}.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def pg():
    """A real PostgreSQL server for the shared (DuckLake) catalog, one per test module; its absence is a missing
    install step (.ci/run installs postgresql-15), never a skip."""
    from pgserver import PgServer, find_bin_dir

    if find_bin_dir() is None:
        pytest.fail("PostgreSQL is not installed (.ci/run installs postgresql-15)")
    server = PgServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def llvm_bin() -> Path:
    """LLVM 22's bin folder (llvm-readelf, llvm-objdump): marks the test `llvm`."""
    return LLVM_BIN


@pytest.fixture(scope="session")
def cuda_bin() -> Path:
    """cuobjdump/nvdisasm's folder: marks the test `nvidia_tools`."""
    found = nvidia_tool_dir()
    assert found is not None  # the marker skipped the test otherwise
    return found


# -- the cache outside the repository -------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def cache_guard():
    """Every shared cache entry this process handed out is unchanged at the end of the session."""
    yield
    problems = corpus_cache.check_untouched()
    assert problems == [], "\n".join(problems)


def load_manifest() -> dict:
    return json.loads((CORPUS / "manifest.json").read_text())


def snapshot_names() -> list[str]:
    return sorted(load_manifest()["snapshots"])


def compiled_kernels(root: Path, binary_suffix: str) -> list[Path]:
    """Code objects (`.hsaco` / `.cubin`) of an unpacked snapshot that sit beside their kernel's JSON, sorted."""
    found = sorted(p for p in root.rglob(f"*{binary_suffix}") if (p.parent / f"{p.stem}.json").exists())
    assert found, f"{root}: no {binary_suffix} kernels"
    return found


def archive_of(name: str) -> Path:
    return CORPUS / load_manifest()["snapshots"][name]["archive"]


@pytest.fixture(scope="session")
def corpus_manifest() -> dict:
    return load_manifest()


@pytest.fixture(scope="session")
def unpack_snapshot():
    """Return a function NAME -> Path of the snapshot's unpacked cache, shared READ-ONLY by every test and run
    (unpacked once per archive content; copy it, e.g. shutil.copytree, to change it)."""
    manifest = load_manifest()

    def unpack(name: str) -> Path:
        return corpus_cache.unpacked(CORPUS / manifest["snapshots"][name]["archive"])

    return unpack


@pytest.fixture(scope="session")
def unpacked_archive():
    """Return a function ARCHIVE (.tar.zst/.tar.xz path) -> its unpacked files, shared READ-ONLY."""
    return corpus_cache.unpacked


@pytest.fixture(scope="session")
def cached_home():
    """Return a function [(tag, archive), ...] -> a kdb home holding them, built once per inputs and code and
    shared READ-ONLY (keyword arguments: sass=False for --no-sass, via_cli=True to ingest through the CLI)."""
    return corpus_cache.ingested_home


@pytest.fixture
def home_copy(tmp_path):
    """Return a function HOME -> a private writable copy of a cached home, under tmp_path."""
    count = iter(range(1 << 30))

    def copy(home: Path) -> Path:
        return corpus_cache.clone(home, tmp_path / f"home-copy-{next(count)}")

    return copy


@pytest.fixture
def ingested_copy(home_copy):
    """Return a function ([(tag, snapshot name or archive path)], sass=True) -> a private, writable copy of the
    home that `kdb ingest DIR --tag TAG [--no-sass]` of each in turn leaves (DIR: the shared unpacked copy),
    each of which exited 0 (no problem recorded). Cached once per inputs and kdb version; copying takes
    milliseconds where ingesting takes seconds."""

    def make(inputs: list[tuple[str, str | Path]], sass: bool = True) -> Path:
        shared = corpus_cache.ingested_home(
            [(tag, what if isinstance(what, Path) else archive_of(what)) for tag, what in inputs], sass=sass
        )
        problems = {tag: s["problem_list"] for tag, s in corpus_cache.summaries(shared).items() if s["problems"]}
        assert problems == {}
        return home_copy(shared)

    return make


@pytest.fixture(scope="session")
def corpus_snapshots() -> list[pairing_matrix.Snapshot]:
    """Every snapshot of the corpus with its build record: the kernel suite and the recompiled Inductor kernels."""
    return pairing_matrix.suite_snapshots() + pairing_matrix.inductor_snapshots()


@pytest.fixture(scope="session")
def corpus_home() -> Path:
    """One kdb home holding every snapshot of the corpus, each tagged by its name: built once per corpus content
    and kdb version, shared READ-ONLY (marks the test `slow`)."""
    return corpus_cache.ingested_home(corpus_cache.corpus_home_inputs())


PAIR = ("t3.3.1-gfx942", "t3.4.0-gfx942")


@pytest.fixture(scope="session")
def pair_home() -> Path:
    """A kdb home holding the two snapshots of PAIR (a Triton 3.3.1 -> 3.4.0 upgrade on gfx942), shared READ-ONLY."""
    return corpus_cache.ingested_home([(tag, archive_of(tag)) for tag in PAIR])
