"""The terminal view of `kdb diff`: a table that fits a given width, filters, fired rules first. Pure: the CLI
decides the width, colour and pager, and passes them in (TableOptions); nothing here looks at the terminal."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kdb.analysis.registry import roles_of
from kdb.diff.groups import Group, collapsed, expanded, groups_line, range_cell
from kdb.diff.model import UNPAIRED, WHY_STAGES, DiffResult, KernelDiff, Rule, Status, WinnerDiff
from kdb.diff.rules import evaluate_rule
from kdb.diff.verdict import NEAR_CLIFF
from kdb.diff.winners import listed, winner_lines, winners_summary
from kdb.figures import FigureRoles
from kdb.render.tables import TableLayout, elide_end, elide_middle, fitted_table, paint, shared_prefix

ONLY = ("regressed", "improved", "changed", "fired", "new-spills", "unmatched")
DEFAULT_WIDTH = 100
STYLE = {
    Status.REGRESSED: "red",
    Status.MIXED: "yellow",
    Status.IMPROVED: "green",
    Status.NEUTRAL: "dim",
    Status.ONLY_IN_A: "cyan",
    Status.ONLY_IN_B: "cyan",
    Status.AMBIGUOUS: "cyan",
}
HEADERS = [
    "status",
    "key",
    "kernel",
    "VGPRs",
    "AGPRs",
    "SGPRs",
    "vspill",
    "sspill",
    "scratch",
    "occupancy",
    "time",
    "stage",
    "why",
    "reason",
]
_KEY, _NAME, _STAGE, _WHY, _REASON = 1, 2, HEADERS.index("stage"), HEADERS.index("why"), len(HEADERS) - 1
# Columns left out, in this order, while status, key, NAME_FLOOR of the name and REASON_FLOOR of the reason do
# not fit: the reason names the deltas that decided the verdict, so the figures go first, least telling first.
# Measured time (kdb profile import, only drawn where a profile ran a kernel) goes last: it is what --rank time orders by.
OPTIONAL = [_STAGE, HEADERS.index("AGPRs"), HEADERS.index("sspill"), HEADERS.index("SGPRs")]
OPTIONAL += [HEADERS.index("scratch"), HEADERS.index("vspill"), HEADERS.index("occupancy"), HEADERS.index("VGPRs")]
OPTIONAL += [HEADERS.index("time"), _WHY]  # `--why`'s stage (only drawn where asked) goes last of all
NAME_FLOOR = 20
REASON_FLOOR = 24
LEGEND = (
    "key: the kernel's cache key (kdb show TAG --kernel KEY, kdb diff A B --kernel KEY); vspill/sspill: VGPR/SGPR "
    "spills; scratch in bytes; occupancy: waves per SIMD and its limiter; AGPRs are part of VGPRs on gfx90a+"
)
WHY_NOTE = (
    "why (--why): the stage that carries the change; B's backend stages on A's LLIR (and B's ptxas on A's PTX where "
    "there is one) give triton: A's figures, llvm/ptxas: B's, both: neither; --kernel KEY shows the figures"
)
TIME_NOTE = (
    "time: the kernel's share of the GPU kernel time of the profiles imported under each tag (kdb profile import), A→B"
)
NAME_HEAD_SHARE = 0.35  # an elided name keeps more of its tail (Inductor's distinguishing suffix) than its head
# Inductor's generated kernels: triton_{poi,per,red,tem,...}_fused_<ops>_<n>; shown as `poi:<ops>_<n>`.
_INDUCTOR_NAME = re.compile(r"^triton_([a-z]{3})_fused_(?=.)")
INDUCTOR_NOTE = "poi:/per:/red:/tem: = triton_poi_fused_ … (Inductor's pointwise, persistent, reduction, template)"
_NEW_SPILLS = Rule("new-spills", "new-spills")
FIRED_LISTED = 20


@dataclass(frozen=True)
class TableOptions:
    width: int = DEFAULT_WIDTH
    color: bool = False
    only: str | None = None  # one of ONLY
    top: int | None = None  # at most this many rows
    show_all: bool = False  # unmatched and ambiguous kernels as rows, not counts
    expand: bool = False  # every member of an autotune group as a row (default: one row per group)


def why_line(r: DiffResult) -> str | None:
    """`--why`: how many changed kernels each stage carries (None without --why)."""
    stages = [k.why.stage for k in r.kernels if k.why is not None]
    if not stages:
        return None
    counts = ", ".join(f"{stage} {stages.count(stage)}" for stage in WHY_STAGES if stage in stages)
    return f"why: {counts} (the stage that carries each changed kernel's change)"


def summary_line(r: DiffResult) -> str:
    """Every status with its count, in the words of the table; the counts add up to the kernels compared."""
    counts = r.status_counts
    n = len(r.kernels)
    return f"{n} kernel{'s' * (n != 1)}: " + ", ".join(f"{s.label} {counts[s]}" for s in Status)


def display_names(names: Sequence[str]) -> tuple[list[str], str]:
    """Names as a column shows them, and a note of what was dropped: Inductor's `triton_poi_fused_` as `poi:`,
    and the prefix every name shares (at a `_`), so that what tells the kernels apart survives elision."""
    prefix = shared_prefix(names)
    out, notes = [], []
    inductor = False
    for n in names:
        short = _INDUCTOR_NAME.sub(r"\1:", n)
        if short != n:
            inductor = True
        elif prefix and len(n) > len(prefix):
            short = n[len(prefix) :]
        out.append(short)
    if prefix and any(not _INDUCTOR_NAME.match(n) and len(n) > len(prefix) for n in names):
        notes.append(f"names without the prefix {prefix} every row shares")
    if inductor:
        notes.append(INDUCTOR_NOTE)
    return out, ("kernel: " + "; ".join(notes)) if notes else ""


def assumption_text(r: DiffResult, color: bool = False) -> str:
    """One line per thing kdb assumed (an unknown release or target, figures it could not compute)."""
    return "".join(paint(f"assumed: {line}", "yellow", color) + "\n" for line in r.assumptions)


def cliff_line(r: DiffResult) -> str | None:
    """`warning: 3 kernels now within 8 registers of an occupancy cliff (they were not in A): KEY name, …`."""
    near = [k for k in r.kernels if k.warnings]
    if not near:
        return None
    names = ", ".join(f"{r.key_of(k)} {k.name}" for k in near[:3]) + (", …" if len(near) > 3 else "")
    return (
        f"warning: {len(near)} kernel{'s' * (len(near) != 1)} now within {NEAR_CLIFF} registers of an occupancy "
        f"cliff (not in A): {names}"
    )


def _cliff_text(r: DiffResult, opts: TableOptions) -> str:
    line = cliff_line(r)
    if line is None:
        return ""
    return paint(textwrap.fill(line, max(opts.width, 40), subsequent_indent="  "), "yellow", opts.color) + "\n"


def rules_line(r: DiffResult) -> str:
    """The --fail-on rules, those that fired, and those that met an unknown figure (and what that does)."""
    text = f"fail-on: {', '.join(x.text for x in r.rules)}; fired: {', '.join(r.fired) or 'none'}"
    if r.unknown_rules:
        n = sum(1 for k in r.kernels if k.unknown_rules)
        outcome = "not gating: --allow-unknown" if r.allow_unknown else "exit 8 unless --allow-unknown"
        why = "; ".join(r.unknown_reasons) or "a figure they read could not be computed"
        text += f"; unknown: {', '.join(r.unknown_rules)} on {n} kernel{'s' * (n != 1)} ({why}: {outcome})"
    return text


def selected(k: KernelDiff, only: str | None) -> bool:
    """Whether `--only` keeps a kernel (None: every kernel that is not the same)."""
    if only is None:
        return k.status is not Status.SAME
    if only == "regressed":
        return k.status.worse
    if only == "improved":
        return k.status is Status.IMPROVED
    if only == "changed":
        return k.status.changed
    if only == "fired":
        return bool(k.fired_rules)
    if only == "new-spills":
        return evaluate_rule(_NEW_SPILLS, k)
    return k.status in UNPAIRED


def _text(v: Any) -> str:
    return "-" if v is None else str(v)


def _pair(k: KernelDiff, metric: str) -> str:
    """`a`, or `a→b` when the two sides differ; one side's value for an unpaired kernel."""
    if k.status in UNPAIRED or not (k.a and k.b):
        facts = k.facts
        v = facts.get(metric) if facts else None
        return "" if v is None else str(v)
    a, b = k.a.get(metric), k.b.get(metric)
    if a == b:
        return "" if a is None else str(a)
    return f"{_text(a)}→{_text(b)}"


