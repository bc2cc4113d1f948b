"""The HTML page of `kdb report`: Plotly figures (plotly.js inlined: the page fetches nothing and opens from
file://), the ranked table (sortable, filterable) and a drill-down per kernel. The one module that imports
plotly."""

from __future__ import annotations

import functools
import html
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import plotly.io as pio
from plotly.offline import get_plotlyjs

from kdb.analysis.registry import roles_of, wording_of
from kdb.diff.model import DiffResult, KernelDeepView
from kdb.diff.terminal import HEADERS, summary_line
from kdb.figures import Wording
from kdb.report import autotune, data
from kdb.report.assets import APP, STYLE

COLORS = {"regressed": "#d62728", "mixed": "#ff7f0e", "improved": "#2ca02c", "neutral": "#7f7f7f", "same": "#1f77b4"}
# The toolbar (shown on hover, few buttons: kdb/report/assets.py) lies flat in the top band above the plot area,
# where no legend, colour bar or axis is; titles sit at the top left just above the plot area, under the toolbar's
# row; axis labels get the room they need (automargin) so long kernel names are never cut at the left edge.
_LAYOUT: dict[str, Any] = {
    "margin": {"l": 60, "r": 40, "t": 64, "b": 50},
    "height": 360,
    "modebar": {"orientation": "h"},
    "xaxis": {"automargin": True},
    "yaxis": {"automargin": True},
}
WIDE = ("plot-spills", "plot-spilling")  # bar charts of kernel names: the whole width of the page
SPILL_BARS = 30  # bars of the spill chart: the largest changes (the caption counts the rest)


@functools.lru_cache(maxsize=1)
def _template() -> Any:
    """plotly_white as plotly.js reads it (a figure built as plain JSON carries its template inline)."""
    return pio.templates["plotly_white"].to_plotly_json()


def _figure(data: list[dict[str, Any]], layout: dict[str, Any]) -> dict[str, Any]:
    """A figure as plotly.js takes it. Built as JSON, not as plotly.graph_objects: validating every
    property took most of a report's plotting time, and the traces here use a handful of known ones."""
    return {"data": data, "layout": {**layout, "template": _template()}}


def _layout(title: str, **kw: Any) -> dict[str, Any]:
    out = {
        **_LAYOUT,
        "title": {
            "text": title,
            "font": {"size": 14},
            "x": 0.01,
            "xanchor": "left",
            "yref": "paper",
            "y": 1,
            "yanchor": "bottom",
            "pad": {"b": 8},
        },
    }
    for axis in ("xaxis", "yaxis"):
        out[axis] = {**_LAYOUT[axis], **kw.pop(axis, {})}
    return {**out, **kw}


def vendor_headers(headers: Sequence[str], words: Wording) -> list[str]:
    """Column headers in the words of the report's one backend (NVIDIA: registers, local memory, shared memory)."""
    return [words.headers.get(h, h) for h in headers]


def spill_counts_of(backends: set[str | None]) -> bool:
    """Whether a backend present counts spilled registers (AMD's VGPR/SGPR spills), so the plots draw them."""
    return any(roles_of(b).spill_counts for b in backends)


def log_ticks(values: Sequence[float]) -> dict[str, Any]:
    """Tick values and labels for a log axis over `values`: 1-2-5 steps (1 per decade over a wide range),
    each written once as %g, instead of plotly's minor digits that overlap on a narrow range."""
    positive = [v for v in values if v > 0]
    if not positive:
        return {}
    lo, hi = min(positive), max(positive)
    decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
    for steps in ((1, 2, 5), (1, 3), (1,)):
        ticks = [m * 10.0**e for e in decades for m in steps if lo / 1.5 <= m * 10.0**e <= hi * 1.5]
        if len(ticks) <= 8:
            break
    if len(ticks) < 2:  # a range within one 1-2-5 step: its ends
        ticks = sorted({float(f"{lo:.2g}"), float(f"{hi:.2g}")})
    return {"tickvals": ticks, "ticktext": [f"{t:g}" for t in ticks]}


