"""The recipes of docs/architecture.md, followed once each on a copy of the source tree.

"Add a figure": one declaration in kdb/figures.py, and the figure is compared per pair in every diff format (JSON
`metrics`, CSV columns, the deep view of the table and markdown) and in the report's drill-down, with the values
the catalog holds. The same commands on the unchanged tree do not show it, so the one line is what did it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PAIR, ROOT

NEW_FIGURE = "scratch_instr_count"  # a kernels-view column (migration 002) that no figure declared before
ANCHOR = '    Figure("instr_count", "instructions"),\n'


def _tree_with_new_figure(tmp_path: Path) -> Path:
    tree = tmp_path / "src"
    shutil.copytree(ROOT / "kdb", tree / "kdb", ignore=shutil.ignore_patterns("__pycache__"))
    figures = tree / "kdb" / "figures.py"
    text = figures.read_text()
    assert text.count(ANCHOR) == 1
    figures.write_text(text.replace(ANCHOR, ANCHOR + f'    Figure("{NEW_FIGURE}", "scratch instructions"),\n'))
    return tree


def _kdb(tree: Path | None, home: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree else dict(os.environ)
    # cwd: not the checkout, whose kdb/ would come first on sys.path
    r = subprocess.run(
        [sys.executable, "-m", "kdb", "--home", str(home), *args], env=env, capture_output=True, text=True, cwd=home
    )
    assert r.returncode in (0, 1), r.stderr  # 1: regressions found, the diff itself succeeded
    return r.stdout


@pytest.mark.slow
def test_a_figure_declared_once_reaches_every_diff_format_and_the_report(pair_home, tmp_path):
    a, b = PAIR
    rows = json.loads(
        _kdb(None, pair_home, "sql", f"SELECT tag, cache_key, {NEW_FIGURE} FROM kernels", "--format", "json")
    )
    catalog = {(r["tag"], r["cache_key"]): r[NEW_FIGURE] for r in rows}
    assert any(v for v in catalog.values())  # the column holds figures on this pair
    for tree, declared in ((None, False), (_tree_with_new_figure(tmp_path), True)):
        doc = json.loads(_kdb(tree, pair_home, "diff", a, b, "--format", "json"))
        paired = [k for k in doc["kernels"] if k.get("metrics")]
        assert paired
        assert all((NEW_FIGURE in k["metrics"]) is declared for k in paired)
        header = next(csv.reader(io.StringIO(_kdb(tree, pair_home, "diff", a, b, "--format", "csv"))))
        assert (f"{NEW_FIGURE}_a" in header) is declared
        # a kernel whose new figure is known on both sides: its deep view lists it in the table and markdown
        kernel = next(k for k in paired if catalog[(a, k["a_cache_key"])] is not None)
        for fmt in ("table", "markdown"):
            deep = _kdb(tree, pair_home, "diff", a, b, "--kernel", kernel["a_cache_key"][:8], "--format", fmt)
            assert (NEW_FIGURE in deep) is declared, fmt
        report = tmp_path / f"report-{declared}.html"
        _kdb(tree, pair_home, "report", a, b, "-o", str(report))
        assert (f'"{NEW_FIGURE}"' in report.read_text()) is declared
        if declared:
            for k in paired:  # the values the diff compares are the catalog's
                m = k["metrics"][NEW_FIGURE]
                assert (m["a"], m["b"]) == (catalog[(a, k["a_cache_key"])], catalog[(b, k["b_cache_key"])])


XPU_ROLES = """

# tests/test_recipes.py: a third vendor, declared as the recipe says (its roles, then one BACKENDS entry).
import dataclasses as _dataclasses

from kdb.figures import Wording as _Wording

_EXAMPLE_ROLES = _dataclasses.replace(
    AMD_ROLES,
    backend="xpu",
    vendor="Example",
    register_rules=("vgpr", "registers"),
    wording=_Wording(
        register_title="GRF registers per thread",
        occupancy_unit="threads per EU",
        scratch_title="spill memory bytes",
        scratch_word="spill-memory",
        spill_title="spill memory changes (B − A)",
        headers={"VGPRs": "GRF", "scratch": "spill mem"},
    ),
)
BACKENDS = (*BACKENDS, Backend("xpu", "hsaco", _analyze_amd, _EXAMPLE_ROLES, _amd_launch_grant))
_ROLES = {b.name: b.roles for b in BACKENDS}
"""


@pytest.mark.slow
def test_a_vendor_declared_in_the_registry_is_worded_and_judged_by_its_roles(pair_home, home_copy, tmp_path):
    """ "Add a vendor", followed on the diff side: one roles declaration and one BACKENDS entry in
    kdb/analysis/registry.py, no change to kdb/diff, kdb/report or kdb/render. Its kernels are the real gfx942
    kernels of PAIR whose backend the catalog copy names `xpu` (the analysis side of the recipe, a parser of the
    vendor's code object, has no real third-vendor cache in the corpus to run on)."""
    import duckdb

    a, b = PAIR
    home = home_copy(pair_home)
    with duckdb.connect(str(home / "catalog.duckdb")) as con:
        assert con.execute("UPDATE kernel_folders SET backend = 'xpu' WHERE backend = 'hip'").fetchone()[0] > 0
    tree = tmp_path / "src"
    shutil.copytree(ROOT / "kdb", tree / "kdb", ignore=shutil.ignore_patterns("__pycache__"))
    registry = tree / "kdb" / "analysis" / "registry.py"
    anchor = "_ROLES = {b.name: b.roles for b in BACKENDS}\n"
    text = registry.read_text()
    assert text.count(anchor) == 1
    registry.write_text(text.replace(anchor, anchor + XPU_ROLES))
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "200"}

    def kdb(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "kdb", "--home", str(home), *args]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path)

    table = kdb("diff", a, b, "--format", "table", "--all")
    assert table.returncode in (0, 1), table.stderr
    assert "Example kernels: VGPRs = GRF registers per thread, scratch = spill memory bytes" in table.stdout
    gated = kdb("diff", a, b, "--format", "json", "--fail-on", "sgpr:+1")
    assert gated.returncode == 8, gated.stderr  # a register file the vendor does not have: unknown, never a pass
    reasons = json.loads(gated.stdout)["unknown_reasons"]
    assert reasons == ["sgpr:+1: xpu kernels have no SGPR count (registers:+N gates Example registers)"]
    report = tmp_path / "xpu.html"
    assert kdb("report", a, b, "-o", str(report)).returncode in (0, 1)
    page = report.read_text()
    assert "GRF registers per thread" in page and "threads per EU" in page and "spill memory changes" in page