def occupancy_text(value: Any, limiter: Any) -> str:
    """Occupancy 0 with limiter `lds`: the LDS request exceeds what one workgroup may use."""
    if value == 0 and limiter == "lds":
        return "cannot launch"
    return "-" if value is None else str(value)


def occupancy_cell(k: KernelDiff) -> str:
    """Occupancy with its limiter: `2→1 vgpr`, `4 lds→vgpr`, `cannot launch`."""
    sides = [f for f in (k.a, k.b) if f is not None] if k.status not in UNPAIRED else [k.facts]
    values = [(f.get("occupancy"), f.get("occupancy_limiter")) for f in sides if f is not None]
    if not values or all(v is None for v, _ in values):
        return ""
    texts = [occupancy_text(v, lim) for v, lim in values]
    occ = texts[0] if len(set(texts)) == 1 else "→".join(texts)
    limiters = [lim for v, lim in values if lim and occupancy_text(v, lim) != "cannot launch"]
    lim = "" if not limiters else limiters[0] if len(set(limiters)) == 1 else "→".join(limiters)
    return f"{occ} {lim}".strip()


def time_cell(k: KernelDiff) -> str:
    """Each side's share of its profiles' GPU kernel time: `3.5%`, `1.2%→3.5%`, `-→3.5%`; empty when unmeasured."""
    sides = [k.a, k.b] if k.status not in UNPAIRED and k.a and k.b else [k.facts]
    shares = [None if f is None else f.get("measured_share") for f in sides]
    if all(v is None for v in shares):
        return ""
    texts = ["-" if v is None else f"{100 * v:.1f}%" for v in shares]
    return texts[0] if len(set(texts)) == 1 else "→".join(texts)


