"""What the Python API returns: a snapshot's record, one kernel's facts and a diff, each showing itself in
Jupyter as a small HTML table (`_repr_html_`). Every text form is the CLI's own renderer's output."""

from __future__ import annotations

import datetime
import html
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kdb.diff.model import DiffResult, KernelDiff
from kdb.errors import ExitCode

ROWS_SHOWN = 20  # kernels a diff's HTML table lists (worst first); the rest are counted


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        value = f"{value:g}"
    return html.escape(str(value))


def html_table(headers: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@dataclass(frozen=True)
class Snapshot:
    """One snapshot of the home, as `kdb tags --format json` lists it."""

    tag: str
    created_at: datetime.datetime
    source_path: str | None
    host: str | None
    kdb_version: str | None
    triton_versions: list[str]
    targets: list[str]
    kernel_count: int
    file_count: int
    problem_count: int
    raw_bytes: int
    stored_bytes: int
    new_bytes: int
    labels: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        """The record as `kdb tags --format json` writes it (before JSON encoding)."""
        return asdict(self)


@dataclass(frozen=True)
class Kernel:
    """One kernel of a snapshot: its row of the `kernels` view (`facts`), kernel_analysis's full row
    (`analysis`), its instruction mix, hot source lines, problems and measured times (one row per imported
    profile file that ran it: `kdb profile import`)."""

    tag: str
    facts: Mapping[str, Any]
    analysis: Mapping[str, Any] = field(default_factory=dict)
    mix: tuple[Mapping[str, Any], ...] = ()
    lines: tuple[Mapping[str, Any], ...] = ()
    problems: tuple[Mapping[str, Any], ...] = ()
    times: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_detail(cls, tag: str, detail: Mapping[str, Any]) -> Kernel:
        parts = ("analysis", "mix", "lines", "problems", "times")
        return cls(
            tag,
            {k: v for k, v in detail.items() if k not in parts},
            detail.get("analysis", {}),
            tuple(detail.get("mix", ())),
            tuple(detail.get("lines", ())),
            tuple(detail.get("problems", ())),
            tuple(detail.get("times", ())),
        )

    @property
    def name(self) -> str:
        return str(self.facts.get("name"))

    @property
    def cache_key(self) -> str:
        return str(self.facts.get("cache_key"))

    def __getitem__(self, column: str) -> Any:
        """A column of the `kernels` view, else of kernel_analysis: `k["vgpr_count"]`."""
        if column in self.facts:
            return self.facts[column]
        return self.analysis[column]

    def to_dict(self) -> dict[str, Any]:
        """The kernel as one element of `kdb show TAG --kernel KEY --format json`."""
        return {
            **self.facts,
            "analysis": dict(self.analysis),
            "mix": [dict(m) for m in self.mix],
            "lines": [dict(x) for x in self.lines],
            "problems": [dict(p) for p in self.problems],
            "times": [dict(t) for t in self.times],
        }

    def _repr_html_(self) -> str:
        from kdb.render.listings import KERNEL_HEADLINE

        facts = {**self.analysis, **{k: v for k, v in self.facts.items() if v is not None}}
        rows = [(k, facts[k]) for k in KERNEL_HEADLINE if facts.get(k) is not None]
        groups: dict[str, int] = {}
        for m in self.mix:
            groups[m["grp"]] = groups.get(m["grp"], 0) + m["count"]
        out = f"<p><b>{html.escape(self.name)}</b> in {html.escape(self.tag)}</p>" + html_table(("fact", "value"), rows)
        if groups:
            mix = sorted(groups.items(), key=lambda kv: -kv[1])
            out += "<p>instruction groups</p>" + html_table(("group", "count"), mix)
        return f"<div>{out}</div>"


class Diff:
    """A `kdb diff A B`: the result the CLI renders (`result`, kdb.diff.model.DiffResult), its kernels in rank
    order, and every output format of the CLI. Built by `Kdb.diff`."""

    def __init__(self, result: DiffResult, page: Callable[[int], str]) -> None:
        self.result = result
        self._page = page

    @property
    def kernels(self) -> tuple[KernelDiff, ...]:
        """Every kernel, ranked as the CLI's table and JSON list them (worst first)."""
        return self.result.kernels

    @property
    def summary(self) -> dict[str, int]:
        return self.result.summary

    @property
    def assumptions(self) -> tuple[str, ...]:
        """One line per thing kdb had to assume (an unknown release or target, figures it could not compute)."""
        return self.result.assumptions

    @property
    def fired(self) -> tuple[str, ...]:
        """The `fail_on` rules that fired."""
        return self.result.fired

    @property
    def unknown_rules(self) -> tuple[str, ...]:
        """The `fail_on` rules that met a figure kdb could not compute."""
        return self.result.unknown_rules

    @property
    def unknown_reasons(self) -> tuple[str, ...]:
        """Why each of `unknown_rules` could not be judged (`vgpr:+10: cuda kernels have no VGPR count (…)`)."""
        return self.result.unknown_reasons

    @property
    def trust_problem(self) -> str | None:
        """Why the comparison cannot be trusted (the CLI exits 2), or None."""
        return self.result.trust_problem

    @property
    def exit_code(self) -> ExitCode:
        """The status `kdb diff` would exit with: 0, 1 (a rule fired), 2 (untrusted) or 8 (unknown)."""
        from kdb.api._core import exit_code

        return exit_code(self.result)

    def to_json(self) -> str:
        """`kdb diff A B --format json`, byte for byte."""
        from kdb.diff.render import render_diff

        return render_diff(self.result, "json")

    def to_markdown(self, top: int | None = None) -> str:
        """`kdb diff A B --format markdown [--top N]`: fits a GitHub comment."""
        from kdb.diff.render import render_diff
        from kdb.diff.terminal import TableOptions

        return render_diff(self.result, "markdown", opts=TableOptions(top=top))

    def to_csv(self) -> str:
        """`kdb diff A B --format csv`."""
        from kdb.diff.render import render_diff

        return render_diff(self.result, "csv")

    def to_html(self, path: str | Path, *, limit: int = 50) -> Path:
        """Write the page `kdb report A B --output PATH [--limit N]` writes; return its path. The page needs
        the deep views of the worst kernels, so the two snapshots are read again (also after `Kdb.close()`)."""
        out = Path(path)
        out.write_text(self._page(limit), encoding="utf-8")
        return out

    def __repr__(self) -> str:
        r = self.result
        return f"<kdb Diff {r.a_label} → {r.b_label}: {self.summary}>"

    def _repr_html_(self) -> str:
        from kdb.diff.terminal import summary_line

        r = self.result
        head = f"<p><b>kdb diff {html.escape(r.a_label)} → {html.escape(r.b_label)}</b></p>"
        head += f"<p>{html.escape(summary_line(r))}</p>"
        head += "".join(f"<p>kdb assumed: {html.escape(line)}</p>" for line in r.assumptions)
        if r.trust_problem:
            head += f"<p>not trusted: {html.escape(r.trust_problem)}</p>"
        shown = [k for k in r.kernels if k.status.changed][:ROWS_SHOWN]
        rows = [_kernel_row(r, k) for k in shown]
        table = html_table(("status", "key", "name", "target", "vgpr", "occupancy", "reason"), rows)
        rest = sum(1 for k in r.kernels if k.status.changed) - len(shown)
        tail = f"<p>… {rest} more changed kernels (Diff.kernels lists them all)</p>" if rest > 0 else ""
        return f"<div>{head}{table}{tail}</div>"


def _arrow(k: KernelDiff, column: str) -> str:
    a, b = (f.get(column) if f else None for f in (k.a, k.b))
    return f"{a}→{b}" if a != b else ("" if a is None else str(a))


def _kernel_row(r: DiffResult, k: KernelDiff) -> tuple[Any, ...]:
    return (k.status.label, r.key_of(k), k.name, k.target, _arrow(k, "vgpr_count"), _arrow(k, "occupancy"), k.reason)
