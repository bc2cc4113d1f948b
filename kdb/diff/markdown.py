"""`kdb diff --format markdown`: a pull-request comment that always fits GitHub's 65,536-character limit.

Summary, the fired rules with their kernels, the top N kernels as a table, the rest folded in `<details>`
while room remains and counted after that; deep views (--kernel) follow, each folded and cut to fit.
Pure functions."""

from __future__ import annotations

from collections.abc import Iterable

from kdb.diff.groups import Group, collapsed, groups_line
from kdb.diff.model import UNPAIRED, DiffResult, KernelDeepView, KernelDiff, Status, Winner
from kdb.diff.terminal import (
    HEADERS,
    TableOptions,
    cliff_line,
    group_row,
    row,
    rows_shown,
    rules_line,
    summary_line,
    why_line,
)
from kdb.diff.views import view_markdown
from kdb.diff.winners import config_text, listed, resources_text, timing_text, winners_summary
from kdb.render.tables import elide_end, elide_middle

COMMENT_LIMIT = 65_536
DEFAULT_TOP = 25
FIRED_LISTED = 30
NAME_WIDTH = 80
REASON_WIDTH = 160
_TRAILER = 1_000  # kept free for the closing notes


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")


_TIME, _WHY = HEADERS.index("time"), HEADERS.index("why")


def _columns(r: DiffResult) -> list[int]:
    """The table's columns: `time` only where an imported profile measured a kernel of the diff, `why` only where
    --why named a kernel's stage."""
    timed = any(k.measured_ns is not None for k in r.kernels)
    why = any(k.why is not None for k in r.kernels)
    return [i for i in range(len(HEADERS)) if (timed or i != _TIME) and (why or i != _WHY)]


def _md_row(r: DiffResult, k: KernelDiff, columns: list[int], group: Group | None = None) -> str:
    cells = row(k, r.key_of(k))
    if group is not None:  # an autotune group's row (kdb/diff/groups.py)
        cells = group_row(k, group, cells)
    cells[2] = elide_middle(cells[2], NAME_WIDTH, 0.35)
    cells[-1] = elide_end(cells[-1], REASON_WIDTH)
    return "| " + " | ".join(_esc(cells[i]) for i in columns) + " |\n"


def _head(columns: list[int]) -> str:
    return "| " + " | ".join(HEADERS[i] for i in columns) + " |\n" + "|" + "|".join("---" for _ in columns) + "|\n"


class _Budget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.used = 0

    def fits(self, text: str, reserve: int = _TRAILER) -> bool:
        return self.used + len(text) <= self.limit - reserve

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.used += len(text)

    def text(self) -> str:
        return "".join(self.parts)


def _notes(r: DiffResult, b: _Budget) -> None:
    """Rules that met unknown figures, and kernels the upgrade brought near an occupancy cliff."""
    if r.unknown_rules:
        b.add(f"**unknown:** {_esc(rules_line(r))}\n\n")
    if (cliffs := cliff_line(r)) is not None:
        b.add(f"> **{_esc(cliffs)}**\n\n")


def _fired(r: DiffResult, budget: _Budget) -> None:
    for rule in r.fired:
        hits = [k for k in r.kernels if rule in k.fired_rules]
        won = [w for w in r.winners if rule in w.fired_rules]
        if won and not hits:
            text = f"**fired `{rule}`** on {len(won)} autotune winner{'s' * (len(won) != 1)} (below)\n\n"
            if budget.fits(text):
                budget.add(text)
            continue
        head = f"**fired `{rule}`** on {len(hits)} kernel{'s' * (len(hits) != 1)}:\n\n"
        if not budget.fits(head):
            continue
        budget.add(head)
        lines = (
            f"- `{r.key_of(k)}` `{_esc(elide_middle(k.name, NAME_WIDTH, 0.35))}` — {k.status.label}: "
            f"{_esc(elide_end(k.reason or '', REASON_WIDTH))}\n"
            for k in hits[:FIRED_LISTED]
        )
        more = "- … and {} more (`--format json` lists every kernel's `fired_rules`)\n"
        _add_listed(budget, lines, len(hits), 4 * _TRAILER, more)
        budget.add("\n")


def _add_listed(budget: _Budget, lines: Iterable[str], total: int, reserve: int, more: str) -> None:
    """Add each line while it fits with `reserve` characters to spare, then `more` (its `{}` the number of the
    `total` items not added) when some were left out."""
    added = 0
    for line in lines:
        if not budget.fits(line, reserve):
            break
        budget.add(line)
        added += 1
    if added < total:
        budget.add(more.format(total - added))