def roles_of_kernel(k: KernelDiff) -> FigureRoles:
    return roles_of(k.facts.backend if k.facts is not None else None)


def row(k: KernelDiff, key: str, name: str | None = None) -> list[str]:
    """The table's cells of one kernel: `key` as DiffResult.key_of prints it, `name` as display_names shows it."""
    figures = roles_of_kernel(k).table_cells  # VGPRs, AGPRs, SGPRs, vspill, sspill, scratch in its backend's terms
    return [
        k.status.label,
        key,
        k.name if name is None else name,
        *("" if column is None else _pair(k, column) for column in figures),
        occupancy_cell(k),
        time_cell(k),
        k.first_changed_stage or "",
        k.why.stage if k.why is not None else "",
        (k.reason or "") if k.status is not Status.SAME else "",
    ]


def group_row(k: KernelDiff, g: Group, cells: list[str]) -> list[str]:
    """The row of an autotune group: its worst member's cells, each figure as its range over the members, and
    `k of n configs regressed` before the worst member's reason."""
    figures = roles_of_kernel(k).table_cells
    out = list(cells)
    for i, column in enumerate(figures):
        if column is not None:
            out[3 + i] = range_cell(g.members, column)
    role = "worst" if k is g.worst else "winner"  # the row stands for its autotune winner where kdb knows it
    out[_REASON] = f"{g.caption}; {role}: {cells[_REASON]}" if cells[_REASON] else g.caption
    return out


def rows_shown(r: DiffResult, opts: TableOptions) -> tuple[list[KernelDiff], int]:
    """The kernels the table lists, in report order, and how many more `--top` cut."""
    keep = [
        k
        for k in r.kernels
        if selected(k, opts.only) and (opts.show_all or opts.only == "unmatched" or k.status not in UNPAIRED)
    ]
    keep = expanded(r, keep) if opts.expand else collapsed(r, keep)[0]
    if opts.top is not None and len(keep) > opts.top:
        return keep[: opts.top], len(keep) - opts.top
    return keep, 0