def _a_vs_b_traces(
    points: dict[str, list[dict[str, Any]]], floor: float, hover: str, text: Callable[[dict[str, Any]], str]
) -> list[dict[str, Any]]:
    """The A = B diagonal from `floor`, then one marker trace per verdict (points drawn at no less than
    `floor`: a log axis has no 0), each point's customdata its table row (a click opens the kernel)."""
    top = max([max(p["x"], p["y"]) for ps in points.values() for p in ps] or [1])
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "x": [floor, top],
            "y": [floor, top],
            "mode": "lines",
            "name": "A = B",
            "line": {"color": "#bbb", "dash": "dot"},
        }
    ]
    for verdict, ps in points.items():
        if ps:
            traces.append(
                {
                    "type": "scatter",
                    "x": [max(p["x"], floor) for p in ps],
                    "y": [max(p["y"], floor) for p in ps],
                    "text": [text(p) for p in ps],
                    "customdata": [p["id"] for p in ps],
                    "mode": "markers",
                    "name": verdict,
                    "marker": {"color": COLORS[verdict], "size": 8, "opacity": 0.8},
                    "hovertemplate": hover + "<extra>" + verdict + "</extra>",
                }
            )
    return traces


def _kernel_bars(items: list[dict[str, Any]], series: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One horizontal bar trace per (key, name) of `series` over the kernels of `items` (their `label`s)."""
    return [
        {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "y": [x["label"] for x in items],
            "x": [x[key] for x in items],
            "hovertext": [x["kernel"] for x in items],
        }
        for key, name in series
    ]


def _loop_scratch_figure(r: DiffResult, words: Wording) -> tuple[dict[str, Any], int]:
    """Loop-weighted scratch, A vs B: each scratch / local-memory instruction weighted 32 per loop depth
    (kdb/analysis/loops.py), so a kernel whose spills moved into a loop rises far above the diagonal."""
    what = words.scratch_word
    points = data.loop_scratch_points(r)
    values = [v for ps in points.values() for p in ps for v in (p["x"], p["y"]) if v > 0]
    # log axes: a side with no scratch is drawn at 1 (the hover text gives the real figure)
    traces = _a_vs_b_traces(points, 1, "%{text}", lambda p: f"{p['text']}: {p['x']:g} → {p['y']:g}")
    axis = {"type": "log", **log_ticks(values or [1.0])}
    layout = _layout(
        f"loop-weighted {what} instructions (×32 per loop depth), A vs B",
        xaxis={"title": {"text": "A (0 drawn at 1)"}, **axis},
        yaxis={"title": {"text": "B (0 drawn at 1)"}, **axis},
    )
    return _figure(traces, layout), sum(len(ps) for ps in points.values())


def diff_figures(r: DiffResult) -> tuple[dict[str, Any], dict[str, int]]:
    """The diff's figures by element id, and how many marks each draws (points, cells, bars)."""
    figs: dict[str, Any] = {}
    marks: dict[str, int] = {}
    backends = {k.facts.backend for k in r.kernels if k.facts is not None}
    words = wording_of(backends)
    regs = words.register_title
    points = data.vgpr_points(r)
    traces = _a_vs_b_traces(points, 0, "%{text}<br>A %{x} → B %{y}", lambda p: p["text"])
    layout = _layout(
        f"{regs}, A vs B", xaxis={"title": {"text": f"A: {regs}"}}, yaxis={"title": {"text": f"B: {regs}"}}
    )
    figs["plot-vgpr"], marks["plot-vgpr"] = _figure(traces, layout), sum(len(ps) for ps in points.values())
    figs["plot-loop-scratch"], marks["plot-loop-scratch"] = _loop_scratch_figure(r, words)
    la, lb, z = data.occupancy_transitions(r)
    unit = words.occupancy_unit
    heat = {
        "type": "heatmap",
        "x": lb,
        "y": la,
        "z": [[c or None for c in zr] for zr in z],  # empty cells left blank
        "colorscale": [[0, "#deebf7"], [1, "#08519c"]],
        "texttemplate": "%{z}",
        "hovertemplate": "A %{y} → B %{x}: %{z}<extra></extra>",
    }
    layout = _layout(
        f"occupancy ({unit}) A → B, kernels per cell",
        xaxis={"title": {"text": "B"}, "type": "category"},
        yaxis={"title": {"text": "A"}, "type": "category"},
    )
    figs["plot-occupancy"], marks["plot-occupancy"] = _figure([heat], layout), sum(1 for zr in z for c in zr if c)
    changes = data.spill_changes(r)
    shown = changes[:SPILL_BARS]
    series = [("scratch bytes", words.scratch_title)]
    if spill_counts_of(backends):
        series = [("VGPR spills", "VGPR spills"), ("SGPR spills", "SGPR spills"), *series]
    bars = _kernel_bars(shown, series)
    title = words.spill_title
    if len(changes) > len(shown):
        title += f": the {len(shown)} largest of {len(changes)}"
    layout = _layout(
        title,
        barmode="group",
        height=max(360, 90 + 22 * len(shown) * (1 + (len(series) > 1))),
        yaxis={"autorange": "reversed", "tickfont": {"family": "ui-monospace, monospace", "size": 11}},
        xaxis={"title": {"text": "B − A (spills: count; memory: bytes)"}},
        legend={"orientation": "h", "y": -0.12 if shown else 1},
    )
    figs["plot-spills"], marks["plot-spills"] = _figure(bars, layout), len(shown)
    shifts = data.mix_shifts(r)
    bar = {
        "type": "bar",
        "orientation": "h",  # group names on the y axis: horizontal labels, never overlapping
        "y": list(shifts),
        "x": list(shifts.values()),
        "marker": {"color": ["#d62728" if v > 0 else "#2ca02c" for v in shifts.values()]},
    }
    layout = _layout(
        "instruction-mix shift by group (sum of B − A over paired kernels)",
        yaxis={"autorange": "reversed"},
        xaxis={"title": {"text": "instructions, B − A"}},
        height=max(360, 90 + 22 * len(shifts)),
    )
    figs["plot-mix"], marks["plot-mix"] = _figure([bar], layout), len(shifts)
    return figs, marks


SIDE_COLORS = {"A": "#1f77b4", "B": "#d62728"}


def autotune_section(
    sides: list[tuple[str, list[dict[str, Any]]]], table: tuple[list[str], list[list[str]]]
) -> tuple[dict[str, Any], dict[str, int], str]:
    """ "autotune: winners and losers": figures (time against registers, and against occupancy; one point
    per config with a time and a linked folder), their marks, and the section's HTML (empty without data)."""
    if not any(rows for _, rows in sides):
        return {}, {}, ""
    traces, undrawn = autotune.points(sides)
    figs: dict[str, Any] = {}
    marks: dict[str, int] = {}
    drawn = sum(len(ps) for ps in traces.values())
    words = wording_of({row.get("backend") for _, rows in sides for row in rows if row.get("backend")})
    unit = words.occupancy_unit
    ticks = log_ticks([p["time"] for ps in traces.values() for p in ps])
    for element, x_key, x_title in (
        ("plot-autotune-registers", "regs", f"{words.register_title} of the config's folder"),
        ("plot-autotune-occupancy", "occupancy", f"occupancy ({unit}) of the config's folder"),
    ):
        scatter = []
        count = 0
        for name, ps in sorted(traces.items()):
            color = SIDE_COLORS.get(name.split(" ", 1)[0], "#d62728" if "winners" in name else "#1f77b4")
            ps = [p for p in ps if p[x_key] is not None]
            count += len(ps)
            scatter.append(
                {
                    "type": "scatter",
                    "x": [p[x_key] for p in ps],
                    "y": [p["time"] for p in ps],
                    "text": [p["text"] for p in ps],
                    "mode": "markers",
                    "name": name,
                    "marker": {
                        "color": color,
                        "size": 11 if "winners" in name else 7,
                        "opacity": 0.9 if "winners" in name else 0.5,
                        "symbol": "star" if "winners" in name else "circle",
                    },
                    "hovertemplate": "%{text}<br>%{y:.4g} ms<extra>" + name + "</extra>",
                }
            )
        layout = _layout(
            f"autotune: time vs {'occupancy' if x_key == 'occupancy' else 'registers'} (one point per config)",
            xaxis={"title": {"text": x_title}},
            yaxis={"title": {"text": "time (ms, log scale)"}, "type": "log", **ticks},
        )
        if count:
            figs[element], marks[element] = _figure(scatter, layout), count
    head, rows = table
    caption = f"{drawn} config{'s' * (drawn != 1)} drawn"
    if undrawn:
        caption += f"; {undrawn} without a time or a linked kernel folder are listed only"
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    divs = "".join(f'<div id="{p}" class="plot"></div>' for p in figs)
    section = (
        f'<h2 id="autotune">autotune: winners and losers</h2><p id="autotune-caption">{html.escape(caption)}</p>'
        f'<div class="grid">{divs}</div><div class="tablebox"><table id="autotune-table"><thead><tr>'
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + f"</tr></thead><tbody>{body}</tbody></table></div>"
    )
    return figs, marks, section


def _page(
    title: str, subtitle: str, plots: list[str], headers: list[str], payload: dict[str, Any], extra: str = ""
) -> str:
    payload["name_col"] = headers.index("kernel")
    doc = json.dumps(payload, separators=(",", ":"), default=str).replace("</", "<\\/")
    statuses = sorted({r["status"] for r in payload["rows"] if r["status"]})
    options = "".join(f'<option value="{html.escape(s)}">{html.escape(s)}</option>' for s in statuses)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    divs = "".join(f'<div id="{p}" class="plot{" wide" if p in WIDE else ""}"></div>' for p in plots)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="generator" content="kdb report">
<title>{html.escape(title)}</title><style>{STYLE}</style>
<script>{get_plotlyjs()}</script></head>
<body><h1>{html.escape(title)}</h1><p id="summary" style="white-space:pre-line">{html.escape(subtitle)}</p>
<div class="grid">{divs}</div>
<h2>Kernels</h2><p><input id="filter" placeholder="filter by name, key or reason" size="40">
<select id="status"><option value="">every status</option>{options}</select> <span id="count"></span>
 — click a column to sort, a row (or a point) for its drill-down</p>
<div id="tablebox"><table id="kernels"><thead><tr>{head}</tr></thead><tbody></tbody></table></div>
<div id="drill"></div>{extra}
<script type="application/json" id="kdb-data">{doc}</script>
<script>{APP}</script></body></html>
"""


def diff_report(
    r: DiffResult,
    views: list[KernelDeepView],
    lines: dict[tuple[str, str], list[dict[str, Any]]],
    tuned: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], []),
    full: int = 50,
) -> str:
    """The page of a diff: plots, the ranked table with reasons, a drill-down per kernel (`views`: the deep views
    of the kernels it shows; ISA hunks in full for the `full` worst), and where either side was autotuned
    (`tuned`: each side's Catalog.autotune_configs) its winners and losers."""
    figs, marks = diff_figures(r)
    tuned_figs, tuned_marks, extra = autotune_section(
        [("A", tuned[0]), ("B", tuned[1])], (autotune.WINNERS_HEAD, autotune.winner_rows(r.winners))
    )
    payload: dict[str, Any] = {
        "kind": "diff",
        "figures": figs,
        "marks": marks,
        "rows": data.diff_rows(r),
        "drill": data.diff_drill(r, views, lines, full),
        "fact_head": ["fact", "A", "B", "delta", ""],
        "mix_head": ["group", "A", "B", "delta"],
        "clickable": ["plot-vgpr", "plot-loop-scratch"],
        "summary": data.summary_counts(r),
    }
    title = f"kdb diff {r.a_label} → {r.b_label}"
    subtitle = summary_line(r) + (f"; fired: {', '.join(r.fired)}" if r.fired else "")
    subtitle += "".join(f"\nassumed: {line}" for line in r.assumptions)
    payload["figures"] = {**figs, **tuned_figs}
    payload["marks"] = {**marks, **tuned_marks}
    words = wording_of({k.facts.backend for k in r.kernels if k.facts is not None})
    headers = [h for h in HEADERS if h not in ("time", "why")]  # the terminal's and markdown's alone
    return _page(title, subtitle, list(figs), vendor_headers(headers, words), payload, extra)


def snapshot_report(
    tag: str, kernels: list[dict[str, Any]], details: dict[str, dict[str, Any]], tuned: Sequence[dict[str, Any]] = ()
) -> str:
    """The page of one snapshot: occupancy by limiter, the register distribution, the spilling kernels, the table
    (details: cache key -> `lines` and `mix` rows of the catalog's kernel_detail), and where the snapshot was
    autotuned (`tuned`: Catalog.autotune_configs) its winners and losers."""
    lines = {key: d.get("lines", []) for key, d in details.items()}
    mixes: dict[str, dict[str, int]] = {}
    for key, d in details.items():
        for m in d.get("mix", []):
            mixes.setdefault(key, {})[m["grp"]] = mixes.get(key, {}).get(m["grp"], 0) + m["count"]
    figs: dict[str, Any] = {}
    marks: dict[str, int] = {}
    by_limiter = data.occupancy_by_limiter(kernels)
    labels = sorted(
        {o for c in by_limiter.values() for o in c}, key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0)
    )
    backends = {k.get("backend") for k in kernels}
    words = wording_of(backends)
    unit = words.occupancy_unit
    bars = [
        {"type": "bar", "x": list(counts), "y": list(counts.values()), "name": lim}
        for lim, counts in by_limiter.items()
    ]
    layout = _layout(
        f"occupancy ({unit}) by limiter, kernels",
        barmode="stack",
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": labels, "title": {"text": "occupancy"}},
        yaxis={"title": {"text": "kernels"}},
    )
    figs["plot-limiter"], marks["plot-limiter"] = _figure(bars, layout), sum(len(c) for c in by_limiter.values())
    regs = data.register_values(kernels)
    title = words.register_title
    hist = {"type": "histogram", "x": regs, "nbinsx": 32, "marker": {"color": "#1f77b4"}}
    layout = _layout(f"{title} per kernel", xaxis={"title": {"text": title}}, yaxis={"title": {"text": "kernels"}})
    figs["plot-registers"], marks["plot-registers"] = _figure([hist], layout), len(regs)
    spill = data.spilling(kernels)
    shown = spill[:SPILL_BARS]
    series = [("scratch", words.scratch_title)] + (
        [("spills", "VGPR + SGPR spills")] if spill_counts_of(backends) else []
    )
    bars = _kernel_bars(shown, series)
    title = "spilling kernels" + (
        f": the {len(shown)} with the most {words.scratch_title} of {len(spill)}" if len(spill) > len(shown) else ""
    )
    layout = _layout(
        title,
        barmode="group",
        height=max(360, 90 + 22 * len(shown) * len(series)),
        yaxis={"autorange": "reversed", "tickfont": {"family": "ui-monospace, monospace", "size": 11}},
        xaxis={"title": {"text": "bytes; spills: count"}},
        legend={"orientation": "h", "y": -0.12 if shown else 1},
    )
    figs["plot-spilling"], marks["plot-spilling"] = _figure(bars, layout), len(shown)
    rows = data.snapshot_rows(kernels)
    headers = vendor_headers(data.SNAPSHOT_HEADERS, words)
    drill = {}
    for r, k in zip(rows, kernels, strict=True):
        facts = [[h, c, "", "", ""] for h, c in zip(headers, r["cells"], strict=True)]
        drill[str(r["id"])] = {
            "name": k["name"],
            "a_key": k["cache_key"],
            "b_key": None,
            "status": "",
            "reason": None,
            "facts": facts,
            "mix": [[g, c, "", ""] for g, c in sorted((mixes.get(k["cache_key"]) or {}).items())],
            "metadata": None,
            "isa": None,
            "hot_a": data.hot_lines(lines.get(k["cache_key"], [])),
            "hot_b": [],
        }
    payload: dict[str, Any] = {
        "kind": "snapshot",
        "figures": figs,
        "marks": marks,
        "rows": rows,
        "drill": drill,
        "fact_head": ["fact", "value", "", "", ""],
        "mix_head": ["group", "instructions", "", ""],
        "clickable": [],
    }
    tuned_figs, tuned_marks, extra = autotune_section(
        [(tag, list(tuned))], (autotune.TUNED_HEAD, autotune.tuned_kernels(list(tuned)))
    )
    payload["figures"] = {**figs, **tuned_figs}
    payload["marks"] = {**marks, **tuned_marks}
    return _page(f"kdb snapshot {tag}", f"{len(kernels)} kernels", list(figs), headers, payload, extra)
