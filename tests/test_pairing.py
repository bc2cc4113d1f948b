"""Pairing across releases, judged against the build records: every pair of releases of every target.

The records (corpus/records, corpus/inductor/amd/records) say which config made which cache folder;
kdb never reads them. bench/pairing_matrix.py holds the scoring (`python bench/pairing_matrix.py`
prints the same matrix); these tests assert the general property over the whole corpus (every pair of
snapshots of a target, and across targets of a backend), not a list of cases.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pairing_matrix as pm
import pytest
import sampling
from conftest import ROOT
from corpus_cache import once_per_run

MIN_FOUND = 0.995
Pair = tuple[pm.Snapshot, pm.Snapshot]


def sampled(pairs: list[Pair], what: str, buckets: int = sampling.ROTATING_BUCKETS) -> list[Pair]:
    """Every pair in the sweep; otherwise pairs that hold every snapshot (every release x target x group) at
    least once, rotating with the commit, and the commit's slice (tests/sampling.py)."""
    return sampling.covering(
        pairs,
        members=lambda p: (p[0].tag, p[1].tag),
        id_of=lambda p: f"{p[0].tag}->{p[1].tag}",
        what=what,
        buckets=buckets,
    )


def true_pairs(pairs: list[Pair]) -> int:
    """The folder pairs the build records say exist, over `pairs` (no diff needed)."""
    return sum(pm.score(a, b, {"kernels": []}).true_pairs for a, b in pairs)


@pytest.fixture(scope="session")
def same_target_pairs(corpus_snapshots) -> list[Pair]:
    return pm.pairs_to_check(corpus_snapshots)


@pytest.fixture(scope="session")
def same_target_diffs(corpus_home, same_target_pairs) -> list[tuple[pm.Snapshot, pm.Snapshot, dict]]:
    """`kdb diff A B --format json` of every same-target pair of the corpus, older release as A: not sampled,
    as tests/test_verdicts.py asserts that the corpus holds each ranking case (kernels that start spilling,
    spills that move out of loops, occupancy drops) somewhere among them (112 diffs in process, ~40 s)."""
    pairs = same_target_pairs
    docs = once_per_run(  # computed by one xdist worker of the run, read by the others
        "same-target-diffs", lambda: pm.diff_documents(corpus_home, pairs, runner=pm.in_process_runner)
    )
    return [(a, b, doc) for (a, b), doc in zip(pairs, docs, strict=True)]


def _report(scores: list[pm.PairScore], snapshots: list[pm.Snapshot], name: str) -> str:
    """The matrix, printed and kept under bench/.data/ (what the closing note quotes)."""
    text = pm.format_matrix(scores, snapshots)
    out = ROOT / "bench" / ".data"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text + "\n")
    print(text)
    return text


def _assert_scores(scores: list[pm.PairScore], minimum_true_pairs: int, population: list[Pair]) -> None:
    """`scores`: the pairs diffed (all of `population` in the sweep, a sample of it otherwise)."""
    assert true_pairs(population) >= minimum_true_pairs  # the evidence really spans the corpus
    checked = sum(s.true_pairs for s in scores)
    found = sum(s.found for s in scores)
    if sampling.sweeping():
        assert checked >= minimum_true_pairs, checked
    assert checked > 0
    assert [(s.a, s.b, w) for s in scores for w in s.wrong] == []
    assert found / checked >= MIN_FOUND, [(s.a, s.b, s.missed) for s in scores if s.missed]


def test_corpus_covers_every_release_and_real_inductor_kernels(corpus_snapshots) -> None:
    releases = Counter(s.target for s in corpus_snapshots if s.group == "suite")
    assert releases["hip:gfx942"] >= 10 and releases["hip:gfx950"] >= 8, releases
    for target in ("hip:gfx90a", "hip:gfx1100", "hip:gfx1201", "cuda:sm80", "cuda:sm90"):
        assert releases[target] >= 3, (target, releases)
    inductor = Counter(s.group for s in corpus_snapshots if s.group.startswith("inductor:"))
    assert inductor and all(n >= 2 for n in inductor.values()), inductor


def test_every_release_pair_of_every_target_pairs_the_same_configs(
    corpus_snapshots, same_target_pairs, same_target_diffs
) -> None:
    scores = [pm.score(a, b, doc) for a, b, doc in same_target_diffs]
    _report(scores, corpus_snapshots, "pairing-same-target")
    _assert_scores(scores, minimum_true_pairs=3000, population=same_target_pairs)
    inductor = [s for s, (a, _, _) in zip(scores, same_target_diffs, strict=True) if a.group != "suite"]
    population = [(a, b) for a, b in same_target_pairs if a.group != "suite"]
    _assert_scores(inductor, minimum_true_pairs=300, population=population)


def test_leave_one_release_out_pairs_every_release_as_if_kdb_knew_it(corpus_home: Path, corpus_snapshots) -> None:
    """Each release in turn removed from kdb's option-defaults table (a test hook): every same-target pair
    involving it, on every corpus target and the Inductor kernels, still pairs >= 99.5% with 0 wrong, because
    kdb learns what a release applied from the snapshots themselves (kdb/triton/defaults.py)."""
    from kdb.triton.defaults import RELEASE_DEFAULTS, version_tuple

    every_pair = pm.pairs_to_check(corpus_snapshots)
    results = pm.leave_one_release_out(
        corpus_home, corpus_snapshots, pairs=sampled(every_pair, "same-target pairs, each release forgotten")
    )
    text = pm.format_leave_one_out(results, corpus_snapshots)
    out = ROOT / "bench" / ".data"
    out.mkdir(parents=True, exist_ok=True)
    (out / "pairing-leave-one-out.md").write_text(text + "\n")
    print(text)
    assert sorted(results) == sorted(RELEASE_DEFAULTS)
    for release, scores in results.items():
        assert scores, release  # the corpus holds every release of the table
        wanted = version_tuple(release)
        population = [(a, b) for a, b in every_pair if wanted in (version_tuple(a.release), version_tuple(b.release))]
        _assert_scores(scores, minimum_true_pairs=30, population=population)


def test_across_targets_pairs_the_same_configs(corpus_home: Path, corpus_snapshots) -> None:
    every_pair = pm.pairs_to_check(corpus_snapshots, across_targets=True)
    pairs = sampled(every_pair, "across-target pairs", buckets=64)  # 536 pairs: a thin rotating slice
    scores = pm.run_matrix(corpus_home, pairs, across_targets=True, runner=pm.in_process_runner)
    _report(scores, corpus_snapshots, "pairing-across-targets")
    _assert_scores(scores, minimum_true_pairs=1000, population=every_pair)


def test_a_self_diff_pairs_every_kernel_with_itself(corpus_home: Path, corpus_snapshots) -> None:
    """Inductor writes one kernel into several modules: the identity ties such twins, and the tie-breakers
    (identical code, source file) must still pair every folder with itself."""
    for snap in corpus_snapshots:
        doc = pm.diff_documents(corpus_home, [(snap, snap)], runner=pm.in_process_runner)[0]
        unpaired = [k for k in doc["kernels"] if not (k.get("a_cache_key") and k.get("b_cache_key"))]
        wrong = [k for k in doc["kernels"] if k.get("a_cache_key") and k["a_cache_key"] != k.get("b_cache_key")]
        assert unpaired == [] and wrong == [], (snap.tag, unpaired[:3], wrong[:3])