def _fired_section(r: DiffResult, opts: TableOptions) -> str:
    out = ""
    for rule in r.fired:
        hits = [k for k in r.kernels if rule in k.fired_rules]
        won = [w for w in r.winners if rule in w.fired_rules]
        if won and not hits:
            out += paint(f"fired {rule}: {len(won)} autotune winner{'s' * (len(won) != 1)}", "red", opts.color) + "\n"
            for w in won[:FIRED_LISTED]:
                out += elide_end(f"  {w.name}  {', '.join(w.worse) or w.status}  {w.module or ''}", opts.width) + "\n"
            if len(won) > FIRED_LISTED:
                out += f"  … and {len(won) - FIRED_LISTED} more (the winners section below)\n"
            continue
        out += paint(f"fired {rule}: {len(hits)} kernel{'s' * (len(hits) != 1)}", "red", opts.color) + "\n"
        for k in hits[:FIRED_LISTED]:
            name_width = max(min(len(k.name), opts.width // 2), 12)
            name = elide_middle(k.name, name_width, NAME_HEAD_SHARE)
            text = f"  {r.key_of(k)} {name}  {k.status.label}: {k.reason or ''}"
            out += elide_end(text.rstrip(), opts.width) + "\n"
        if len(hits) > FIRED_LISTED:
            out += f"  … and {len(hits) - FIRED_LISTED} more (--only fired lists them)\n"
    return out


def winners_section(winners: tuple[WinnerDiff, ...], width: int, limit: int = FIRED_LISTED) -> str:
    """The autotune winners: a summary line, then each flip and each winner whose folder got worse."""
    out = elide_end(winners_summary(winners), max(width, 40)) + "\n"
    shown = listed(winners)
    for w in shown[:limit]:
        out += "".join(elide_end(line, max(width, 40)) + "\n" for line in winner_lines(w))
    if len(shown) > limit:
        out += f"… and {len(shown) - limit} more (--format json lists every winner)\n"
    return out


@dataclass
class _Drawn:
    """What render_table drew: the kernels and their cells, how many `--top` cut, the columns left out."""

    shown: list[KernelDiff]
    cut: int
    cells: list[list[str]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    name_note: str = ""


def _table_notes(r: DiffResult, opts: TableOptions, drawn: _Drawn) -> list[str]:
    """The lines under the table: rows not shown, columns left out, what names and columns mean."""
    shown, cells, cut, left_out, name_note = drawn.shown, drawn.cells, drawn.cut, drawn.left_out, drawn.name_note
    notes: list[str] = []
    if cut:
        notes.append(f"{cut} more rows not shown (--top {opts.top})")
    same = r.count(Status.SAME)
    if same and opts.only is None:
        notes.append(f"{same} same kernels not shown")
    unpaired = [s for s in UNPAIRED if r.count(s)]
    if unpaired and not opts.show_all and opts.only in (None, "changed"):
        counts = ", ".join(f"{r.count(s)} {s.label}" for s in unpaired)
        notes.append(f"{counts} not shown (--all lists them)")
    if left_out:
        notes.append(
            textwrap.fill(f"left out at {opts.width} columns: {', '.join(left_out)} (wider: COLUMNS=160)", opts.width)
        )
    if name_note:
        notes.append(textwrap.fill(name_note, max(opts.width, 40)))
    if shown:
        notes.append(textwrap.fill(LEGEND, max(opts.width, 40)))
    if any(c[HEADERS.index("time")] for c in cells):
        notes.append(textwrap.fill(TIME_NOTE, max(opts.width, 40)))
    if any(c[_WHY] for c in cells):
        notes.append(textwrap.fill(WHY_NOTE, max(opts.width, 40)))
    for roles in {r.backend: r for r in map(roles_of_kernel, shown) if r.wording.headers}.values():
        words = roles.wording
        notes.append(f"{roles.vendor} kernels: VGPRs = {words.register_title}, scratch = {words.scratch_title}")
    return notes


def render_table(r: DiffResult, opts: TableOptions | None = None) -> str:
    opts = opts or TableOptions()
    out = f"kdb diff {r.a_label} → {r.b_label}{' (across targets)' if r.across_targets else ''}\n"
    out += textwrap.fill(summary_line(r), max(opts.width, 40), subsequent_indent="  ") + "\n"
    if grouped := groups_line(r):
        out += textwrap.fill(grouped, max(opts.width, 40), subsequent_indent="  ") + "\n"
    if why := why_line(r):
        out += textwrap.fill(why, max(opts.width, 40), subsequent_indent="  ") + "\n"
    out += assumption_text(r, opts.color) + _cliff_text(r, opts)
    if r.fired:
        out += "\n" + _fired_section(r, opts)
    shown, cut = rows_shown(r, opts)
    drawn = _Drawn(shown, cut)
    if shown:
        width = max(opts.width, 40)
        names, drawn.name_note = display_names([k.name for k in shown])
        name_floor, reason_floor = (NAME_FLOOR, REASON_FLOOR) if width >= 80 else (12, 16)
        standing = {} if opts.expand else collapsed(r, shown)[1]
        cells = drawn.cells = [
            group_row(k, standing[id(k)], row(k, r.key_of(k), name)) if id(k) in standing else row(k, r.key_of(k), name)
            for k, name in zip(shown, names, strict=True)
        ]
        # columns with nothing to say on any row (AGPRs 0 everywhere, an NVIDIA diff's SGPRs) are not drawn
        blank = {i for i in range(3, _REASON) if all(c[i] in ("", "0") for c in cells)}
        columns = [i for i in range(len(HEADERS)) if i not in blank]
        at = {i: j for j, i in enumerate(columns)}
        out += "\n" + fitted_table(
            [HEADERS[i] for i in columns],
            [[c[i] for i in columns] for c in cells],
            width,
            TableLayout(
                elide={at[_NAME]: ("middle", name_floor), at[_REASON]: ("end", reason_floor)},
                optional=[at[i] for i in OPTIONAL if i in at],
                right=[at[i] for i in range(3, 9) if i in at],
                row_styles=[STYLE.get(k.status) for k in shown],
                color=opts.color,
                wrap=[at[_REASON]],
                head_share=NAME_HEAD_SHARE,
            ),
            drawn.left_out,
        )
    elif opts.only:
        out += f"\nno kernel is {opts.only}\n"
    notes = _table_notes(r, opts, drawn)
    if notes:
        out += "\n" + "\n".join(notes) + "\n"
    if r.winners:
        out += "\n" + winners_section(r.winners, opts.width)
    if r.rules:
        out += rules_line(r) + "\n"
    if r.trust_problem:
        out += paint(f"untrusted: {r.trust_problem}", "red", opts.color) + "\n"
    return out
