"""Unknown is an answer, never a silence: a Triton release kdb's tables do not hold, a GPU its occupancy
tables do not know, and a figure it could not compute are each said in one line in every output format,
and every --fail-on rule that meets an unknown figure fails closed (exit 8) unless --allow-unknown.

Every input is a real corpus cache, changed the way such a cache would differ: JSONs relabelled with a
release newer than kdb knows (and a default that release changed on every kernel), a processor renamed to
one no toolchain knows, a code object truncated.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import kdb

from kdb.errors import ExitCode
from kdb.ingest.snapshot import IngestRequest, ingest
from kdb.store.home import Home

BASE = "t3.8.0-gfx942"
NEW_TARGET = "t3.9.0-gfx1250"
FACT_RULES = ("occupancy-drop", "new-spills", "scratch-increase", "vgpr:+1", "sgpr:+1", "agpr:+1", "registers:+1")
FORMATS = ("table", "markdown", "csv", "json")


def _relabel(cache: Path, version: str) -> int:
    """Every kernel JSON says `version`; HIP's `schedule_hint` (a default the releases change) gets a new
    value on every kernel, as a release that changed its default would write. Returns kernels changed."""
    n = 0
    for path in sorted(cache.rglob("*.json")):
        if path.name.startswith("__grp__") or path.name.endswith(".autotune.json"):
            continue
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or "triton_version" not in doc:
            continue
        assert "schedule_hint" in doc, path  # the release's own JSON records the option
        doc["triton_version"] = version
        doc["schedule_hint"] = "kdb-test-new-default"
        path.write_text(json.dumps(doc))
        n += 1
    return n


def _rename_processor(cache: Path, old: str, new: str) -> int:
    """Rename the processor everywhere the compiler named it (JSON, code-object note, asm, IR): same length,
    so the ELF stays well formed. Returns files changed."""
    assert len(old) == len(new)
    n = 0
    for path in sorted(p for p in cache.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if old.encode() in data:
            path.write_bytes(data.replace(old.encode(), new.encode()))
            n += 1
    return n


def _truncate_code_object(cache: Path) -> str:
    """Cut the first kernel's `.hsaco` (sorted by folder) to 64 bytes: its resources become unreadable."""
    hsaco = sorted(p for p in cache.rglob("*.hsaco") if (p.parent / f"{p.stem}.json").exists())[0]
    hsaco.write_bytes(hsaco.read_bytes()[:64])
    return hsaco.parent.name


@pytest.fixture(scope="module")
def unknown_home(tmp_path_factory: pytest.TempPathFactory, unpack_snapshot) -> tuple[Path, dict]:
    home = tmp_path_factory.mktemp("unknown-home")
    work = tmp_path_factory.mktemp("unknown-caches")
    facts: dict = {}
    base = unpack_snapshot(BASE)
    ingest(Home(home), IngestRequest(base, "base"))
    for name, change in (
        ("relabelled", lambda c: _relabel(c, "3.10.0")),
        ("damaged", _truncate_code_object),
    ):
        cache = work / name
        shutil.copytree(base, cache)
        facts[name] = change(cache)
        ingest(Home(home), IngestRequest(cache, name))
    for name in ("gfx1250", "gfx1299"):
        cache = work / name
        shutil.copytree(unpack_snapshot(NEW_TARGET), cache)
        if name == "gfx1299":
            facts[name] = _rename_processor(cache, "gfx1250", "gfx1299")
        ingest(Home(home), IngestRequest(cache, name))
        ingest(Home(home), IngestRequest(cache, f"{name}-again"))
    return home, facts


def _outputs(capsys, home: Path, a: str, b: str, tmp_path: Path, *extra: str) -> dict[str, str]:
    out = {}
    for fmt in FORMATS:
        res = kdb(capsys, home, "diff", a, b, "--format", fmt, "--no-pager", *extra)
        assert res.code in (0, 1, 8), (fmt, res.code, res.err)
        out[fmt] = res.out
    page = tmp_path / f"{a}-{b}.html"
    res = kdb(capsys, home, "report", a, b, "--output", str(page))
    assert res.code == 0, res.err
    out["html"] = page.read_text()
    return out


def _assert_said(outputs: dict[str, str], pattern: str) -> None:
    missing = [fmt for fmt, text in outputs.items() if not re.search(pattern, text)]
    assert missing == [], (pattern, missing)


@pytest.mark.slow  # 5-17 s of CPU (bench/test_suite.py)
def test_a_release_newer_than_kdb_pairs_every_kernel_and_says_defaults_were_inferred(
    capsys, unknown_home, tmp_path
) -> None:
    home, facts = unknown_home
    assert facts["relabelled"] >= 40
    doc = kdb(capsys, home, "diff", "base", "relabelled", "--format", "json").json()
    unpaired = [k for k in doc["kernels"] if not (k["a_cache_key"] and k["b_cache_key"])]
    assert unpaired == []
    assert all(k["a_cache_key"] == k["b_cache_key"] for k in doc["kernels"])  # the same cache: same folders
    line = "B (relabelled): Triton 3.10.0 is newer than the releases kdb knows (newest 3.9.0): option defaults of hip gfx942 "
    assert [a for a in doc["assumptions"] if a.startswith(line)], doc["assumptions"]
    _assert_said(_outputs(capsys, home, "base", "relabelled", tmp_path), r"Triton 3\.10\.0 is newer than the releases")


