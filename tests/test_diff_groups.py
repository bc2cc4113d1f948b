"""Autotune groups (issue 40, item 1) on real max-autotune Inductor upgrades: the kernels Inductor generated for
mlp_train and resnet18 with max-autotune, compiled for gfx942 under Triton 3.6.0 and 3.7.1 (corpus/inductor/amd).

The oracle is the corpus's own build records (corpus/inductor/amd/records: which generated module, kernel and
config made which folder) and the generated modules themselves (corpus/inductor/h100-torch2.11-t3.6.0): an op
is the `@triton.jit` function's source with the lines that set its tuning constexprs (the module's
`config_args`: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EVEN_K, ...) left out, with its signature and argument
attributes. Pointwise and reduction kernels take their block sizes as arguments, so every config of one has
the same source; a template is one module per config with its block sizes in the body."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
AMD = ROOT / "corpus" / "inductor" / "amd"
H100 = ROOT / "corpus" / "inductor" / "h100-torch2.11-t3.6.0"
SCENARIOS = ["mlp_train_maxautotune", "resnet18_infer_maxautotune"]
A, B = "3.6.0", "3.7.1"
_CONFIG_ARGS = re.compile(r"'config_args': (\{[^}]*\})")
_SIGNATURE = re.compile(r"'signature': (\{[^}]*\})")
_CONSTEXPR_LINE = re.compile(r"\s+(\w+) : tl\.constexpr = ")
_ROW = re.compile(r"^(regressed|improved|mixed|neutral|same)\s+(\S+)\s")


def _records(scenario: str, release: str) -> list[dict]:
    return json.loads((AMD / "records" / f"{scenario}-t{release}-gfx942.json").read_text())["records"]


def _op(modules: Path, record: dict) -> str:
    """The op a config compiles: its kernel's source less its tuning constexprs, signature and attributes."""
    text = (modules / record["module"]).read_text()
    source = next(
        "\n".join(text.splitlines()[node.lineno - 1 : node.end_lineno])
        for node in ast.parse(text).body
        if isinstance(node, ast.FunctionDef) and node.name == record["kernel_fn"]
    )
    m = _CONFIG_ARGS.search(text)
    tuning = set(ast.literal_eval(m.group(1))) if m else set()
    lines = [
        line.rstrip()
        for line in source.splitlines()
        if line.strip()
        and not line.strip().startswith("#")
        and not ((c := _CONSTEXPR_LINE.match(line)) and c.group(1) in tuning)
    ]
    signature = _SIGNATURE.search(text)
    assert signature is not None
    return json.dumps([signature.group(1), record["attrs"], "\n".join(lines)])


def _problem(op: str) -> dict[str, int]:
    """A template op's `M = …`, `N = …`, `K = …` lines (empty for other kernels)."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+([MNK]) = (\d+)$", json.loads(op)[2], re.M)}


def _kdb(home: Path, *args: str, columns: int = 400) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    r = subprocess.run(
        [sys.executable, "-m", "kdb", "--home", str(home), *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert r.returncode in (0, 1), r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def home(cached_home):
    inputs = [(f"{s}-{r}", AMD / f"{s}-t{r}-gfx942.tar.zst") for s in SCENARIOS for r in (A, B)]
    return cached_home(inputs, sass=False)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_one_row_per_autotune_group_and_groups_are_the_ops(home, unpacked_archive, scenario):
    doc = json.loads(_kdb(home, "diff", f"{scenario}-{A}", f"{scenario}-{B}", "--format", "json"))
    kernels, groups = doc["kernels"], doc["groups"]
    key_of = {k["a_cache_key"]: k["key"] for k in kernels}
    group_of = {k["key"]: k["group"] or f"alone:{k['key']}" for k in kernels}
    assert groups, "a max-autotune build has autotune groups"
    assert {k["group"] for k in kernels} - {None} == {g["id"] for g in groups}
    for g in groups:
        assert len(g["members"]) >= 2 and {group_of[m] for m in g["members"]} == {g["id"]}
        assert g["worst"] == g["members"][0]
        assert sum(v for s, v in g["counts"].items() if s != "worse") == len(g["members"])

    # the oracle: every folder of A is the config of one op (several configs may share a folder)
    modules = unpacked_archive(H100 / f"{scenario}.tar.xz")
    op_of_folder: dict[str, str] = {}
    for record in _records(scenario, A):
        op = _op(modules, record)
        assert op_of_folder.setdefault(record["cache_key"], op) == op
    assert set(op_of_folder) == set(key_of), "every kernel of A is a folder of the records"
    groups_of_op: dict[str, set[str]] = defaultdict(set)
    ops_of_group: dict[str, set[str]] = defaultdict(set)
    for folder, op in op_of_folder.items():
        groups_of_op[op].add(group_of[key_of[folder]])
        ops_of_group[group_of[key_of[folder]]].add(op)
    assert [op for op, gs in groups_of_op.items() if len(gs) > 1] == [], "the configs of one op are one group"
    autotuned = [op for op in groups_of_op if sum(1 for f in op_of_folder.values() if f == op) > 1]
    assert len(autotuned) >= 10
    # Different ops never share a group, except what the artifacts cannot tell apart (kdb/diff/groups.py): a
    # template product and its transpose, the same K with M and N swapped (their sizes and strides are the
    # same values on the same axes once the block sizes are left out).
    for gid, ops in ops_of_group.items():
        if len(ops) > 1:
            problems = [_problem(op) for op in ops]
            assert len(ops) == 2 and all(p.keys() == {"M", "N", "K"} for p in problems), gid
            p, q = problems
            assert (p["K"], p["M"], p["N"]) == (q["K"], q["N"], q["M"]) and p["M"] != p["N"], gid

    # the default table: no group takes more than one row; --expand lists every member shown
    table = _kdb(home, "diff", f"{scenario}-{A}", f"{scenario}-{B}", "--no-pager")
    rows = [m.group(2) for line in table.splitlines() if (m := _ROW.match(line))]
    assert rows and len(rows) == len(set(rows))
    per_group = defaultdict(int)
    for key in rows:
        per_group[group_of[key]] += 1
    assert max(per_group.values()) == 1
    listed = {k["key"] for k in kernels if k["label"] != "same"}
    assert len(rows) == len({group_of[key] for key in listed})
    summary = next(line for line in table.splitlines() if line.startswith("groups: "))
    grouped = sum(len(g["members"]) for g in groups)
    assert summary == (
        f"groups: {len(kernels)} kernels = {len(groups)} autotune groups of {grouped} kernels (one row each; --expand "
        f"lists their members) + {len(kernels) - grouped} single kernels"
    )
    expanded = _kdb(home, "diff", f"{scenario}-{A}", f"{scenario}-{B}", "--no-pager", "--expand")
    expanded_rows = [m.group(2) for line in expanded.splitlines() if (m := _ROW.match(line))]
    assert sorted(expanded_rows) == sorted(listed)
    for g in groups:  # each group's members listed together
        at = [i for i, key in enumerate(expanded_rows) if group_of[key] == g["id"]]
        assert not at or at == list(range(at[0], at[0] + len(at)))
