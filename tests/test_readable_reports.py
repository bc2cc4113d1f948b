"""Reports on real Inductor caches (issue 27): the gfx942 recompiles of torch's resnet18 (max-autotune) under
Triton 3.6.0 and 3.7.1 (corpus/inductor/amd). Every key a table prints is taken back by `kdb show` and
`kdb diff --kernel` at 60, 80, 100 and 160 columns; the summary adds up in every format; kernels that cannot
launch on either side rank after every launchable one; the deep view's ISA hunks ignore register renaming."""

from __future__ import annotations

import csv
import difflib
import io
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT
from helpers import kdb

from kdb.diff.isa import diff_text
from kdb.diff.model import Status
from kdb.diff.verdict import LAUNCH_TIER, SPILL_TIER, classify
from kdb.triton.normalize import normalise_stage

AMD = ROOT / "corpus" / "inductor" / "amd"
A, B = "resnet18-t3.6.0", "resnet18-t3.7.1"
LABELS = [s.label for s in Status]


@pytest.fixture(scope="module")
def resnet_home(cached_home) -> Path:
    return cached_home(
        [
            (A, AMD / "resnet18_infer_maxautotune-t3.6.0-gfx942.tar.zst"),
            (B, AMD / "resnet18_infer_maxautotune-t3.7.1-gfx942.tar.zst"),
        ],
        sass=False,
    )


@pytest.fixture(scope="module")
def resnet_cache(unpacked_archive) -> Path:
    return unpacked_archive(AMD / "resnet18_infer_maxautotune-t3.6.0-gfx942.tar.zst")


