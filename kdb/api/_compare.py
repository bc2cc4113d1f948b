"""`kdb diff` and `kdb report` as values: two snapshots or cache directories compared, the result and its deep
views (rendered on request, in the CLI's formats), or the HTML page of a report."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kdb.api._core import diff_page, exit_code, snapshot_page
from kdb.api._session import Session
from kdb.api._sides import open_side, open_source, tag_of
from kdb.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from kdb.diff.model import DiffResult, KernelDeepView


def diff_formats() -> tuple[str, ...]:
    """The formats `kdb diff` renders (kdb/diff/render.py), for the CLI to check its --format against."""
    from kdb.diff.render import FORMATS

    return FORMATS


@dataclass(frozen=True)
class DiffRequest:
    """What `kdb diff A B` is asked: the two sides, the rules, and what to show (the CLI's options)."""

    a: str
    b: str
    fail_on: tuple[str, ...] = ()
    across_targets: bool = False
    kernel: str | None = None
    limit: int = 20
    raw_isa: bool = False
    only: str | None = None
    top: int | None = None
    show_all: bool = False
    min_match: float = 0.5
    fmt: str = "table"
    allow_unknown: bool = False
    rank: str = "severity"


@dataclass(frozen=True)
class DiffOutcome:
    """A diff's result (ranked as asked), the deep views of --kernel, and the request's display options."""

    result: DiffResult
    views: list[KernelDeepView] = field(default_factory=list)
    request: DiffRequest = field(default_factory=lambda: DiffRequest("", ""))

    @property
    def exit_code(self) -> ExitCode:
        """0, 1 (a rule fired), 2 (untrusted: the CLI raises UntrustedComparison) or 8 (unknown)."""
        return exit_code(self.result)

    def render(self, width: int, color: bool) -> str:
        """The result in the request's format; the table fitted to `width` and coloured with `color`."""
        from kdb.diff.render import render_diff
        from kdb.diff.terminal import TableOptions

        r = self.request
        opts = TableOptions(width=width, color=color, only=r.only, top=r.top, show_all=r.show_all)
        return render_diff(self.result, r.fmt, self.views, opts)


def diff(session: Session, request: DiffRequest) -> DiffOutcome:
    """Match the kernels of the two sides (each a tag or a cache directory) and compare them; a rank by time no
    profile measured, or a --kernel naming more kernels than --limit, is a notice. The format is the caller's to
    check (diff_formats()) before this is called."""
    from kdb.diff.deep import select
    from kdb.diff.engine import RANKS, diff_sides, ranked
    from kdb.diff.model import DiffOptions
    from kdb.diff.rules import check_min_match, parse_rules
    from kdb.diff.terminal import ONLY

    r = request
    if r.only is not None and r.only not in ONLY:
        raise UsageError(f"unknown --only {r.only!r}: choose one of {', '.join(ONLY)}")
    for name, value in (("--top", r.top), ("--limit", r.limit)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1, not {value}")
    if r.rank not in RANKS:
        raise UsageError(f"unknown --rank {r.rank!r}: choose one of {', '.join(RANKS)}")
    rules = parse_rules(list(r.fail_on))
    check_min_match(r.min_match)
    with ExitStack() as stack:
        sides = []
        for ref in (r.a, r.b):
            session.record_captures(tag_of(ref))  # what captures left waiting for the tag is recorded first
            sides.append(stack.enter_context(open_side(session, ref)))
        options = DiffOptions(
            across_targets=r.across_targets,
            rules=tuple(rules),
            min_match=r.min_match,
            allow_unknown=r.allow_unknown,
            kernel=r.kernel,
            limit=r.limit,
            raw_isa=r.raw_isa,
        )
        result, views = diff_sides(sides[0], sides[1], options)
    if r.rank == "time" and all(k.measured_ns is None for k in result.kernels):
        session.notice("--rank time: no kernel of either side has measured time (kdb profile import FILE --tag TAG)")
    result = ranked(result, r.rank)
    if r.kernel is not None:
        matched = len(select(result, r.kernel))
        if matched > r.limit:
            session.notice(
                f"{r.kernel!r} matches {matched} kernels: showing the first {r.limit}, worst first (--limit N)"
            )
    return DiffOutcome(result, views, request)


def report(session: Session, a: str, b: str | None, *, across_targets: bool = False, limit: int = 50) -> str:
    """The HTML page of `kdb report`: one snapshot (`b` None) or a diff with ISA hunks for the `limit` worst
    changed kernels (the Python API's Diff.to_html writes the same page)."""
    with ExitStack() as stack:
        if b is None:
            session.record_captures(tag_of(a))
            source = stack.enter_context(open_source(session, a))
            return snapshot_page(source.catalog, source.tag, source.label)
        sides = []
        for ref in (a, b):
            session.record_captures(tag_of(ref))
            sides.append(stack.enter_context(open_side(session, ref)))
        return diff_page(*sides, across_targets=across_targets, limit=limit)
