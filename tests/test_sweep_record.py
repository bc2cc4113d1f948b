"""The recorded sweep (bench/results/sweep.json) covers today's source, and the sample holds every stratum.

The README's test command checks each oracle on a sample (tests/sampling.py); the evidence that every kernel,
pair and release agrees with its oracle is the sweep's record. It is only evidence for the source it was made
on: these tests fail, naming the command, when a covered file changed since.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import pytest
import sampling
from conftest import CORPUS, ROOT, load_manifest

sys.path.insert(0, str(ROOT / "bench"))
import sweep  # noqa: E402  (bench/sweep.py)


def _record() -> dict:
    assert sweep.RECORD.exists(), f"no recorded sweep at {sweep.RECORD}: run {sweep.COMMAND}"
    return json.loads(sweep.RECORD.read_text())


def test_recorded_sweep_covers_the_current_source() -> None:
    stale = sweep.stale_files(_record())
    assert stale == [], f"the recorded sweep does not cover {len(stale)} changed files: run {sweep.COMMAND}"


def test_recorded_sweep_passed_with_every_item_of_every_check() -> None:
    record = _record()
    assert record["passed"] and record["exit"] == 0, record["mismatches"][:5]
    assert record["mismatches"] == []
    # a test may skip for a reason of its own (a release without the feature); for a missing tool it fails
    # instead ($KDB_REQUIRE_ALL_TOOLS=1 in the sweep)
    assert record["tests"]["failed"] == 0, record["tests"]
    assert record["tests"]["passed"] > 0
    assert record["test_files"] == sweep.swept_tests()
    assert record["items_checked"] == record["items_total"] > 0
    assert all(c["checked"] == c["total"] for c in record["checks"].values())
    assert record["source_sha256"] == sweep.source_digest(record["files"])
    assert not any(v.startswith("missing") for v in record["tools"].values()), record["tools"]


def test_a_changed_covered_file_makes_the_record_stale() -> None:
    record = _record()
    changed = dict(record["files"])
    first = sorted(changed)[0]
    changed[first] = "0" * 64
    assert sweep.stale_files({**record, "files": changed}) == [first]
    missing = {k: v for k, v in record["files"].items() if k != first}
    assert sweep.stale_files({**record, "files": missing}) == [first]


def test_the_sweep_covers_kdb_and_every_sampling_test() -> None:
    files = set(sweep.covered_files())
    assert "kdb/analysis/amd/hsaco.py" in files and "corpus/manifest.json" in files
    sampled = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "tests").glob("test_*.py")
        if "sampling." in p.read_text() or "sampled(" in p.read_text()
    }
    assert {"tests/test_loops_amd.py", "tests/test_loops_nvidia.py", "tests/test_amd_analysis.py"} <= sampled
    assert sampled - {"tests/test_sweep_record.py"} <= set(sweep.swept_tests())
    assert len(sweep.swept_tests()) >= 5


def _records_by_snapshot() -> dict[str, list[dict]]:
    out = {}
    for name, entry in load_manifest()["snapshots"].items():
        out[name] = json.loads((CORPUS / entry["records"]).read_text())
    return out


def test_the_sample_holds_every_release_target_and_family(monkeypatch) -> None:
    monkeypatch.delenv(sampling.SWEEP_ENV, raising=False)
    for seed in ("a", "b", "c"):
        monkeypatch.setenv(sampling.SEED_ENV, seed)
        sampling.seed.cache_clear()
        for name, records in _records_by_snapshot().items():
            chosen = sampling.sample(
                records, id_of=lambda r: r["cache_key"], stratum_of=lambda r: r["config"].split("/")[0], what=name
            )
            assert {r["config"].split("/")[0] for r in chosen} == {r["config"].split("/")[0] for r in records}
            assert len(chosen) < len(records), name  # a sample, not everything
    sampling.seed.cache_clear()


def test_the_rotating_slices_cover_every_kernel(monkeypatch) -> None:
    """Each kernel lies in exactly one bucket, and each bucket is some commit's slice."""
    buckets: dict[int, set[str]] = defaultdict(set)
    keys = [r["cache_key"] for records in _records_by_snapshot().values() for r in records]
    for key in keys:
        buckets[sampling.bucket_of(key)].add(key)
    assert sorted(buckets) == list(range(sampling.ROTATING_BUCKETS))
    assert set().union(*buckets.values()) == set(keys)
    commits = set()
    for n in range(200):
        monkeypatch.setenv(sampling.SEED_ENV, f"commit-{n}")
        sampling.seed.cache_clear()
        commits.add(sampling.commit_bucket())
    sampling.seed.cache_clear()
    assert commits == set(range(sampling.ROTATING_BUCKETS))


def test_the_sweep_sees_everything(monkeypatch) -> None:
    monkeypatch.setenv(sampling.SWEEP_ENV, "1")
    items = list(range(50))
    assert sampling.sample(items, id_of=str, stratum_of=lambda i: i % 3, what="numbers") == items


@pytest.mark.parametrize("name", ["triton_poi_fused_add_0", "triton_red_fused_sum_3", "matmul_kernel"])
def test_family_of_an_inductor_or_suite_kernel(name: str) -> None:
    assert sampling.family("not-a-recorded-key", name) == name.rsplit("_fused", 1)[0]
