"""`kdb report` in a real browser (Debian's Chromium, headless, driven by Playwright: nothing downloaded), and
the pull-request markdown's size limit on any diff."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import PAIR, ROOT
from helpers import kdb, kdb_subprocess

from kdb.diff.markdown import COMMENT_LIMIT, render_markdown
from kdb.diff.model import DiffResult, KernelDiff, KernelFacts, Rule, Status
from kdb.report.html import SPILL_BARS

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT = ROOT / "docs" / "report.png"


def _browser_page(playwright):
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    return browser, page, problems, requests


def _expected_marks(doc: dict) -> dict[str, int]:
    """The marks every plot should draw, computed from the JSON document (not from the report's code)."""
    paired = [k for k in doc["kernels"] if k["status"] in ("matched", "changed")]
    vgpr = [
        k for k in paired if k["metrics"]["vgpr_count"]["a"] is not None and k["metrics"]["vgpr_count"]["b"] is not None
    ]
    cells = {(k["metrics"]["occupancy"]["a"], k["metrics"]["occupancy"]["b"]) for k in paired}
    spills = [
        k
        for k in paired
        if any(k["metrics"][m]["delta"] for m in ("vgpr_spill_count", "sgpr_spill_count", "scratch_bytes"))
    ]
    groups: dict[str, int] = {}
    for k in paired:
        for g, x in k["mix_groups"].items():
            groups[g] = groups.get(g, 0) + x["delta"]
    loop_scratch = [
        k
        for k in paired
        if all(k["loops"][side]["loop_weighted_scratch"] is not None for side in ("a", "b"))
        and (k["loops"]["a"]["loop_weighted_scratch"] or k["loops"]["b"]["loop_weighted_scratch"])
    ]
    return {
        "plot-loop-scratch": len(loop_scratch),
        "plot-vgpr": len(vgpr),
        "plot-occupancy": len(cells),
        "plot-spills": len(spills),
        "plot-mix": sum(1 for d in groups.values() if d),
    }


def _self_contained(text: str) -> None:
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text), "the page must not load anything"


