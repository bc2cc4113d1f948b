"""Text primitives every renderer shares: aligned tables (drawn with rich, the one module here that imports it),
CSV, markdown, JSON. Pure functions, no printing."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import orjson

FORMATS = ("table", "json", "csv")


def _string_keys(value: Any) -> Any:
    """`value` with every mapping key as text (for Python's encoder, which refuses a tuple key)."""
    if isinstance(value, dict):
        return {str(k): _string_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_string_keys(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    """What JSON has no type for: dates and times as ISO 8601 text, decimals as floats, bytes as hex,
    durations and UUIDs as text (as tables show them)."""
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, (timedelta, UUID)):
        return str(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


_ORJSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_APPEND_NEWLINE


def to_json(document: Any) -> str:
    """`document` as JSON indented by two spaces, keys in insertion order, non-ASCII kept. orjson writes it
    (Python's encoder is pure Python once it indents: 1.4 s of a 10k-kernel diff's document); what orjson
    refuses (a key that is not a string, an integer beyond 64 bits) goes through Python's encoder.
    Floats in exponent form read 1e-7 (Python's encoder: 1e-07), the same number; non-finite floats become
    null (Python's encoder would write NaN, which is not JSON)."""
    try:
        return orjson.dumps(document, default=_json_default, option=_ORJSON_OPTIONS).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        text = json.dumps(_string_keys(document), default=_json_default, indent=2, ensure_ascii=False)
        return text + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items())
    if isinstance(value, datetime):  # to the second; with its UTC offset when it has one
        return value.isoformat(sep=" ", timespec="seconds")
    return str(value)


def human_bytes(n: int | None) -> str:
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def render_rich(renderable: Any, width: int = 100) -> str:
    from rich.console import Console  # imported where drawn: 30 ms of every command's start-up otherwise

    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False).print(renderable)
    return buf.getvalue()


def table_text(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None, width: int | None = None
) -> str:
    """A plain aligned table; without a width it is as wide as its content (for pipes and files)."""
    plain = _plain_table(columns, rows, title, width)
    if plain is not None:
        return plain
    from rich.table import Table as RichTable

    t = RichTable(title=title, show_edge=False, pad_edge=False, box=None, header_style="bold")
    for c in columns:
        t.add_column(c, overflow="fold", min_width=min(len(c), 24))
    if width is None:
        cells = [[_cell(v) for v in r] for r in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
        width = max(sum(widths) + 2 * len(columns), 20)
    for r in rows:
        t.add_row(*(_cell(v) for v in r))
    return render_rich(t, width)


def _plain_text(text: str) -> bool:
    """Text rich draws as it is: printable ASCII, no markup (`[`), no `:name:` emoji code (two colons)."""
    return text.isascii() and text.isprintable() and "[" not in text and text.count(":") < 2


def _plain_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None, width: int | None
) -> str | None:
    """What rich draws for table_text's table (no box, no edge padding, two spaces between columns, every line
    as wide as the table) where nothing wraps and every cell is plain text, without importing rich (~40 ms of
    `kdb sql`'s start-up); None where rich has to draw it (tests/test_render_tables.py holds the two equal)."""
    if title is not None or not columns:
        return None
    if any(len(r) != len(columns) for r in rows):
        return None
    texts = [list(columns), *([_cell(v) for v in r] for r in rows)]
    if not all(_plain_text(c) for r in texts for c in r):
        return None
    widths = [max(len(r[i]) for r in texts) for i in range(len(columns))]
    if width is not None and sum(widths) + 2 * (len(columns) - 1) > width:
        return None
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + "\n" for r in texts)


def table_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([_cell(v) if not isinstance(v, (int, float)) else v for v in r])
    return buf.getvalue()