_WINNER_HEAD = "| kernel | A winner | B winner | A resources | B resources | worse |\n|---|---|---|---|---|---|\n"


def _winner_cell(w: Winner | None, text: str) -> str:
    if w is None:
        return "-"
    timing = timing_text(w)
    return _esc(elide_end(f"{text}{' (' + timing + ')' if timing else ''}", REASON_WIDTH))


def _winners(r: DiffResult, b: _Budget, top: int) -> None:
    b.add(f"\n#### Autotune winners\n\n{winners_summary(r.winners)}.\n\n")
    shown = listed(r.winners)
    if not shown:
        return
    b.add(_WINNER_HEAD)
    lines = (
        f"| `{_esc(elide_middle(w.name, NAME_WIDTH))}` {w.status}"
        f"{' `' + _esc(elide_middle(w.module, 24)) + '`' if w.module else ''} "
        f"| {_winner_cell(w.a, config_text(w.a.config) if w.a else '')} "
        f"| {_winner_cell(w.b, config_text(w.b.config) if w.b else '')} "
        f"| {_esc(resources_text(w.a)) if w.a else '-'} | {_esc(resources_text(w.b)) if w.b else '-'} "
        f"| {_esc(', '.join(w.worse) or (w.unchecked or ''))} |\n"
        for w in shown[:top]
    )
    _add_listed(
        b, lines, len(shown), 2 * _TRAILER, "\n{} more winners not listed; `--format json` lists every winner.\n"
    )


def render_markdown(
    r: DiffResult,
    views: list[KernelDeepView] | None = None,
    top: int | None = None,
    limit: int = COMMENT_LIMIT,
) -> str:
    top = DEFAULT_TOP if top is None else top
    b = _Budget(limit)
    b.add(f"### kdb diff `{_esc(r.a_label)}` → `{_esc(r.b_label)}`\n\n{summary_line(r)}\n\n")
    for line in (groups_line(r), why_line(r)):  # autotune groups (kdb/diff/groups.py), --why's stages
        b.add(f"{_esc(line)}\n\n" if line else "")
    if r.trust_problem:
        b.add(f"**untrusted:** {_esc(r.trust_problem)}\n\n")
    for line in r.assumptions:
        b.add(f"> **assumed:** {_esc(line)}\n>\n")
    if r.assumptions:
        b.add("\n")
    _notes(r, b)
    _fired(r, b)
    changed, _ = rows_shown(r, TableOptions(only="changed"))
    standing = collapsed(r, changed)[1]
    rows = "changed rows (kernels and autotune groups)" if standing else "changed kernels"
    columns = _columns(r)
    head_line = _head(columns)
    if not changed:
        b.add("No kernel changed.\n")
    else:
        head = f"#### {'Top ' + str(min(top, len(changed))) + ' of ' if len(changed) > top else ''}"
        b.add(f"{head}{len(changed)} {rows}, worst first\n\n" + head_line)
        shown = 0
        for k in changed[:top]:
            line = _md_row(r, k, columns, standing.get(id(k)))
            if not b.fits(line, 3 * _TRAILER):
                break
            b.add(line)
            shown += 1
        rest = changed[shown:]
        if rest and b.fits(head_line, 3 * _TRAILER):
            b.add(f"\n<details><summary>{len(rest)} more {rows}</summary>\n\n" + head_line)
            folded = 0
            for k in rest:
                line = _md_row(r, k, columns, standing.get(id(k)))
                if not b.fits(line, 2 * _TRAILER):
                    break
                b.add(line)
                folded += 1
            b.add("\n</details>\n")
            shown += folded
        if shown < len(changed):
            b.add(
                f"\n{len(changed) - shown} more {rows} not listed (the comment limit); "
                "`kdb diff --format csv` lists every kernel.\n"
            )
    unpaired = [f"{r.count(s)} {s.label}" for s in UNPAIRED if r.count(s)]
    notes = [f"{r.count(Status.SAME)} same"] + unpaired
    b.add(f"\n{', '.join(notes)} not listed (`--format json` lists them).\n")
    if r.winners:
        _winners(r, b, top)
    views = views or []
    for i, v in enumerate(views):
        room = b.limit - b.used - 200
        if room < 500:
            b.add(f"\n{len(views) - i} deep views left out (the comment limit).\n")
            break
        b.add(view_markdown(v, room))
    text = b.text()
    return text if len(text) <= limit else text[: limit - 2] + "…\n"
