"""Pairing across releases, judged against the build records: every pair of releases of every target.

The records (corpus/records, corpus/inductor/amd/records) say which config made which cache folder;
kdb never reads them. bench/pairing_matrix.py holds the scoring; these tests assert the general
property over the whole corpus (every pair of snapshots, both directions of time where it matters),
not a list of cases.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import pairing_matrix as pm  # noqa: E402

MIN_FOUND = 0.995


@pytest.fixture(scope="session")
def corpus_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[pm.Snapshot]]:
    """One kdb home holding every snapshot of the corpus (kernel suite and recompiled Inductor kernels)."""
    snapshots = pm.suite_snapshots() + pm.inductor_snapshots()
    home = tmp_path_factory.mktemp("pairing") / "home"
    pm.ingest_all(home, snapshots, tmp_path_factory.mktemp("pairing-caches"))
    return home, snapshots


@pytest.fixture(scope="session")
def same_target_diffs(corpus_home) -> list[tuple[pm.Snapshot, pm.Snapshot, dict]]:
    home, snapshots = corpus_home
    pairs = pm.pairs_to_check(snapshots)
    return [(a, b, doc) for (a, b), doc in zip(pairs, pm.diff_documents(home, pairs), strict=True)]


def _report(scores: list[pm.PairScore], snapshots: list[pm.Snapshot], name: str) -> str:
    text = pm.format_matrix(scores, snapshots)
    out = ROOT / "bench" / ".data"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text + "\n")
    print(text)
    return text


def test_corpus_covers_every_release_and_the_inductor_kernels(corpus_home) -> None:
    _, snapshots = corpus_home
    releases = Counter(s.target for s in snapshots if s.group == "suite")
    assert releases["hip:gfx942"] >= 10 and releases["hip:gfx950"] >= 8, releases
    for target in ("hip:gfx90a", "hip:gfx1100", "hip:gfx1201", "cuda:80", "cuda:90"):
        assert releases[target] >= 3, (target, releases)
    inductor = Counter(s.group for s in snapshots if s.group.startswith("inductor:"))
    assert inductor and all(n >= 2 for n in inductor.values()), inductor


def test_every_release_pair_of_every_target_pairs_the_same_configs(corpus_home, same_target_diffs) -> None:
    _, snapshots = corpus_home
    scores = [pm.score(a, b, doc) for a, b, doc in same_target_diffs]
    _report(scores, snapshots, "pairing-same-target")
    true_pairs = sum(s.true_pairs for s in scores)
    found = sum(s.found for s in scores)
    wrong = [(s.a, s.b, w) for s in scores for w in s.wrong]
    assert true_pairs > 3000, true_pairs  # the evidence really is every pair of releases
    assert wrong == []
    assert found / true_pairs >= MIN_FOUND, [(s.a, s.b, s.missed) for s in scores if s.missed]


def test_across_targets_pairs_the_same_configs(corpus_home) -> None:
    home, snapshots = corpus_home
    pairs = pm.pairs_to_check(snapshots, across_targets=True)
    scores = pm.run_matrix(home, pairs, across_targets=True)
    _report(scores, snapshots, "pairing-across-targets")
    true_pairs = sum(s.true_pairs for s in scores)
    assert true_pairs > 1000, true_pairs
    assert [(s.a, s.b, w) for s in scores for w in s.wrong] == []
    assert sum(s.found for s in scores) / true_pairs >= MIN_FOUND, [(s.a, s.b, s.missed) for s in scores if s.missed]


def test_a_self_diff_pairs_every_kernel_with_itself(corpus_home) -> None:
    """Inductor writes one kernel into several modules and can compile it with two toolchains: the
    identity ties them, the tie-breakers must still pair every folder with itself."""
    home, snapshots = corpus_home
    for snap in snapshots:
        if snap.group == "suite":
            continue
        doc = pm.diff_documents(home, [(snap, snap)])[0]
        unpaired = [k for k in doc["kernels"] if not (k.get("a_cache_key") and k.get("b_cache_key"))]
        wrong = [k for k in doc["kernels"] if k.get("a_cache_key") and k["a_cache_key"] != k.get("b_cache_key")]
        assert unpaired == [] and wrong == [], (snap.tag, unpaired[:3], wrong[:3])
