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
from conftest import ROOT
from corpus_cache import once_per_run

MIN_FOUND = 0.995


@pytest.fixture(scope="session")
def same_target_diffs(corpus_home, corpus_snapshots) -> list[tuple[pm.Snapshot, pm.Snapshot, dict]]:
    """`kdb diff A B --format json` of every same-target pair of the corpus, older release as A."""
    pairs = pm.pairs_to_check(corpus_snapshots)
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


def _assert_scores(scores: list[pm.PairScore], minimum_true_pairs: int) -> None:
    true_pairs = sum(s.true_pairs for s in scores)
    found = sum(s.found for s in scores)
    assert true_pairs >= minimum_true_pairs, true_pairs  # the evidence really spans the corpus
    assert [(s.a, s.b, w) for s in scores for w in s.wrong] == []
    assert found / true_pairs >= MIN_FOUND, [(s.a, s.b, s.missed) for s in scores if s.missed]


def test_corpus_covers_every_release_and_real_inductor_kernels(corpus_snapshots) -> None:
    releases = Counter(s.target for s in corpus_snapshots if s.group == "suite")
    assert releases["hip:gfx942"] >= 10 and releases["hip:gfx950"] >= 8, releases
    for target in ("hip:gfx90a", "hip:gfx1100", "hip:gfx1201", "cuda:sm80", "cuda:sm90"):
        assert releases[target] >= 3, (target, releases)
    inductor = Counter(s.group for s in corpus_snapshots if s.group.startswith("inductor:"))
    assert inductor and all(n >= 2 for n in inductor.values()), inductor


def test_every_release_pair_of_every_target_pairs_the_same_configs(corpus_snapshots, same_target_diffs) -> None:
    scores = [pm.score(a, b, doc) for a, b, doc in same_target_diffs]
    _report(scores, corpus_snapshots, "pairing-same-target")
    _assert_scores(scores, minimum_true_pairs=3000)
    inductor = [s for s, (a, _, _) in zip(scores, same_target_diffs, strict=True) if a.group != "suite"]
    _assert_scores(inductor, minimum_true_pairs=300)


def test_leave_one_release_out_pairs_every_release_as_if_kdb_knew_it(corpus_home: Path, corpus_snapshots) -> None:
    """Each release in turn removed from kdb's option-defaults table (a test hook): every same-target pair
    involving it, on every corpus target and the Inductor kernels, still pairs >= 99.5% with 0 wrong, because
    kdb learns what a release applied from the snapshots themselves (kdb/triton/defaults.py)."""
    from kdb.triton.defaults import RELEASE_DEFAULTS

    results = pm.leave_one_release_out(corpus_home, corpus_snapshots)
    text = pm.format_leave_one_out(results, corpus_snapshots)
    out = ROOT / "bench" / ".data"
    out.mkdir(parents=True, exist_ok=True)
    (out / "pairing-leave-one-out.md").write_text(text + "\n")
    print(text)
    assert sorted(results) == sorted(RELEASE_DEFAULTS)
    for release, scores in results.items():
        assert scores, release  # the corpus holds every release of the table
        _assert_scores(scores, minimum_true_pairs=30)


def test_across_targets_pairs_the_same_configs(corpus_home: Path, corpus_snapshots) -> None:
    pairs = pm.pairs_to_check(corpus_snapshots, across_targets=True)
    scores = pm.run_matrix(corpus_home, pairs, across_targets=True, runner=pm.in_process_runner)
    _report(scores, corpus_snapshots, "pairing-across-targets")
    _assert_scores(scores, minimum_true_pairs=1000)


def test_a_self_diff_pairs_every_kernel_with_itself(corpus_home: Path, corpus_snapshots) -> None:
    """Inductor writes one kernel into several modules: the identity ties such twins, and the tie-breakers
    (identical code, source file) must still pair every folder with itself."""
    for snap in corpus_snapshots:
        doc = pm.diff_documents(corpus_home, [(snap, snap)], runner=pm.in_process_runner)[0]
        unpaired = [k for k in doc["kernels"] if not (k.get("a_cache_key") and k.get("b_cache_key"))]
        wrong = [k for k in doc["kernels"] if k.get("a_cache_key") and k["a_cache_key"] != k.get("b_cache_key")]
        assert unpaired == [] and wrong == [], (snap.tag, unpaired[:3], wrong[:3])
