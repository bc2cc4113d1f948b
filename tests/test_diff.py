"""`kdb diff` on the real corpus: matching against the build records, figures, exit codes, formats."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
from conftest import CORPUS, ROOT, load_manifest, snapshot_names
from helpers import kdb, python_json_text

from kdb.errors import ExitCode

READELF = Path("/usr/lib/llvm-22/bin/llvm-readelf")
SCHEMA = json.loads((ROOT / "docs" / "diff-json-schema.json").read_text())
# (A, B, across targets): the upgrade pairs first, then cross-target pairs of the corpus.
PAIRS = [
    ("t3.3.1-gfx942", "t3.4.0-gfx942", False),
    ("t3.6.0-gfx950", "t3.7.1-gfx950", False),
    ("t3.4.0-sm90", "t3.6.0-sm80", True),
    ("t3.1.0-gfx90a", "t3.3.1-gfx942", True),
]


def available_pairs() -> list[tuple[str, str, bool]]:
    names = set(snapshot_names())
    return [p for p in PAIRS if p[0] in names and p[1] in names]


def pair_id(p: tuple[str, str, bool]) -> str:
    return f"{p[0]}->{p[1]}{'(across)' if p[2] else ''}"


def records(name: str) -> dict[str, str]:
    entry = load_manifest()["snapshots"][name]
    return {r["config"]: r["cache_key"] for r in json.loads((CORPUS / entry["records"]).read_text())}


def diff_json(capsys, home: Path, *args: str) -> tuple[int, dict]:
    r = kdb(capsys, home, "diff", *args, "--format", "json")
    assert r.code in (0, 1), r.err
    doc = json.loads(r.out)
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    # orjson writes it; the text is the one Python's own encoder writes for the same document
    assert r.out == python_json_text(doc)
    return r.code, doc


def paired(doc: dict) -> set[tuple[str, str]]:
    return {(k["a_cache_key"], k["b_cache_key"]) for k in doc["kernels"] if k["status"] in ("matched", "changed")}


# -- matching against the records -------------------------------------------------------------------
@pytest.mark.parametrize("pair", available_pairs(), ids=pair_id)
def test_every_config_in_both_records_is_matched_to_its_folder_pair(pair, corpus_home, capsys):
    a, b, across = pair
    _, doc = diff_json(capsys, corpus_home, a, b, *(["--across-targets"] if across else []))
    ra, rb = records(a), records(b)
    expected = {(ra[c], rb[c]) for c in set(ra) & set(rb)}
    got = paired(doc)
    # A folder the build reused for two configs can only be paired once: the other config's folder is
    # reported ambiguous, naming its counterpart.
    count_b: dict[str, int] = {}
    for _, fb in expected:
        count_b[fb] = count_b.get(fb, 0) + 1
    ambiguous = {(k["a_cache_key"], c) for k in doc["kernels"] if k["status"] == "ambiguous" for c in k["candidates"]}
    missing = expected - got
    for fa, fb in missing:
        assert count_b[fb] > 1 and (fa, fb) in ambiguous, f"expected pair {fa} -> {fb} not matched"
    wrong = got - expected
    assert not wrong, f"wrongly matched: {sorted(wrong)}"
    with capsys.disabled():
        print(
            f"\n{pair_id(pair)}: matched {len(expected & got)}/{len(expected)} configs in both records, "
            f"{len(wrong)} wrong, match rate {doc['match_rate']:.2f}, summary {doc['summary']}"
        )


@pytest.mark.parametrize("name", snapshot_names())
def test_snapshot_against_itself_has_no_change(name, corpus_home, capsys):
    code, doc = diff_json(capsys, corpus_home, name, name, "--fail-on", "any-change")
    assert code == 0
    s = doc["summary"]
    assert s["changed"] == s["only_a"] == s["only_b"] == s["ambiguous"] == 0
    assert s["matched"] == doc["a"]["kernels"] == load_manifest()["snapshots"][name]["kernel_count"]
    assert all(k["a_cache_key"] == k["b_cache_key"] and k["first_changed_stage"] is None for k in doc["kernels"])
    assert doc["fired_rules"] == [] and doc["trusted"]


# -- figures ----------------------------------------------------------------------------------------
NOTE_KEYS = {
    ".vgpr_count": "vgpr_count",
    ".agpr_count": "agpr_count",
    ".sgpr_count": "sgpr_count",
    ".vgpr_spill_count": "vgpr_spill_count",
    ".sgpr_spill_count": "sgpr_spill_count",
    ".private_segment_fixed_size": "scratch_bytes",
    ".group_segment_fixed_size": "lds_static",
}


def readelf_notes(hsaco: Path) -> dict[str, int]:
    """The kernel-level keys of the AMDGPU metadata note, parsed from `llvm-readelf --notes`."""
    out = subprocess.run([str(READELF), "--notes", str(hsaco)], capture_output=True, text=True, check=True).stdout
    facts = {}
    for line in out.splitlines():
        m = re.match(r"^ {4}(\.[a-z_]+):\s+(\d+)\s*$", line)  # kernel map keys: 4 spaces (args are deeper)
        if m and m.group(1) in NOTE_KEYS:
            facts[NOTE_KEYS[m.group(1)]] = int(m.group(2))
    return facts


def amd_pair() -> tuple[str, str, bool]:
    for p in available_pairs():
        if "gfx950" in p[0] and "gfx950" in p[1]:
            return p
    for p in available_pairs():
        if "gfx" in p[0] and "gfx" in p[1]:
            return p
    pytest.skip("no AMD pair in the manifest")


@pytest.mark.llvm
def test_figures_equal_catalog_and_hsaco_notes(corpus_home, unpack_snapshot, capsys):
    a, b, across = amd_pair()
    _, doc = diff_json(capsys, corpus_home, a, b, *(["--across-targets"] if across else []))
    cols = ["cache_key", "name", *NOTE_KEYS.values(), "occupancy", "instr_count", "shared", "code_size"]
    catalog = {}
    for tag in (a, b):
        r = kdb(
            capsys, corpus_home, "sql", f"SELECT {', '.join(cols)} FROM kernels WHERE tag = '{tag}'", "--format", "json"
        )
        assert r.code == 0, r.err
        catalog[tag] = {row["cache_key"]: row for row in r.json()}
    checked = 0
    for k in doc["kernels"]:
        if k["status"] not in ("matched", "changed"):
            continue
        for side, tag in (("a", a), ("b", b)):
            key = k[f"{side}_cache_key"]
            row = catalog[tag][key]
            for metric in [*NOTE_KEYS.values(), "occupancy", "instr_count", "shared", "code_size"]:
                assert k["metrics"][metric][side] == row[metric], (tag, key, metric)
            notes = readelf_notes(unpack_snapshot(tag) / key / f"{k['name']}.hsaco")
            assert notes, key
            for metric, value in notes.items():
                assert k["metrics"][metric][side] == value, (tag, key, metric)
        for m in k["metrics"].values():
            if m["a"] is not None and m["b"] is not None:
                assert m["delta"] == m["b"] - m["a"]
        checked += 1
    assert checked >= 20


# -- --fail-on ---------------------------------------------------------------------------------------
def starts_spilling(doc: dict) -> list[dict]:
    def spills(m: dict, side: str) -> int:
        return (m["vgpr_spill_count"][side] or 0) + (m["sgpr_spill_count"][side] or 0)

    return [k for k in doc["kernels"] if k["metrics"] and spills(k["metrics"], "a") == 0 < spills(k["metrics"], "b")]


def spill_pair(capsys, home: Path) -> tuple[str, str, bool, dict, dict]:
    """The first (pair, direction) of the corpus in which a paired kernel starts spilling."""
    for a, b, across in available_pairs():
        for x, y in ((a, b), (b, a)):
            _, doc = diff_json(capsys, home, x, y, *(["--across-targets"] if across else []))
            hits = starts_spilling(doc)
            if hits:
                return x, y, across, doc, hits[0]
    pytest.skip("no pair of the corpus has a kernel that starts spilling")


def test_fail_on_new_spills(corpus_home, unpack_snapshot, tmp_path, capsys):
    a, b, across, _doc, kernel = spill_pair(capsys, corpus_home)
    flag = ["--across-targets"] if across else []
    r = kdb(capsys, corpus_home, "diff", a, b, *flag, "--fail-on", "new-spills")
    assert r.code == ExitCode.FINDINGS, r.err
    assert "new-spills" in r.out
    # The one kernel alone, as two cache directories (this also exercises DIR arguments): 1 one way, 0 back.
    dir_a, dir_b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(unpack_snapshot(a) / kernel["a_cache_key"], dir_a / kernel["a_cache_key"])
    shutil.copytree(unpack_snapshot(b) / kernel["b_cache_key"], dir_b / kernel["b_cache_key"])
    code, one = diff_json(capsys, corpus_home, str(dir_a), str(dir_b), *flag, "--fail-on", "new-spills")
    assert code == ExitCode.FINDINGS and one["fired_rules"] == ["new-spills"]
    assert one["kernels"][0]["fired_rules"] == ["new-spills"]
    code, back = diff_json(capsys, corpus_home, str(dir_b), str(dir_a), *flag, "--fail-on", "new-spills")
    assert code == 0 and back["fired_rules"] == [] and back["summary"]["changed"] == 1
    with capsys.disabled():
        m = kernel["metrics"]
        print(
            f"\nspill pair: {a} -> {b}{' (across targets)' if across else ''}: {kernel['name']} "
            f"{kernel['a_cache_key']} -> {kernel['b_cache_key']}: vgpr spills {m['vgpr_spill_count']['a']} -> "
            f"{m['vgpr_spill_count']['b']}, scratch {m['scratch_bytes']['a']} -> {m['scratch_bytes']['b']}"
        )


def test_register_rules_and_unknown_rule(corpus_home, capsys):
    a, b, across = available_pairs()[0]
    flag = ["--across-targets"] if across else []
    _, doc = diff_json(capsys, corpus_home, a, b, *flag)
    growth = [
        k["metrics"]["vgpr_count"]["delta"]
        for k in doc["kernels"]
        if k["metrics"] and k["metrics"]["vgpr_count"]["delta"] is not None
    ]
    top = max(growth)
    assert top > 0  # the first pair has kernels whose VGPR count grew: the rule must fire at that growth
    assert diff_json(capsys, corpus_home, a, b, *flag, "--fail-on", f"vgpr:+{top}")[0] == 1
    assert diff_json(capsys, corpus_home, a, b, *flag, "--fail-on", f"vgpr:+{top + 1}")[0] == 0
    assert diff_json(capsys, corpus_home, a, b, *flag, "--fail-on", "vgpr:+1000%")[0] == 0
    r = kdb(capsys, corpus_home, "diff", a, b, "--fail-on", "vgpr-up")
    assert r.code == ExitCode.USAGE and "unknown --fail-on rule" in r.err and "Traceback" not in r.err


def test_untrusted_comparison_exits_2(corpus_home, capsys):
    names = snapshot_names()
    targets = {n: load_manifest()["snapshots"][n]["target"] for n in names}
    other = [(x, y) for x in names for y in names if targets[x] != targets[y]]
    if not other:
        pytest.skip("one target only")
    x, y = other[0]
    r = kdb(capsys, corpus_home, "diff", x, y)
    assert r.code == ExitCode.USAGE and "--across-targets" in r.err
    r = kdb(capsys, corpus_home, "diff", x, y, "--across-targets", "--min-match", "1.01")
    assert r.code == ExitCode.USAGE


# -- formats ----------------------------------------------------------------------------------------
def test_formats_and_dir_argument(corpus_home, unpack_snapshot, capsys, monkeypatch):
    a, b, across = available_pairs()[0]
    flag = ["--across-targets"] if across else []
    _, doc = diff_json(capsys, corpus_home, a, b, *flag)
    assert len(doc["kernels"]) == sum(
        doc["summary"][s] for s in ("matched", "changed", "only_a", "only_b", "ambiguous")
    )
    # every kernel of both sides appears exactly once
    a_keys = [k["a_cache_key"] for k in doc["kernels"] if k["a_cache_key"]]
    b_keys = [k["b_cache_key"] for k in doc["kernels"] if k["b_cache_key"]]
    assert len(a_keys) == len(set(a_keys)) == doc["a"]["kernels"]
    assert len(b_keys) == len(set(b_keys)) == doc["b"]["kernels"]

    monkeypatch.setenv("COLUMNS", "80")
    table = kdb(capsys, corpus_home, "diff", a, b, *flag)
    lines = table.out.splitlines()
    # the summary names every status (it wraps at the terminal's width: read it whole)
    summary = " ".join(line.strip() for line in lines[1:4])
    assert re.match(
        r"^\d+ kernels: same \d+, regressed \d+, improved \d+, mixed \d+, neutral \d+, only in A \d+, "
        r"only in B \d+, ambiguous \d+",
        summary,
    ), lines[:4]
    assert all(len(line) <= 80 for line in lines[2:]), "every line fits COLUMNS, never wrapped"
    monkeypatch.delenv("COLUMNS")

    md = kdb(capsys, corpus_home, "diff", a, b, *flag, "--format", "markdown").out.splitlines()
    header = next(i for i, line in enumerate(md) if line.startswith("| status"))
    assert re.match(r"^\|(---\|)+$", md[header + 1])
    assert md[header].count("|") == md[header + 1].count("|") == md[header + 2].count("|")

    rows = list(csv.DictReader(io.StringIO(kdb(capsys, corpus_home, "diff", a, b, *flag, "--format", "csv").out)))
    assert len(rows) == len(doc["kernels"]) and "vgpr_count_delta" in rows[0]

    # TAG against DIR: the directory is ingested into a temporary home, never into this one.
    before = kdb(capsys, corpus_home, "tags", "--format", "json").json()
    _, via_dir = diff_json(capsys, corpus_home, a, str(unpack_snapshot(b)), *flag)
    assert paired(via_dir) == paired(doc) and via_dir["summary"] == doc["summary"]
    assert kdb(capsys, corpus_home, "tags", "--format", "json").json() == before
    r = kdb(capsys, corpus_home, "diff", a, "no-such-tag-or-dir")
    assert r.code == ExitCode.TAG


def test_kernel_deep_view(corpus_home, capsys):
    a, b, across = available_pairs()[0]
    flag = ["--across-targets"] if across else []
    _, doc = diff_json(capsys, corpus_home, a, b, *flag, "--kernel", "matmul*")
    assert doc["deep"] and all(v["name"] == "matmul_kernel" for v in doc["deep"])
    changed = [v for v in doc["deep"] if v["b_cache_key"] and v["a_cache_key"]]
    assert any(v["triton_json_diff"] for v in changed)
    assert any(v["isa_diff"].startswith("---") for v in changed)
    assert all("/var/tmp/" not in v["isa_diff"] for v in changed)
    # the side-by-side mix loses no instruction: each column adds up to that side's instruction
    # count (the count itself is checked against llvm-objdump in test_amd_analysis)
    counts = {
        (r["tag"], r["cache_key"]): r["instr_count"]
        for r in kdb(
            capsys,
            corpus_home,
            "sql",
            f"SELECT tag, cache_key, instr_count FROM kernels WHERE tag IN ('{a}', '{b}')",
            "--format",
            "json",
        ).json()
    }
    for v in changed:
        for side, tag in (("a", a), ("b", b)):
            assert sum(r[side] for r in v["mix"]) == counts[tag, v[f"{side}_cache_key"]], (side, v["name"])
        assert len({(r["mnemonic"], r["grp"]) for r in v["mix"]}) == len(v["mix"])
    text = kdb(capsys, corpus_home, "diff", a, b, *flag, "--kernel", "matmul_kernel").out
    assert "normalised ISA" in text and "instruction mix" in text
    assert kdb(capsys, corpus_home, "diff", a, b, *flag, "--kernel", "nope*").code == ExitCode.USAGE


def test_mix_digest_shortcut_gives_the_same_report_as_comparing_every_mnemonic(corpus_home, capsys, monkeypatch):
    """The diff skips the mnemonic rows of pairs whose stored mix digests are equal; turning that off
    (every pair's mnemonic counts fetched and compared) must not change a byte of the report."""
    import kdb.diff.engine as engine

    same = engine._same_mix
    seen = {True: 0, False: 0}

    def counting(a, b):
        result = same(a, b)
        seen[result] += 1
        return result

    cases = [(a, b, across) for a, b, across in available_pairs()] + [(PAIRS[0][0], PAIRS[0][0], False)]
    for a, b, across in cases:
        args = (a, b, "--across-targets") if across else (a, b)
        monkeypatch.setattr(engine, "_same_mix", counting)
        fast = kdb(capsys, corpus_home, "diff", *args, "--format", "json")
        monkeypatch.setattr(engine, "_same_mix", lambda x, y: False)
        full = kdb(capsys, corpus_home, "diff", *args, "--format", "json")
        assert (fast.code, fast.out) == (full.code, full.out), (a, b)
    assert seen[True] > 0 and seen[False] > 0  # both paths were taken


def test_normalised_text_cache_hits_on_a_repeated_deep_view(corpus_home, capsys):
    """The ISA of a deep view is normalised once per blob: a second deep view of the same kernels (here
    in the same process, as a long-lived caller would) reads every normalised text from the cache."""
    from kdb.diff.sides import normalised_blob

    a, b, across = available_pairs()[0]
    flag = ["--across-targets"] if across else []
    normalised_blob.cache_clear()
    first = kdb(capsys, corpus_home, "diff", a, b, *flag, "--kernel", "matmul_kernel")
    assert first.code in (0, 1), first.err
    after_first = normalised_blob.cache_info()
    assert after_first.misses > 0
    second = kdb(capsys, corpus_home, "diff", a, b, *flag, "--kernel", "matmul_kernel")
    assert second.out == first.out
    after_second = normalised_blob.cache_info()
    assert after_second.misses == after_first.misses
    assert after_second.hits - after_first.hits >= after_first.misses


GOLDEN = ROOT / "tests" / "golden"


@pytest.mark.parametrize("fmt", ["table-100", "table-200", "markdown", "csv"])
def test_report_matches_its_golden_file(corpus_home, capsys, monkeypatch, fmt):
    """The terminal table at 100 and 200 columns, markdown and csv reports of one corpus pair, byte for byte.
    After an intended change of a report, regenerate the files with
    `KDB_UPDATE_GOLDEN=1 python -m pytest tests/test_diff.py -k golden` and review their diff
    (tests/golden/README.md)."""
    a, b = "t3.3.1-gfx942", "t3.4.0-gfx942"
    fmt, _, columns = fmt.partition("-")
    monkeypatch.setenv("COLUMNS", columns or "100")
    r = kdb(capsys, corpus_home, "diff", a, b, "--format", fmt, "--fail-on", "new-spills")
    assert r.code == 1, r.err
    assert all(len(line) <= int(columns) for line in r.out.splitlines()) if columns else True
    golden = GOLDEN / f"diff-{a}-{b}.{fmt}{'-' + columns if columns else ''}"
    if os.environ.get("KDB_UPDATE_GOLDEN"):
        golden.write_text(r.out)
    assert r.out == golden.read_text()


def test_markdown_of_the_largest_corpus_diff_fits_a_comment(corpus_home, capsys):
    """Every pair of the corpus as a pull-request comment, every changed kernel firing a rule: each stays under
    GitHub's 65,536 characters and lists the fired kernels; the largest is reported."""
    sizes = {}
    for a, b, across in available_pairs():
        flag = ["--across-targets"] if across else []
        _, doc = diff_json(capsys, corpus_home, a, b, *flag, "--fail-on", "new-spills,any-change")
        md = kdb(capsys, corpus_home, "diff", a, b, *flag, "--fail-on", "new-spills,any-change", "-f", "markdown").out
        assert len(md) <= 65_536
        for rule in doc["fired_rules"]:
            fired = [k for k in doc["kernels"] if rule in k["fired_rules"]]
            section = md.split(f"**fired `{rule}`** on {len(fired)} kernel")[1].split("**fired")[0].split("####")[0]
            listed = min(len(fired), 30)
            assert sum((k["a_cache_key"] or k["b_cache_key"])[:6] in section for k in fired) >= listed
        sizes[a, b] = len(md)
    (a, b), size = max(sizes.items(), key=lambda x: x[1])
    with capsys.disabled():
        print(f"\nlargest corpus markdown: {a} -> {b}: {size} characters")
