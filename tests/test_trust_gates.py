"""Issue 37, gates, tags, the API and like with like: each item reproduced on real corpus snapshots.

8.  A `--fail-on` rule over a figure a kernel's backend does not have (VGPRs of an NVIDIA kernel) fails closed
    (exit 8, naming the figure and the backend); an empty rule is a usage error, not a gate that never fires.
10. Tags follow one rule set wherever a new tag enters kdb; a name that is both a tag and a directory is refused
    by `kdb diff`; `kdb tags` fits the terminal.
11. The Python API exports its error classes, takes `fail_on` as one string, refuses a home that is a file, and
    words its errors with its own arguments, not the CLI's options.
13. Instruction counts are compared like with like: a side ingested --no-sass (PTX) against one with SASS is
    compared through the PTX both sides keep, and the assumption line says so.

Every test ends with `kdb verify` on the home it used: 0 problems.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import archive_of, load_manifest
from helpers import assert_verified, kdb

import kdb as kdb_package
from kdb import api
from kdb.capture.cache import default_tag
from kdb.errors import ExitCode
from kdb.store.home import Home
from kdb.store.spool import SpoolLayout
from kdb.store.transfer import transfer

NVIDIA_PAIR = ("t3.6.0-sm80", "t3.8.0-sm80")  # the same kernels compiled by two releases for one GPU
NVIDIA_SNAPSHOT = "t3.6.0-sm90"
AMD_RULES = ("vgpr:+1", "sgpr:+10%", "agpr:+1")  # register files only AMD GPUs have
BAD_TAGS = ("../x", "a/b", ".", "..", "*", "x?", "[x]", "-x", ".hidden", "a b", "", " x", "x\n", "é", "a" * 100_000)
GOOD_TAGS = ("t3.4.0-gfx942", "torch2.11+cu128", "nightly_2026-11-26", "run=7@host-a", "_x", "a" * 128)


@pytest.fixture
def nvidia_pair(cached_home, home_copy) -> Path:
    """A private copy of a home holding NVIDIA_PAIR under their names (--no-sass: register rules need no SASS)."""
    return home_copy(cached_home([(tag, archive_of(tag)) for tag in NVIDIA_PAIR], sass=False))


@pytest.fixture
def small_cache(unpack_snapshot, tmp_path) -> Path:
    """A cache of one real kernel folder of NVIDIA_PAIR[0]: what the tests ingest where the content does not matter."""
    folder = sorted(p for p in unpack_snapshot(NVIDIA_PAIR[0]).iterdir() if p.is_dir())[0]
    shutil.copytree(folder, tmp_path / "small" / folder.name)
    return tmp_path / "small"


def _one_line_error(r, code: ExitCode) -> str:
    assert r.code == code, (r.code, r.out[-500:], r.err)
    assert r.err.startswith("kdb: error: ") and len(r.err.splitlines()) == 1 and "Traceback" not in r.err, r.err
    return r.err


def _tags(capsys, home: Path) -> list[str]:
    return [t["tag"] for t in kdb(capsys, home, "tags", "--format", "json").json()]


# -- 8. gates that cannot fire --------------------------------------------------------------------------------
@pytest.mark.slow  # ~2 s: five diffs of two real snapshots
def test_an_amd_register_rule_on_nvidia_kernels_fails_closed(capsys, nvidia_pair) -> None:
    a, b = NVIDIA_PAIR
    rules = ",".join(AMD_RULES)
    table = kdb(capsys, nvidia_pair, "diff", a, b, "--fail-on", rules, "--no-pager")
    assert table.code == ExitCode.UNKNOWN == 8, table.out[-600:]  # was 0, "fired: none"
    doc = kdb(capsys, nvidia_pair, "diff", a, b, "--fail-on", rules, "--format", "json").json()
    paired = [k for k in doc["kernels"] if k["a_cache_key"] and k["b_cache_key"]]
    assert paired and {k["target"].split(":")[0] for k in paired} == {"cuda"}
    # NVIDIA kernels have registers per thread and no VGPR, SGPR or AGPR count
    assert all(k["metrics"]["vgpr_count"]["a"] is None and k["metrics"]["registers"]["a"] for k in paired)
    assert doc["unknown_rules"] == list(AMD_RULES) and doc["fired_rules"] == []
    for rule in AMD_RULES:
        figure = rule.split(":")[0].upper()
        reason = f"{rule}: cuda kernels have no {figure} count (registers:+N gates NVIDIA registers)"
        assert reason in doc["unknown_reasons"] and reason in table.out, (reason, table.out[-600:])
        assert [k["b_cache_key"] for k in doc["kernels"] if rule in k["unknown_rules"]] == [
            k["b_cache_key"] for k in paired
        ]
    assert f"fired: none; unknown: {', '.join(AMD_RULES)} on {len(paired)} kernels (" in table.out
    allowed = kdb(capsys, nvidia_pair, "diff", a, b, "--fail-on", rules, "--allow-unknown", "--no-pager")
    assert allowed.code == ExitCode.OK and "not gating: --allow-unknown" in allowed.out
    # The rule NVIDIA has is judged, as its definition says, on the registers the diff reports.
    grown = max(k["metrics"]["registers"]["delta"] for k in paired)
    assert grown > 0  # sm80 3.6.0 -> 3.8.0: some kernel needs more registers
    assert kdb(capsys, nvidia_pair, "diff", a, b, "--fail-on", f"registers:+{grown}").code == ExitCode.FINDINGS
    assert kdb(capsys, nvidia_pair, "diff", a, b, "--fail-on", f"registers:+{grown + 1}").code == ExitCode.OK
    assert_verified(capsys, nvidia_pair)


def test_an_empty_fail_on_rule_is_a_usage_error(capsys, nvidia_pair) -> None:
    a, b = NVIDIA_PAIR
    for value in ("", ",", " , ", "new-spills,", ",any-change"):
        err = _one_line_error(kdb(capsys, nvidia_pair, "diff", a, b, "--fail-on", value), ExitCode.USAGE)
        assert "empty rule" in err, (value, err)
    assert_verified(capsys, nvidia_pair)


# -- 10. one rule set for tags --------------------------------------------------------------------------------
@pytest.mark.slow  # ~2 s: every refused tag at each of the four places a tag enters
def test_every_new_tag_follows_one_rule_set(capsys, nvidia_pair, small_cache, tmp_path) -> None:
    cache = small_cache
    before = _tags(capsys, nvidia_pair)
    for tag in BAD_TAGS:
        err = _one_line_error(kdb(capsys, nvidia_pair, "ingest", str(cache), "--tag", tag, "-q"), ExitCode.USAGE)
        assert "invalid tag" in err and len(err) < 400, err  # a 100,000-character tag is quoted by its head only
        # capture holds KDB_CAPTURE_TAG to the same rules (it names folders of the spool)
        err = _one_line_error(kdb(capsys, nvidia_pair, "capture", "env", "--tag", tag), ExitCode.USAGE)
        assert "KDB_CAPTURE_TAG" in err and len(err) < 400, err
        with pytest.raises(api.UsageError, match="invalid tag"), kdb_package.open(nvidia_pair) as db:
            db.ingest(cache, tag)
        with pytest.raises(api.UsageError, match="invalid tag"):  # push/pull --as NEWTAG
            transfer(Home(nvidia_pair), Home(tmp_path / "other"), [NVIDIA_PAIR[0]], 1.0, as_tag=tag)
    assert _tags(capsys, nvidia_pair) == before and not (tmp_path / "other").exists()
    # Every tag the corpus, the capture default and these examples use is a tag
    for tag in (*load_manifest()["snapshots"], default_tag(), *GOOD_TAGS):
        assert SpoolLayout(tmp_path / "capture", tag).tag == tag
    r = kdb(capsys, nvidia_pair, "ingest", str(cache), "--tag", GOOD_TAGS[3], "-q", "--no-sass")
    assert r.code == ExitCode.OK, r.err
    assert _tags(capsys, nvidia_pair) == [*before, GOOD_TAGS[3]]
    assert_verified(capsys, nvidia_pair)


@pytest.mark.slow  # ~3 s: `kdb diff ./NAME` ingests the directory (nvdisasm included) into a temporary home
def test_a_name_that_is_both_a_tag_and_a_directory_is_refused(
    capsys, nvidia_pair, unpack_snapshot, tmp_path, monkeypatch
) -> None:
    a, b = NVIDIA_PAIR
    # In the working directory, a cache directory named like snapshot A: one real kernel folder of B
    folder = sorted(p for p in unpack_snapshot(b).iterdir() if p.is_dir())[0]
    shutil.copytree(folder, tmp_path / a / folder.name)
    monkeypatch.chdir(tmp_path)
    err = _one_line_error(kdb(capsys, nvidia_pair, "diff", a, b), ExitCode.USAGE)
    assert f"'{a}' is both a snapshot tag" in err and f"tag:{a}" in err and f"./{a}" in err, err
    _one_line_error(kdb(capsys, nvidia_pair, "report", a, b, "--output", str(tmp_path / "r.html")), ExitCode.USAGE)
    # tag:NAME is the snapshot, ./NAME the directory: each gives what that side alone gives
    tagged = kdb(capsys, nvidia_pair, "diff", f"tag:{a}", b, "--format", "json")
    assert tagged.code == ExitCode.OK, tagged.err
    doc = tagged.json()
    assert doc["a"]["ref"] == a and doc["a"]["kernels"] == load_manifest()["snapshots"][a]["kernel_count"]
    as_dir = kdb(capsys, nvidia_pair, "diff", f"./{a}", b, "--format", "json", "--min-match", "0")
    assert as_dir.code == ExitCode.OK, as_dir.err
    assert as_dir.json()["a"]["kernels"] == 1
    assert "unknown snapshot 'no-such'" in _one_line_error(
        kdb(capsys, nvidia_pair, "diff", "tag:no-such", b), ExitCode.TAG
    )
    assert_verified(capsys, nvidia_pair)


@pytest.mark.slow  # ~1 s of CPU: outside the inner loop's 60 s
def test_kdb_tags_fits_the_terminal(capsys, nvidia_pair, small_cache, monkeypatch) -> None:
    long_tag = GOOD_TAGS[3] + "-" + "x" * 30  # longer than any elided cell: shown whole all the same
    r = kdb(capsys, nvidia_pair, "ingest", str(small_cache), "--tag", long_tag, "-q", "--no-sass")
    assert r.code == ExitCode.OK, r.err
    monkeypatch.delenv("COLUMNS", raising=False)  # (pytest's workers may export one)
    wide = kdb(capsys, nvidia_pair, "tags").out  # a pipe without COLUMNS: every column, as wide as it is
    assert max(len(line) for line in wide.splitlines()) > 80
    for width in (60, 80, 120):
        monkeypatch.setenv("COLUMNS", str(width))
        out = kdb(capsys, nvidia_pair, "tags").out
        lines = out.splitlines()
        assert all(len(line) <= width for line in lines), (width, out)
        assert {line.split()[0] for line in lines[1:4]} == {*NVIDIA_PAIR, long_tag}, out
        elided = re.search(r"not shown at this width: \w+", out) is not None
        assert elided == (width < max(len(line) for line in wide.splitlines())), (width, out)
    assert_verified(capsys, nvidia_pair)


# -- 11. the Python API ---------------------------------------------------------------------------------------
@pytest.mark.slow  # ~1 s of CPU: outside the inner loop's 60 s
def test_the_api_exports_its_errors_and_words_them_for_python(capsys, nvidia_pair, small_cache, tmp_path) -> None:
    from kdb import errors

    for name in (
        "KdbError",
        "UsageError",
        "TagError",
        "InputError",
        "IntegrityError",
        "CatalogBusy",
        "UntrustedComparison",
        "ExitCode",
    ):
        assert getattr(api, name) is getattr(errors, name) and name in api.__all__ and name in api.__doc__
    a, b = NVIDIA_PAIR
    flag = re.compile(r"(?<![\w'-])--[a-z]")
    with kdb_package.open(nvidia_pair) as db:
        # one string is the CLI's one --fail-on value: a rule, or rules separated by commas
        one = db.diff(a, b, fail_on="new-spills")
        assert one.result.rules == db.diff(a, b, fail_on=["new-spills"]).result.rules
        assert [r.text for r in db.diff(a, b, fail_on="new-spills,any-change").result.rules] == [
            "new-spills",
            "any-change",
        ]
        assert db.diff(a, b, fail_on="vgpr:+1").exit_code == ExitCode.UNKNOWN
        raised = []
        for call in (
            lambda: db.diff(a, b, fail_on="no-such-rule"),
            lambda: db.diff(a, b, fail_on=[""]),
            lambda: db.diff(a, b, fail_on=","),
            lambda: db.diff(a, b, min_match=2),
            lambda: db.ingest(small_cache, a, sass=False),  # exists already
            lambda: db.ingest(small_cache, "../x"),
        ):
            with pytest.raises(api.KdbError) as info:
                call()
            raised.append(info.value)
        texts = [str(e) for e in raised]
        assert not [t for t in texts if flag.search(t)], texts  # no CLI option named
        assert "unknown fail_on rule 'no-such-rule'" in texts[0] and "'n'" not in texts[0]
        assert "empty rule" in texts[1] and "empty rule" in texts[2] and "min_match" in texts[3]
        assert isinstance(raised[4], api.TagError) and "replace=True" in texts[4]
        assert isinstance(raised[5], api.UsageError) and raised[5].exit_code == ExitCode.USAGE
        with pytest.raises(api.TagError):
            db.diff(a, "no-such-tag")
    # A home that is a regular file is no home: an error, in the API and the CLI alike, not an empty list
    a_file = tmp_path / "not-a-home"
    a_file.write_bytes(b"")
    with pytest.raises(api.UsageError, match="is not a directory"):
        kdb_package.open(a_file).snapshots()
    _one_line_error(kdb(capsys, a_file, "tags"), ExitCode.USAGE)
    assert a_file.read_bytes() == b""
    assert_verified(capsys, nvidia_pair)


# -- 13. like with like ---------------------------------------------------------------------------------------
KERNELS = ("register_hog_kernel", "attn_fwd_kernel", "add_kernel")  # spilling in a loop, a loop nest, none


@pytest.fixture
def sass_and_ptx(capsys, unpack_snapshot, tmp_path) -> tuple[Path, Path]:
    """(home, cache): a cache of one folder of each of KERNELS from a real sm_90 snapshot, stored as `ptx` by
    `kdb ingest --no-sass` (its PTX mix only), and the cache itself, which `kdb diff` ingests with SASS."""
    source = unpack_snapshot(NVIDIA_SNAPSHOT)
    cache = tmp_path / "cache"
    for name in KERNELS:
        folder = sorted(p.parent for p in source.glob(f"*/{name}.json"))[0]
        shutil.copytree(folder, cache / folder.name)
    home = tmp_path / "home"
    r = kdb(capsys, home, "ingest", str(cache), "--tag", "ptx", "--no-sass", "-q")
    assert r.code == ExitCode.OK, r.err
    return home, cache


@pytest.mark.slow  # ~5 s: each `kdb diff ptx DIR` ingests DIR with SASS (nvdisasm) into a temporary home
def test_sass_against_ptx_compares_like_with_like(capsys, cuda_bin, sass_and_ptx) -> None:
    home, cache = sass_and_ptx
    ptx = {
        r["cache_key"]: r
        for r in kdb(
            capsys, home, "sql", "SELECT cache_key, instr_source, instr_count FROM kernels", "-f", "json"
        ).json()
    }
    assert {r["instr_source"] for r in ptx.values()} == {"ptx"}
    # A: the snapshot ingested --no-sass (PTX); B: the same folders, which `kdb diff` ingests with SASS
    r = kdb(capsys, home, "diff", "ptx", str(cache), "--fail-on", "any-change", "--kernel", KERNELS[0], "-f", "json")
    assert r.code == ExitCode.OK, (r.code, r.err)  # was 1: any-change fired on identical folders
    doc = r.json()
    assert doc["fired_rules"] == [] and doc["summary"]["same"] == len(KERNELS) == doc["summary"]["kernels"]
    for k in doc["kernels"]:
        assert k["a_cache_key"] == k["b_cache_key"]  # the same folders: nothing changed
        counts = k["metrics"]["instr_count"]
        assert counts["a"] == counts["b"] == ptx[k["a_cache_key"]]["instr_count"]
        assert all(g["delta"] == 0 for g in k["mix_groups"].values()) and k["mix_mnemonics"] == {}
    # what was compared, and why: B has SASS, A PTX only (--no-sass)
    (line,) = [x for x in doc["assumptions"] if "compared as PTX on both sides" in x]
    assert line.startswith(f"cuda sm90: instruction counts and mix of {len(KERNELS)} kernels compared as PTX"), line
    assert "A (ptx): PTX (no SASS: skipped (--no-sass))" in line and re.search(r"B \([^)]*\): SASS\)$", line), line
    # the deep view's mix is the PTX of both sides too: every mnemonic equal, loop depths not compared
    (view,) = doc["deep"]
    assert view["mix"] and all(row["delta"] == 0 for row in view["mix"])
    assert sum(row["a"] for row in view["mix"]) == ptx[view["a_cache_key"]]["instr_count"]
    assert view["loop_known"] == {"a": False, "b": False}
    # the other way round, as a table: the same verdicts, the line said under the summary
    table = kdb(capsys, home, "diff", str(cache), "ptx", "--fail-on", "any-change", "--no-pager")
    assert table.code == ExitCode.OK, table.out[-600:]
    assert f"{len(KERNELS)} kernels: same {len(KERNELS)}, regressed 0" in table.out
    assert re.search(
        r"assumed: cuda sm90: .* compared as PTX on both sides.*\(A \([^)]*\): SASS; B \(ptx\): PTX", table.out
    )
    assert_verified(capsys, home)