def _doc(capsys, home: Path, *args: str) -> dict:
    r = kdb(capsys, home, "diff", A, B, "--format", "json", *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def _table_keys(text: str) -> list[tuple[str, str]]:
    """(status, key) of every row of the table: a row starts with a status label, then the key."""
    rows = []
    for line in text.splitlines():
        for label in LABELS:
            if line.startswith(label + " "):
                key = line[len(label) :].split()[0]
                rows.append((label, key))
    return rows


@pytest.mark.parametrize("columns", [60, 80, 100, 160])
@pytest.mark.slow  # ~6 s of CPU per width (bench/test_suite.py)
def test_every_printed_key_names_its_kernel(resnet_home, capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    # --expand: every member of an autotune group as a row (listed together, at the rank of the group's first)
    r = kdb(capsys, resnet_home, "diff", A, B, "--all", "--no-pager", "--expand")
    assert r.code == 0, r.err
    assert all(len(line) <= columns for line in r.out.splitlines()), "a line is wider than the terminal"
    rows = _table_keys(r.out)
    doc = _doc(capsys, resnet_home)
    listed = [k for k in doc["kernels"] if k["label"] != "same"]
    by_key = {k["key"]: k for k in listed}
    assert len(rows) == len(listed) > 100
    for label, key in rows:
        assert key in by_key, "the table printed a key the document does not have"
        assert label == by_key[key]["label"]
    assert len({key.upper() for _, key in rows}) == len(rows)
    for k in listed[:: max(len(listed) // 40, 1)]:  # 40 of them, spread over the ranking
        key = k["key"]
        tag, whole = (B, k["b_cache_key"]) if k["label"] == "only in B" else (A, k["a_cache_key"])
        shown = kdb(capsys, resnet_home, "show", tag, "--kernel", key.lower(), "--format", "json")
        assert shown.code == 0, shown.err
        assert [x["cache_key"] for x in json.loads(shown.out)] == [whole]
    # the deep view takes the same keys: one kernel each (a few: each is a whole diff)
    for _, key in rows[:: max(len(rows) // 3, 1)][:3]:
        deep = kdb(capsys, resnet_home, "diff", A, B, "--kernel", key, "--no-pager")
        assert deep.code == 0, deep.err
        assert deep.out.count("\n== ") == 1, deep.out[:500]


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
def test_summary_adds_up_in_every_format(resnet_home, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the summary on one line (narrower: wrapped)
    doc = _doc(capsys, resnet_home)
    s = doc["summary"]
    labels = Counter(k["label"] for k in doc["kernels"])
    total = len(doc["kernels"])
    assert s["kernels"] == total == sum(labels.values())
    statuses = ("same", "regressed", "improved", "mixed", "neutral", "only_a", "only_b", "ambiguous")
    assert sum(s[x] for x in statuses) == total
    # one definition of the counts (issue 40): every status under its own name, `regressed` without `mixed`
    assert (s["same"], s["regressed"], s["mixed"], s["neutral"], s["improved"]) == (
        labels["same"],
        labels["regressed"],
        labels["mixed"],
        labels["neutral"],
        labels["improved"],
    )
    assert s["matched"] == s["same"] and s["changed"] == total - s["same"] - s["only_a"] - s["only_b"] - s["ambiguous"]
    line = f"{total} kernels: " + ", ".join(f"{x} {labels[x]}" for x in LABELS)
    table = kdb(capsys, resnet_home, "diff", A, B, "--no-pager").out
    markdown = kdb(capsys, resnet_home, "diff", A, B, "--format", "markdown").out
    assert line in table.splitlines()
    assert line in markdown
    rows = list(csv.DictReader(io.StringIO(kdb(capsys, resnet_home, "diff", A, B, "--format", "csv").out)))
    assert Counter(r["label"] for r in rows) == labels
    assert {r["status"] for r in rows if r["label"] == "same"} <= {"matched"}


def test_kernels_that_cannot_launch_rank_after_every_launchable_one(resnet_home, capsys):
    doc = _doc(capsys, resnet_home)
    occupancy = [(k["metrics"]["occupancy"]["a"], k["metrics"]["occupancy"]["b"]) for k in doc["kernels"]]
    never = [a == 0 and b == 0 for a, b in occupancy]
    assert any(never), "the resnet18 upgrade has autotune candidates asking more LDS than a workgroup may have"
    first = never.index(True)
    assert all(never[first:]), "a launchable kernel ranks after one that cannot launch"
    for k in doc["kernels"][first:]:
        if k["label"] != "same":
            assert k["reason"].startswith("cannot launch on either side (A asks "), k["reason"]
            assert "B of LDS" in k["reason"]
    # a kernel that stops launching ranks above every other regression, one that starts launching is improved
    real = next(k for k in doc["kernels"][:first] if k["metrics"]["occupancy"]["b"])
    a = {m: x["a"] for m, x in real["metrics"].items()} | {"backend": "hip", "occupancy_limiter": "vgpr"}
    b = a | {"occupancy": 0, "occupancy_limiter": "lds", "shared": 98304, "vgpr_spill_count": 99}
    worse = classify(a, b)
    assert worse.verdict == "regressed" and worse.severity > LAUNCH_TIER > SPILL_TIER
    assert worse.reason.startswith("cannot launch any more")
    better = classify(b, a)
    assert better.verdict == "improved" and better.reason.startswith("can launch now")


def _rename_registers(asm: str) -> str:
    """The asm with every VGPR renumbered +1 and every SGPR +2 on instruction lines (ranges too): a consistent
    renaming, as another register allocation of the same code would give."""

    def shift(m: re.Match[str]) -> str:
        cls, lo, hi, single = m.group(1), m.group(2), m.group(3), m.group(4)
        d = 1 if cls == "v" else 2
        return f"{cls}[{int(lo) + d}:{int(hi) + d}]" if lo else f"{cls}{int(single) + d}"

    reg = re.compile(r"(?<![\w.])(v|s)(?:\[(\d+):(\d+)\]|(\d+))(?![\w:])")
    return "\n".join(
        reg.sub(shift, ln) if ln.startswith("\t") and not ln.startswith("\t.") else ln for ln in asm.split("\n")
    )


def _hunks(a: str, b: str) -> list[str]:
    return [ln for ln in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=3)]


def test_isa_hunks_ignore_register_renaming_and_name_real_changes(resnet_cache):
    files = sorted(resnet_cache.rglob("*.amdgcn"), key=lambda p: -p.stat().st_size)
    asm = files[len(files) // 2].read_text()  # a real kernel of middling size
    renamed = _rename_registers(asm)
    raw = _hunks(normalise_stage(asm, "amdgcn"), normalise_stage(renamed, "amdgcn"))
    assert len(raw) > 50, "the renaming changed the text"
    a, b = (diff_text(normalise_stage(t, "amdgcn"), "amdgcn") for t in (asm, renamed))
    assert _hunks(a, b) == []
    # a real change on top of the renaming: one instruction's mnemonic; the hunk shows exactly that line
    lines = renamed.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("\tv_add_u32") or ln.startswith("\tv_add_f32"))
    changed = lines[at].replace("v_add_", "v_sub_", 1)
    lines[at] = changed
    b = diff_text(normalise_stage("\n".join(lines), "amdgcn"), "amdgcn")
    edits = [ln for ln in _hunks(a, b) if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert [ln[0] for ln in edits] == ["-", "+"], edits
    assert edits[0][1:].split()[0] == changed.split()[0].replace("v_sub_", "v_add_")
    assert edits[1][1:].split()[0] == changed.split()[0]


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
def test_deep_view_hunks_are_smaller_than_the_raw_diff(resnet_home, capsys):
    doc = _doc(capsys, resnet_home)
    k = next(k for k in doc["kernels"] if k["label"] == "regressed" and k["first_changed_stage"])
    views = {}
    for flag in ((), ("--raw-isa",)):
        deep = _doc(capsys, resnet_home, "--kernel", k["key"], *flag)["deep"]
        assert len(deep) == 1
        views[bool(flag)] = deep[0]
    assert views[True]["isa_raw"] and not views[False]["isa_raw"]
    normalised, raw = (len(views[x]["isa_diff"].splitlines()) for x in (False, True))
    assert 0 < normalised < raw
    changed = [m for m, x in k["mix_mnemonics"].items() if x["delta"]]
    edits = [ln for ln in views[False]["isa_diff"].splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    mnemonics = {ln[1:].split()[0] for ln in edits if ln[1:].split()}
    assert not changed or mnemonics & set(changed), (changed, sorted(mnemonics)[:20])
