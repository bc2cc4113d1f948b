"""`kdb toolchain`, `kdb replay` and `kdb bisect` on real corpus snapshots, compiled for real by Triton 3.6.0 (the
test extra's Triton: the interpreter running the tests is the toolchain).

The oracle of a replay is the real compile: a snapshot replayed under its own release must give every figure of the
snapshot, and one replayed under the next release the figures of that release's real compile (corpus/records say
which config made which folder on both sides). The whole matrix (every snapshot, own and next release, AMD and
NVIDIA) is bench/replay_matrix.py's, recorded in bench/results/replay_matrix.json; these run a stratified sample.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sampling
from conftest import CORPUS, archive_of
from helpers import kdb_subprocess

from kdb.replay import toolchains
from kdb.replay.bisect import BISECT_FIGURES
from kdb.replay.run import PROVENANCE_NAME, ReplayRequest, replay
from kdb.store.catalog import Catalog
from kdb.store.home import Home

pytestmark = [pytest.mark.triton, pytest.mark.slow]

# The interpreter running the tests has the test extra's Triton: it is the toolchain of that release.
TEST_RELEASE = "3.6.0"
OWN = ("t3.6.0-gfx942", "t3.6.0-sm90")
# (replayed snapshot, the real compile of the next release the corpus holds for its target)
NEXT = (("t3.5.1-gfx942", "t3.6.0-gfx942"), ("t3.5.1-gfx950", "t3.6.0-gfx950"))
# A user's value equal to its release's default cannot be told from the default itself (a cache records the
# value, not who chose it): the replay applies the new release's default. The corpus's one such config:
# `wpe1` asks waves_per_eu=1, 3.5.1's default; 3.6.0's default is 0 (kdb/triton/release_defaults.json).
AT_OLD_DEFAULT = {"matmul/bf16/m128n128k64/w8/s2/wpe1/nonk16/kpack2"}


def _installed_release() -> str:
    import triton

    return str(triton.__version__)


@pytest.fixture
def chain_root(tmp_path: Path) -> Path:
    """A local home whose one toolchain is the interpreter running the tests."""
    assert _installed_release() == TEST_RELEASE, "the test extra pins the Triton these tests compile with"
    root = tmp_path / "local"
    toolchains.add(root, TEST_RELEASE, sys.executable)
    return root


def _configs(snapshot: str) -> dict[str, str]:
    return {r["cache_key"]: r["config"] for r in json.loads((CORPUS / "records" / f"{snapshot}.json").read_text())}


def _sampled_keys(home: Path, tag: str) -> list[str]:
    with Catalog.open(home / "catalog.duckdb", read_only=True) as catalog:
        rows = catalog.queries.kernel_rows(tag, "*")
    return [r["cache_key"] for r in sampling.catalog_rows(rows, tag)]


def _figures(home: Path, tag: str) -> dict[str, dict]:
    with Catalog.open(home / "catalog.duckdb", read_only=True) as catalog:
        return catalog.queries.kernel_figures(tag, BISECT_FIGURES)


def _stored(home: Path, tag: str, cache_key: str, suffix: str) -> bytes:
    """The kernel's file ending in `suffix`, as stored."""
    with Catalog.open(home / "catalog.duckdb", read_only=True) as catalog:
        rows = [r for r in catalog.queries.replay_sources(tag) if r["cache_key"] == cache_key]
    (row,) = rows
    (f,) = [f for f in row["files"] if f["name"].endswith(suffix)]
    return Home(home).store.get(f["hash"], f["size"])


@pytest.mark.parametrize("snapshot", OWN)
def test_a_replay_under_its_own_release_gives_every_figure_of_the_snapshot(
    snapshot, cached_home, home_copy, chain_root
):
    home = home_copy(cached_home([(snapshot, archive_of(snapshot))]))
    keys = _sampled_keys(home, snapshot)
    outcome = replay(Home(home), chain_root, ReplayRequest(snapshot, TEST_RELEASE, "again", workers=2, cache_keys=keys))
    assert outcome.failed == []
    assert sorted(outcome.mapping) == sorted(keys)
    before, after = _figures(home, snapshot), _figures(home, "again")
    for key, folder in outcome.mapping.items():
        assert after[folder] == before[key], key
        # the same compiler on the same TTIR with the same options: the same code, byte for byte (a cubin's debug
        # line table holds what ptxas finds of the kernel's source file on disk, absent here: its PTX is compared)
        suffix = ".hsaco" if snapshot.split("-")[-1].startswith("gfx") else ".ptx"
        assert _stored(home, "again", folder, suffix) == _stored(home, snapshot, key, suffix), key
    with Catalog.open(home / "catalog.duckdb", read_only=True) as catalog:
        labels = catalog.queries.get_snapshot("again")["labels"]
    assert labels == {"replay_of": snapshot, "replay_triton": TEST_RELEASE}