def table_markdown(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def esc(v: Any) -> str:
        return _cell(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(esc(v) for v in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def rows_as_dicts(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(columns, r, strict=False)) for r in rows]


def render_rows(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str, title: str | None = None, width: int | None = None
) -> str:
    if fmt == "json":
        return to_json(rows_as_dicts(columns, rows))
    if fmt == "csv":
        return table_csv(columns, rows)
    if fmt == "markdown":
        return table_markdown(columns, rows)
    return table_text(columns, rows, title, width)


# -- fitted tables: one line per row (two where a wrap column needs it) -----------------------------------------------------
ANSI = {"red": "\x1b[31m", "green": "\x1b[32m", "yellow": "\x1b[33m", "cyan": "\x1b[36m", "dim": "\x1b[2m"}
ANSI["bold"] = "\x1b[1m"
ANSI_RESET = "\x1b[0m"
GAP = 2


def paint(text: str, style: str | None, color: bool) -> str:
    """`text` in an ANSI style when colour is on (the CLI decides: a TTY, and NO_COLOR unset)."""
    return f"{ANSI[style]}{text}{ANSI_RESET}" if color and style else text


def elide_middle(text: str, width: int, head_share: float = 0.5) -> str:
    """`text` in at most `width` characters, its middle replaced by `…` (names keep their head and tail;
    `head_share` of the room goes to the head, the rest to the tail)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = min(max(int(width * head_share), 1), width - 1)
    tail = width - 1 - head
    return text[:head] + "…" + (text[len(text) - tail :] if tail else "")


def elide_end(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + "…" if width > 0 else ""


def shared_prefix(names: Sequence[str], sep: str = "_") -> str:
    """The longest prefix all of `names` (two or more distinct) share that ends with `sep`: what a column of
    them can drop without losing what tells them apart (a name that is the prefix alone is shown whole)."""
    if len(set(names)) < 2:
        return ""
    common = os.path.commonprefix(list(names))
    return common[: common.rfind(sep) + 1]


def wrap_cell(text: str, width: int, lines: int = 2) -> list[str]:
    """`text` in at most `lines` lines of `width` characters, broken after a space or comma where one is in
    the second half of a line; the last line is elided at its end when the text is longer still."""
    out: list[str] = []
    rest = text
    while rest and len(out) < lines - 1 and len(rest) > width:
        cut = max(rest.rfind(" ", 0, width + 1), rest.rfind(",", 0, width) + 1)
        if cut <= width // 2:
            cut = width
        out.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest or not out:
        out.append(elide_end(rest, width))
    return out


@dataclass(frozen=True)
class TableLayout:
    """How fitted_table fits its columns into the width (column indexes)."""

    elide: dict[int, tuple[str, int]] = field(default_factory=dict)  # index -> ("middle" | "end", minimum width)
    optional: Sequence[int] = ()  # dropped, in this order, while the table is too wide
    right: Sequence[int] = ()  # right-aligned
    row_styles: Sequence[str | None] | None = None  # paint each row's first cell
    color: bool = False
    wrap: Sequence[int] = ()  # a cell takes a second line before it is elided at its end
    head_share: float = 0.5  # what middle elision keeps of the head


def fitted_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    width: int,
    layout: TableLayout = TableLayout(),  # noqa: B008 (frozen: one shared default is safe)
    dropped: list[str] | None = None,
) -> str:
    """An aligned table of one line per row within `width` characters. When too wide: the gap narrows to one
    space, the `optional` columns are dropped (in that order) while that is not enough, then the columns named in
    `elide` (index -> ("middle" | "end", minimum width)) shrink, widest first (a `wrap` column counts half its
    width: its cells take a second line before they are elided at its end); a line still too long is cut.
    Only the first cell of a row is painted with its style; `head_share` is what middle elision keeps of the head;
    the headers of the optional columns left out are appended to `dropped`."""
    elide, optional, right, wrap = layout.elide, layout.optional, layout.right, layout.wrap
    row_styles, color, head_share = layout.row_styles, layout.color, layout.head_share
    cells = [[_cell(v).replace("\n", " ") for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    keep = list(range(len(headers)))

    def floor(i: int) -> int:
        return min(widths[i], max(elide[i][1], len(headers[i]))) if i in elide else widths[i]

    gap = GAP
    if sum(widths) + gap * (len(keep) - 1) > width:
        gap = 1
    for i in optional:
        if sum(floor(j) for j in keep) + gap * (len(keep) - 1) <= width:
            break
        keep.remove(i)
        if dropped is not None:
            dropped.append(headers[i])
    over = sum(widths[i] for i in keep) + gap * (len(keep) - 1) - width
    while over > 0:
        shrinkable = [i for i in keep if i in elide and widths[i] > floor(i)]
        if not shrinkable:
            break
        i = max(shrinkable, key=lambda j: widths[j] / 2 if j in wrap else widths[j])
        widths[i] -= 1
        over -= 1

    def line(values: Sequence[str], style: str | None, whole: bool = False) -> str:
        parts = []
        for i in keep:
            how = elide.get(i, ("end", 0))[0]
            v = values[i]
            text = elide_middle(v, widths[i], head_share) if how == "middle" else elide_end(v, widths[i])
            parts.append(text.rjust(widths[i]) if i in right else text.ljust(widths[i]))
        plain = elide_end((" " * gap).join(parts).rstrip(), width)
        first = len(plain) if whole else min(len(parts[0].rstrip()), len(plain))
        return paint(plain[:first], style, color) + plain[first:]

    def lines(values: list[str], style: str | None) -> list[str]:
        wrapped = {i: wrap_cell(values[i], widths[i]) for i in wrap if i in keep and len(values[i]) > widths[i]}
        if not wrapped:
            return [line(values, style)]
        first = [wrapped[i][0] if i in wrapped else v for i, v in enumerate(values)]
        second = [wrapped[i][1] if i in wrapped and len(wrapped[i]) > 1 else "" for i in range(len(values))]
        return [line(first, style), line(second, None)]

    out = [line(list(headers), "bold", whole=True)]
    styles = list(row_styles) if row_styles is not None else [None] * len(cells)
    for r, s in zip(cells, styles, strict=True):
        out += lines(r, s)
    return "\n".join(out) + "\n"


def fitted_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], width: int | None, max_rows: int = 0) -> str:
    """A query result as the DuckDB shell shows it: at most `max_rows` rows (0: all), within `width` (None: as
    wide as it is) with wide cells elided and columns dropped from the middle, and a note of what was left out."""
    shown = list(rows[:max_rows]) if max_rows else list(rows)
    if width is None:
        return table_text(columns, shown) + _rows_note(len(rows), len(shown), len(columns), len(columns))
    n = len(columns)
    middle_out = sorted(range(1, n - 1), key=lambda i: abs(i - (n - 1) / 2))
    cells = [[_cell(v) for v in r] for r in shown]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    keep = list(range(n))
    for i in middle_out:
        if sum(min(widths[j], 24) for j in keep) + len(keep) - 1 <= width:
            break
        keep.remove(i)
    picked = [columns[i] for i in keep]
    text = fitted_table(
        picked,
        [[r[i] for i in keep] for r in shown],
        width,
        TableLayout(elide={j: ("end", min(len(picked[j]) + 2, 24)) for j in range(len(picked))}),
    )
    return text + _rows_note(len(rows), len(shown), n, len(keep))


def _rows_note(total: int, shown: int, columns: int, kept: int) -> str:
    if shown == total and kept == columns:
        return ""
    notes = [f"{total} row{'s' * (total != 1)}"]
    if shown < total:
        notes[0] += f", {shown} shown (--max-rows 0 shows all)"
    if kept < columns:
        notes.append(f"{columns} columns, {kept} shown (-f csv: all)")
    return "; ".join(notes) + "\n"