@pytest.mark.browser
def test_diff_report_in_a_browser(pair_home, capsys, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    a, b = PAIR
    out = tmp_path / "report.html"
    r = kdb(capsys, pair_home, "report", a, b, "--output", str(out))
    assert r.code == 0, r.err
    _self_contained(out.read_text())
    doc = json.loads(kdb(capsys, pair_home, "diff", a, b, "--format", "json").out)
    expected = _expected_marks(doc)
    assert all(expected.values()), expected
    with sync_api.sync_playwright() as p:
        browser, page, problems, requests = _browser_page(p)
        page.goto(out.as_uri())
        page.wait_for_function("document.querySelectorAll('.plot .main-svg').length >= 4")
        # every plot draws its marks: scatter points and bars counted in the SVG, heatmap cells in its data
        assert page.locator("#plot-vgpr .scatterlayer path.point").count() == expected["plot-vgpr"]
        assert page.locator("#plot-spills .barlayer g.point").count() == 3 * min(expected["plot-spills"], SPILL_BARS)
        assert page.locator("#plot-mix .barlayer g.point").count() == expected["plot-mix"]
        assert page.locator("#plot-loop-scratch .scatterlayer path.point").count() == expected["plot-loop-scratch"]
        assert page.locator("#plot-occupancy .hm image").count() == 1
        cells = page.evaluate("document.getElementById('plot-occupancy').data[0].z.flat().filter(v => v > 0).length")
        assert cells == expected["plot-occupancy"]
        # the ranked table lists every kernel that is not the same, with its reason
        rows = page.locator("#kernels tbody tr")
        not_same = sum(1 for k in doc["kernels"] if k["status"] != "matched")
        assert rows.count() == not_same
        # sorting: VGPRs (B's value) descending after two clicks
        header = page.locator("#kernels th", has_text="VGPRs")
        header.click()
        header.click()
        cells_text = page.locator("#kernels tbody tr td:nth-child(4)").all_inner_texts()
        values = [int(c.split("→")[-1]) for c in cells_text if c]
        assert values == sorted(values, reverse=True) and len(values) > 3
        # filtering
        page.fill("#filter", "matmul")
        names = page.locator("#kernels tbody tr td:nth-child(3)").all_inner_texts()
        assert names and all("matmul" in n for n in names)
        page.fill("#filter", "")
        page.select_option("#status", "regressed")
        assert set(page.locator("#kernels tbody tr td:nth-child(1)").all_inner_texts()) == {"regressed"}
        page.select_option("#status", "")
        # drill-down: the worst kernel, with facts side by side, mix, ISA hunks and hot lines
        header = page.locator("#kernels th", has_text="status")
        header.click()
        page.locator("#kernels tbody tr").first.click()
        drill = page.locator("#drill")
        assert drill.is_visible()
        text = drill.inner_text()
        assert "facts" in text and "instruction mix by group" in text and "hot source lines" in text
        assert "@@" in page.locator("#isa").inner_text()
        # the worst kernel's mix per loop depth, side by side: one table per depth, its totals the kernel's mix
        worst = doc["kernels"][0]
        assert worst["loops"]["b"]["max_loop_depth"] >= 1, worst["name"]
        depths = page.locator("#loop-mix h4").all_inner_texts()
        assert depths == [f"loop depth {d}" for d in range(worst["loops"]["b"]["max_loop_depth"] + 1)]
        # clicking a point of the loop-weighted scratch plot opens that kernel
        page.evaluate("document.getElementById('drill').style.display = 'none'")
        page.locator("#plot-loop-scratch .scatterlayer path.point").first.click(force=True)
        page.wait_for_function("document.getElementById('drill').style.display === 'block'")
        assert "loop depth" in page.locator("#drill").inner_text()
        browser.close()
    assert problems == [], problems
    assert all(u.startswith("file://") or u.startswith("data:") for u in requests), requests


@pytest.mark.browser
def test_snapshot_report_in_a_browser(pair_home, capsys, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    tag = PAIR[1]
    out = tmp_path / "snapshot.html"
    assert kdb(capsys, pair_home, "report", tag, "-o", str(out)).code == 0
    _self_contained(out.read_text())
    kernels = kdb(capsys, pair_home, "sql", f"SELECT * FROM kernels WHERE tag = '{tag}'", "--format", "json").json()
    limiters: dict[str, set] = {}
    for k in kernels:
        limiters.setdefault(k["occupancy_limiter"] or "unknown", set()).add(k["occupancy"])
    tuned = kdb(capsys, pair_home, "sql", f"SELECT * FROM autotune WHERE tag = '{tag}'", "--format", "json").json()
    spilling = [
        k for k in kernels if (k["scratch_bytes"] or 0) or (k["vgpr_spill_count"] or 0) or (k["sgpr_spill_count"] or 0)
    ]
    with sync_api.sync_playwright() as p:
        browser, page, problems, _ = _browser_page(p)
        page.goto(out.as_uri())
        page.wait_for_function("document.querySelectorAll('.plot .main-svg').length >= 3")
        assert page.locator("#plot-limiter .barlayer g.point").count() == sum(len(v) for v in limiters.values())
        assert page.evaluate("document.getElementById('plot-registers').data[0].x.length") == len(kernels)
        assert page.locator("#plot-registers .barlayer g.point").count() > 0
        assert page.locator("#plot-spilling .barlayer g.point").count() == 2 * min(len(spilling), SPILL_BARS)
        assert page.locator("#kernels tbody tr").count() == len(kernels)
        page.locator("#kernels tbody tr").first.click()
        assert "facts" in page.locator("#drill").inner_text()
        assert page.locator("#autotune").count() == (1 if tuned else 0)  # the section only where data exists
        browser.close()
    assert problems == [], problems


INDUCTOR_H100 = ROOT / "corpus" / "inductor" / "h100-torch2.11-t3.6.0"


@pytest.mark.browser
def test_snapshot_report_shows_autotune_winners_and_losers(tmp_path, unpacked_archive):
    """A real cache of Triton's autotuner (`*.autotune.json`, H100): one point per timed config whose folder is
    known, winners apart from the others, a row per tuned kernel with its winner and fastest other config."""
    sync_api = pytest.importorskip("playwright.sync_api")
    cache = unpacked_archive(INDUCTOR_H100 / "triton_autotune.tar.xz")  # shared, read-only
    home = tmp_path / "home"
    assert kdb_subprocess(home, "ingest", str(cache), "--tag", "tuned", "--no-sass").code == 0
    out = tmp_path / "tuned.html"
    assert kdb_subprocess(home, "report", "tuned", "-o", str(out)).code == 0
    # expected from the autotuner's own files and the catalog's kernels (not from the report's code)
    files = sorted(cache.rglob("*.autotune.json"))
    timed = sum(len(json.loads(f.read_text())["configs_timings"]) for f in files)
    rows = json.loads(
        kdb_subprocess(
            home,
            "sql",
            "SELECT a.is_best, k.registers FROM autotune a LEFT JOIN kernels k USING (tag, cache_key) "
            "WHERE a.tag = 'tuned' AND a.time_ms IS NOT NULL",
            "--format",
            "json",
        ).out
    )
    assert len(rows) == timed
    drawn = [r for r in rows if r["registers"] is not None]
    winners = [r for r in drawn if r["is_best"]]
    assert 0 < len(winners) < len(drawn) <= timed
    with sync_api.sync_playwright() as p:
        browser, page, problems, _ = _browser_page(p)
        page.goto(out.as_uri())
        page.wait_for_function("document.querySelectorAll('#plot-autotune-registers .main-svg').length >= 1")
        assert page.locator("#plot-autotune-registers .scatterlayer path.point").count() == len(drawn)
        assert page.locator("#plot-autotune-occupancy .scatterlayer path.point").count() == len(drawn)
        traces = page.evaluate("document.getElementById('plot-autotune-registers').data.map(t => [t.name, t.x.length])")
        assert dict(traces) == {"winners": len(winners), "other configs": len(drawn) - len(winners)}
        assert page.locator("#autotune-table tbody tr").count() == len(files)
        caption = page.locator("#autotune-caption").inner_text()
        assert caption.startswith(f"{len(drawn)} configs drawn")
        for plot in ("plot-autotune-registers", "plot-autotune-occupancy"):  # log axes with readable ticks
            g = page.evaluate(_GEOMETRY, plot)
            assert g["clipped"] == [] and g["overlaps"] == [], (plot, g)
            ticks = page.evaluate(f"[...document.querySelectorAll('#{plot} .ytick text')].map(t => t.textContent)")
            assert len(ticks) >= 2 and len(ticks) == len(set(ticks)), ticks
        assert ("without a time or a linked kernel folder" in caption) == (len(drawn) < timed)
        browser.close()
    assert problems == [], problems


# -- markdown for a pull-request comment ------------------------------------------------------------------
def _facts(key: str, name: str, **values) -> KernelFacts:
    return KernelFacts(key, name, "hip", "hip:gfx942:64", None, values)


def test_markdown_of_a_huge_diff_fits_a_comment_and_lists_fired_kernels():
    """20,000 changed kernels with long names and reasons, every one firing a rule: still one comment."""
    kernels = []
    for i in range(20_000):
        name = f"triton_per_fused__native_batch_norm_legit_functional_{'x' * 200}_{i}"
        kernels.append(
            KernelDiff(
                Status.REGRESSED,
                name,
                a=_facts(f"A{i:050d}", name, vgpr_spill_count=0),
                b=_facts(f"B{i:050d}", name, vgpr_spill_count=i + 1),
                reason="VGPR spills 0→1, " * 40,
                fired_rules=("new-spills",),
                severity=1.0,
            )
        )
    result = DiffResult(
        "a", "b", False, tuple(kernels), (Rule("new-spills", "new-spills"),), ("new-spills",), 20_000, 20_000, (), ()
    )
    md = render_markdown(result)
    assert len(md) <= COMMENT_LIMIT
    assert "**fired `new-spills`** on 20000 kernels" in md
    fired = md.split("**fired `new-spills`**")[1].split("####")[0]
    # each fired kernel: its key (unique over the diff: here the whole folder name, as the keys differ only at
    # their end), then its name
    assert fired.count("\n- `A000") == 30 and fired.count("` `triton_per_fused") == 30
    assert f"`A{0:050d}`" in fired and "… and 19970 more" in fired
    assert "<details>" in md and "more changed kernels not listed" in md


# -- layout on real Inductor names, by element geometry -------------------------------------------------------
AMD_INDUCTOR = ROOT / "corpus" / "inductor" / "amd"
RESNET = ("resnet18-t3.6.0", "resnet18-t3.7.1")

# Every text a plot draws as a label (axis ticks, axis titles, plot title, legend), by group: labels of one
# group must not overlap one another; none may reach outside its plot's box.
_GEOMETRY = """
(id) => {
  const div = document.getElementById(id), box = div.getBoundingClientRect();
  const groups = {
    xticks: '.xaxislayer-above .xtick text', yticks: '.yaxislayer-above .ytick text',
    titles: '.gtitle, .g-xtitle text, .g-ytitle text', legend: '.legendtext',
  };
  const out = {clipped: [], overlaps: [], count: 0};
  const all = [];
  for (const [group, sel] of Object.entries(groups)) {
    const rs = [...div.querySelectorAll(sel)].filter(e => e.textContent.trim())
      .map(e => ({t: e.textContent, r: e.getBoundingClientRect(), group}));
    out.count += rs.length;
    for (const {t, r} of rs)
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
        out.clipped.push(group + ': ' + t);
    for (let i = 0; i < rs.length; i++) for (let j = i + 1; j < rs.length; j++) {
      const a = rs[i].r, b = rs[j].r;
      if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
        out.overlaps.push(group + ': ' + rs[i].t + ' / ' + rs[j].t);
    }
    all.push(...rs);
  }
  const title = div.querySelector('.gtitle'), bar = div.querySelector('.modebar');
  if (title && bar) {
    const a = title.getBoundingClientRect(), b = bar.getBoundingClientRect();
    if (b.width && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
      out.overlaps.push('title / toolbar');
  }
  const plot = div.querySelector('.nsewdrag');
  if (plot) out.plot = [plot.getBoundingClientRect().width, plot.getBoundingClientRect().height];
  return out;
}
"""


@pytest.fixture(scope="module")
def resnet_home(cached_home):
    """The gfx942 recompiles of torch's resnet18 (max-autotune) under Triton 3.6.0 and 3.7.1: real Inductor
    names (triton_tem_fused_convolution_…), 30+ kernels whose spills change, autotune candidates."""
    return cached_home(
        [
            (RESNET[0], AMD_INDUCTOR / "resnet18_infer_maxautotune-t3.6.0-gfx942.tar.zst"),
            (RESNET[1], AMD_INDUCTOR / "resnet18_infer_maxautotune-t3.7.1-gfx942.tar.zst"),
        ],
        sass=False,
    )


@pytest.mark.browser
@pytest.mark.parametrize("kind", ["diff", "snapshot"])
def test_report_layout_on_real_inductor_names(resnet_home, capsys, tmp_path, kind):
    """At 1,280 and 1,920 px: every plot's labels inside its box and apart from each other, plots at least
    200 px tall and wide, the table's columns visible without scrolling sideways, no blank page below."""
    sync_api = pytest.importorskip("playwright.sync_api")
    out, shot = tmp_path / f"{kind}.html", tmp_path / "report.png"
    refs = RESNET if kind == "diff" else RESNET[1:]
    assert kdb(capsys, resnet_home, "report", *refs, "--output", str(out)).code == 0
    with sync_api.sync_playwright() as p:
        browser, page, problems, _ = _browser_page(p)
        for width in (1280, 1920):
            page.set_viewport_size({"width": width, "height": 1000})
            page.goto(out.as_uri())
            page.wait_for_function("document.querySelectorAll('.plot .main-svg').length >= 3")
            page.wait_for_timeout(300)  # responsive relayout after the resize
            plots = page.evaluate("[...document.querySelectorAll('.plot')].map(d => d.id)")
            assert len(plots) >= 3
            for plot in plots:
                g = page.evaluate(_GEOMETRY, plot)
                assert g["count"] >= 3, (width, plot, g)
                assert g["clipped"] == [], (width, plot, g["clipped"][:5])
                assert g["overlaps"] == [], (width, plot, g["overlaps"][:5])
                assert g["plot"][0] >= 200 and g["plot"][1] >= 150, (width, plot, g["plot"])
            # the table's columns fit the page: no sideways scrolling at these widths
            box = page.evaluate(
                "(() => { const b = document.getElementById('tablebox'); return [b.scrollWidth, b.clientWidth]; })()"
            )
            assert box[0] <= box[1] + 1, (width, box)
            # no blank tail: the page ends within a screen of its last element
            tail = page.evaluate(
                "document.documentElement.scrollHeight - Math.max(...[...document.body.children]"
                ".filter(e => e.offsetParent !== null).map(e => e.getBoundingClientRect().bottom + window.scrollY))"
            )
            assert tail < 100, (width, tail)
            if kind == "diff" and width == 1280:  # the picture README shows: the top of this page
                page.evaluate("window.scrollTo(0, 0)")
                page.screenshot(path=str(shot))
        browser.close()
    assert problems == [], problems
    if kind == "diff":
        assert shot.stat().st_size > 20_000
        if os.environ.get("KDB_UPDATE_SCREENSHOT"):
            shutil.copyfile(shot, SCREENSHOT)


@pytest.mark.browser
def test_drill_down_past_the_worst_50_is_complete(resnet_home, capsys, tmp_path):
    """A kernel ranked past the `--limit` worst still has its loop depths, metadata differences and ISA hunks,
    as `kdb diff A B --kernel KEY --format json` gives them."""
    sync_api = pytest.importorskip("playwright.sync_api")
    out = tmp_path / "report.html"
    assert kdb(capsys, resnet_home, "report", *RESNET, "--output", str(out)).code == 0
    kernels = json.loads(kdb(capsys, resnet_home, "diff", *RESNET, "--format", "json").out)["kernels"]
    changed = [i for i, k in enumerate(kernels) if k["status"] == "changed"]
    assert len(changed) > 60, len(changed)
    deep = {}
    for i in changed[50:]:
        k = kernels[i]
        if not (k["loops"]["a"]["max_loop_depth"] and k["loops"]["b"]["max_loop_depth"]):
            continue
        r = kdb(capsys, resnet_home, "diff", *RESNET, "--kernel", k["b_cache_key"], "--format", "json")
        (deep,) = json.loads(r.out)["deep"]
        if deep["isa_diff"] and (deep["triton_json_diff"] or deep["co_metadata_diff"]):
            break
    assert deep.get("isa_diff"), "no kernel past the worst 50 with loops, metadata and ISA changes"
    depth = max(k["loops"]["a"]["max_loop_depth"], k["loops"]["b"]["max_loop_depth"])
    with sync_api.sync_playwright() as p:
        browser, page, problems, _ = _browser_page(p)
        page.goto(out.as_uri())
        page.wait_for_function("document.querySelectorAll('#kernels tbody tr').length > 60")
        page.locator(f'#kernels tbody tr[data-id="{i}"]').click()
        text = page.locator("#drill").inner_text()
        assert k["name"] in page.locator("#drill-title").inner_text()
        assert "loop depths unknown" not in text
        assert page.locator("#loop-mix h4").all_inner_texts() == [f"loop depth {d}" for d in range(depth + 1)]
        assert "metadata differences" in text
        first_hunk = next(line for line in deep["isa_diff"].splitlines() if line.startswith("@@"))
        assert first_hunk in page.locator("#isa").inner_text()
        browser.close()
    assert problems == [], problems


_TOOLBAR_HITS = """id => {
  const d = document.getElementById(id), box = e => e.getBoundingClientRect();
  const m = d.querySelector('.modebar'); if (!m) return null;
  const b = box(m);
  return [...d.querySelectorAll('.legend, .colorbar, .xtick, .ytick, .g-xtitle, .g-ytitle, .gtitle')].map(box)
    .filter(o => o.left < b.right && b.left < o.right && o.top < b.bottom && b.top < o.bottom).length;
}"""


@pytest.mark.browser
def test_plot_toolbar_covers_no_legend_axis_or_title(resnet_home, capsys, tmp_path):
    """Hovering each plot shows its toolbar over none of the legend, colour bar, ticks and titles."""
    sync_api = pytest.importorskip("playwright.sync_api")
    out = tmp_path / "report.html"
    assert kdb(capsys, resnet_home, "report", *RESNET, "--output", str(out)).code == 0
    with sync_api.sync_playwright() as p:
        browser, page, problems, _ = _browser_page(p)
        for width in (1280, 1600, 1920):
            page.set_viewport_size({"width": width, "height": 1000})
            page.goto(out.as_uri())
            page.wait_for_function("document.querySelectorAll('.plot .main-svg').length >= 4")
            for plot in page.evaluate("[...document.querySelectorAll('.plot')].map(d => d.id)"):
                page.hover(f"#{plot}")
                page.wait_for_timeout(100)
                assert page.evaluate(_TOOLBAR_HITS, plot) == 0, (width, plot)
        browser.close()
    assert problems == [], problems