@pytest.mark.parametrize(("snapshot", "real"), NEXT)
def test_a_replay_under_the_next_release_gives_the_figures_of_its_real_compile(
    snapshot, real, cached_home, home_copy, chain_root
):
    home = home_copy(cached_home([(snapshot, archive_of(snapshot)), (real, archive_of(real))]))
    keys = _sampled_keys(home, snapshot)
    outcome = replay(Home(home), chain_root, ReplayRequest(snapshot, TEST_RELEASE, "next", workers=2, cache_keys=keys))
    assert outcome.failed == []
    # the same config's folder in the real compile: the build records say which config made which folder
    by_config = {config: key for key, config in _configs(real).items()}
    source_configs = _configs(snapshot)
    replayed, compiled = _figures(home, "next"), _figures(home, real)
    checked = 0
    for key, folder in outcome.mapping.items():
        config = source_configs[key]
        if config in AT_OLD_DEFAULT or config not in by_config:
            continue
        assert replayed[folder] == compiled[by_config[config]], config
        checked += 1
    assert checked >= len(keys) - 1


def test_a_kernel_that_cannot_be_replayed_is_a_problem_of_the_new_snapshot(unpack_snapshot, tmp_path, chain_root):
    """Real folders damaged: one kernel's TTIR cut in half, another's TTIR removed; a third is whole."""
    cache = tmp_path / "cache"
    source = unpack_snapshot("t3.6.0-gfx942")
    folders = sorted(
        p for p in source.iterdir() if (p / "add_kernel.json").exists() or (p / "softmax_kernel.json").exists()
    )
    for folder in folders[:3]:
        shutil.copytree(folder, cache / folder.name)
    cut, gone, whole = sorted(cache.iterdir())[:3]
    (ttir,) = cut.glob("*.ttir")
    ttir.write_bytes(ttir.read_bytes()[: ttir.stat().st_size // 2])
    for f in gone.glob("*.ttir"):
        f.unlink()
    home = tmp_path / "home"
    ingested = kdb_subprocess(home, "ingest", str(cache), "--tag", "damaged")
    assert ingested.code == 1 and "function body is not closed" in ingested.out  # kdb's own reader saw it too
    assert kdb_subprocess(home, "toolchain", "add", TEST_RELEASE, "--python", sys.executable).code == 0
    done = kdb_subprocess(home, "replay", "damaged", "--triton", TEST_RELEASE, "--tag", "again", "--format", "json")
    assert done.code == 1, done.err
    assert "Traceback" not in done.err
    document = done.json()
    assert document["replayed"] == 1 and document["kernels"] == 3
    reasons = {f["cache_key"]: f["reason"] for f in document["failed"]}
    assert set(reasons) == {cut.name, gone.name}
    assert reasons[gone.name].startswith("no TTIR stored")
    assert "error" in reasons[cut.name].lower()  # the compiler's own first error line
    query = "SELECT cache_key, reason FROM problems WHERE tag = 'again' AND stage = 'replay'"
    rows = kdb_subprocess(home, "sql", query, "--format", "json").json()
    assert {r["cache_key"]: r["reason"] for r in rows} == reasons
    assert str(tmp_path) not in reasons[cut.name] and f"{cut.name}/{ttir.name}" in reasons[cut.name]
    provenance = json.loads(kdb_subprocess(home, "cat", "again", PROVENANCE_NAME).out)
    assert {k["from"]: k["folder"] is not None for k in provenance["kernels"]} == {
        cut.name: False,
        gone.name: False,
        whole.name: True,
    }


def test_toolchains_are_added_listed_and_removed_and_refuse_what_they_cannot_use(tmp_path):
    home = tmp_path / "home"
    wrong = kdb_subprocess(home, "toolchain", "add", "3.7.1", "--python", sys.executable)
    assert wrong.code == 2 and f"has Triton {TEST_RELEASE}, not 3.7.1" in wrong.err and "Traceback" not in wrong.err
    assert kdb_subprocess(home, "toolchain", "add", TEST_RELEASE, "--python", sys.executable).code == 0
    listed = kdb_subprocess(home, "toolchain", "list", "--format", "json").json()
    assert [(c["version"], c["python"], c["managed"]) for c in listed] == [(TEST_RELEASE, sys.executable, False)]
    missing = kdb_subprocess(home, "replay", "x", "--triton", "3.9.0", "--tag", "y")
    assert missing.code == 2 and "kdb toolchain add 3.9.0" in missing.err
    assert kdb_subprocess(home, "toolchain", "rm", TEST_RELEASE).code == 0
    assert kdb_subprocess(home, "toolchain", "list", "--format", "json").json() == []


def test_a_toolchain_kdb_cannot_install_says_what_to_run(tmp_path):
    """No index reachable: pip fails, and kdb says in one line how to register an environment made by hand."""
    env = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_INDEX": "", "PIP_FIND_LINKS": "", "PIP_RETRIES": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "kdb", "--home", str(tmp_path / "home"), "toolchain", "add", "3.7.1"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, **env, "PIP_EXTRA_INDEX_URL": "", "PIP_CONSTRAINT": "", "PIP_TIMEOUT": "2"},
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "kdb toolchain add 3.7.1 --python" in lines[0]
    assert not (tmp_path / "home" / "toolchains" / "t3.7.1").exists()


def test_bisect_names_the_release_whose_replay_first_changed_each_figure(cached_home, home_copy, chain_root, tmp_path):
    a, b = NEXT[0]
    home = home_copy(cached_home([(a, archive_of(a)), (b, archive_of(b))]))
    shutil.copy(chain_root / toolchains.REGISTRY_NAME, home / toolchains.REGISTRY_NAME)
    done = kdb_subprocess(home, "bisect", a, b, "--kernel", "softmax_kernel", "--format", "json", "-j", "2")
    assert done.code == 0, done.err
    document = done.json()
    assert document["releases"] == [TEST_RELEASE] and document["b_replayed"]
    # the same kernels replayed directly: each figure that differs from A names the one release, with its value
    direct = replay(
        Home(home),
        home,
        ReplayRequest(a, TEST_RELEASE, "direct", workers=2, cache_keys=[k["a_cache_key"] for k in document["kernels"]]),
    )
    start, replayed = _figures(home, a), _figures(home, "direct")
    assert document["kernels"]
    for k in document["kernels"]:
        now = replayed[direct.mapping[k["a_cache_key"]]]
        expected = {f for f in BISECT_FIGURES if now[f] != start[k["a_cache_key"]][f]}
        named = {c["figure"]: c for c in k["changes"] if c["first_release"] is not None}
        assert set(named) == expected
        for figure, change in named.items():
            assert change["first_release"] == TEST_RELEASE and change["after"] == now[figure]


# The bisect of the sweep: A and B four releases apart, every step a release whose wheel kdb installs itself
# (`kdb toolchain add VERSION`: pip, from the configured index) into a home kept with the test cache.
BISECT_CHAIN = ("t3.3.1-gfx942", "t3.6.0-gfx942", ("3.4.0", "3.5.1", "3.6.0"))
TOOLCHAIN_CACHE = Path.home() / ".cache" / "kdb-tests" / "toolchains"


@pytest.mark.sweep
def test_bisect_across_four_releases_names_the_release_of_a_direct_replay_at_each(cached_home, home_copy):
    a, b, steps = BISECT_CHAIN
    home = home_copy(cached_home([(a, archive_of(a)), (b, archive_of(b))]))
    for release in steps:
        toolchains.add(TOOLCHAIN_CACHE, release)  # made once, then reused
    shutil.copy(TOOLCHAIN_CACHE / toolchains.REGISTRY_NAME, home / toolchains.REGISTRY_NAME)
    done = kdb_subprocess(home, "bisect", a, b, "--format", "json", "-j", "2", "--timeout", "300")
    assert done.code == 0, done.err
    document = done.json()
    assert document["releases"] == list(steps)
    keys = [k["a_cache_key"] for k in document["kernels"]]
    assert len(keys) >= 30
    # each release replayed directly, the first change per figure found here, independently of kdb's bisect
    start = _figures(home, a)
    direct = {}
    for release in steps:
        outcome = replay(Home(home), home, ReplayRequest(a, release, f"at-{release}", workers=2, cache_keys=keys))
        direct[release] = (outcome.mapping, _figures(home, f"at-{release}"))
    for k in document["kernels"]:
        key = k["a_cache_key"]
        expected = {}
        for figure in BISECT_FIGURES:
            for release in steps:
                mapping, figures = direct[release]
                if key in mapping and figures[mapping[key]][figure] != start[key][figure]:
                    expected[figure] = release
                    break
        named = {c["figure"]: c["first_release"] for c in k["changes"] if c["first_release"] is not None}
        assert named == expected, (k["name"], key)