@pytest.mark.slow  # outside the inner loop: 13 s on 2 cores (bench/test_suite.py)
def test_without_learning_the_relabelled_release_would_pair_nothing(unknown_home) -> None:
    """The learning is what pairs them: the table alone knows no 3.10.0 and only equal values pair."""
    from kdb.store.catalog import Catalog
    from kdb.triton.identity import options_compatible

    home, _ = unknown_home
    with Catalog.open(Home(home).catalog, read_only=True) as cat:
        a = {k["cache_key"]: k for k in cat.diffs.diff_kernels("base")}
        b = {k["cache_key"]: k for k in cat.diffs.diff_kernels("relabelled")}
    key = sorted(a)[0]
    oa, ob = json.loads(a[key]["identity_options"]), json.loads(b[key]["identity_options"])
    assert ob["triton_version"] == "3.10.0" and oa["values"]["schedule_hint"] != ob["values"]["schedule_hint"]
    assert options_compatible(oa, ob) == (False, ["schedule_hint"])


@pytest.mark.slow  # 5-17 s of CPU (bench/test_suite.py)
def test_every_rule_meeting_an_unknown_figure_fails_closed_with_exit_8(capsys, unknown_home) -> None:
    home, facts = unknown_home
    damaged = facts["damaged"]
    for rule in FACT_RULES:
        res = kdb(capsys, home, "diff", "base", "damaged", "--fail-on", rule, "--no-pager")
        assert res.code == ExitCode.UNKNOWN == 8, (rule, res.code, res.out[-400:])
        assert f"unknown: {rule} on 1 kernel" in res.out, rule
        doc = kdb(capsys, home, "diff", "base", "damaged", "--fail-on", rule, "--format", "json").json()
        assert doc["unknown_rules"] == [rule] and doc["fired_rules"] == []
        hit = [k for k in doc["kernels"] if k["unknown_rules"]]
        assert [k["b_cache_key"] for k in hit] == [damaged], rule
        assert "unknown in B" in hit[0]["reason"]
        allowed = kdb(capsys, home, "diff", "base", "damaged", "--fail-on", rule, "--allow-unknown", "--no-pager")
        assert allowed.code == 0, (rule, allowed.out[-300:])
        assert "not gating: --allow-unknown" in allowed.out


@pytest.mark.slow  # 5-17 s of CPU (bench/test_suite.py)
def test_a_fired_rule_still_exits_1_when_another_meets_an_unknown(capsys, unknown_home) -> None:
    home, _ = unknown_home
    res = kdb(capsys, home, "diff", "base", "damaged", "--fail-on", "any-change,new-spills", "--no-pager")
    assert res.code == ExitCode.FINDINGS, res.out[-300:]


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
def test_a_missing_figure_is_said_in_every_output(capsys, unknown_home, tmp_path) -> None:
    home, _ = unknown_home
    outputs = _outputs(capsys, home, "base", "damaged", tmp_path)
    _assert_said(outputs, r"B \(damaged\) hip gfx942: occupancy unknown for 1 kernel \(hsaco: ")
    assert outputs["csv"].startswith("# kdb assumed: ")


@pytest.mark.slow  # outside the inner loop: 16 s on 2 cores (bench/test_suite.py)
def test_a_processor_no_toolchain_knows_is_said_and_never_invented(capsys, unknown_home, tmp_path) -> None:
    home, facts = unknown_home
    assert facts["gfx1299"] >= 40  # JSON, code objects, asm and IR all renamed
    shown = kdb(capsys, home, "sql", "SELECT DISTINCT arch FROM kernels WHERE tag = 'gfx1299'", "--format", "json")
    assert [r["arch"] for r in json.loads(shown.out)] == ["gfx1299"]
    outputs = _outputs(capsys, home, "gfx1299", "gfx1299-again", tmp_path)
    _assert_said(outputs, r"hip gfx1299: (launch )?occupancy unknown for \d+ kernels")
    doc = json.loads(outputs["json"])
    assert any("kdb's table of Triton 3.9.0 has no hip gfx1299 defaults" in a for a in doc["assumptions"])


@pytest.mark.slow  # outside the inner loop: its home takes 11 s of ingests when no slow test has built it
def test_known_snapshots_assume_nothing(capsys, unknown_home) -> None:
    home, _ = unknown_home
    doc = kdb(capsys, home, "diff", "base", "base", "--format", "json", "--fail-on", "occupancy-drop").json()
    assert doc["assumptions"] == [] and doc["unknown_rules"] == []
