"""`kdb diff` and `kdb report` as values: two snapshots or cache directories compared, the result and its deep
views (rendered on request, in the CLI's formats), or the HTML page of a report."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kdb.api._core import diff_page, exit_code, snapshot_page
from kdb.api._session import Session
from kdb.api._sides import Source, open_side, open_source, tag_of
from kdb.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from kdb.diff.model import DiffResult, KernelDeepView
    from kdb.diff.sides import Side


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
    why: bool = False  # each changed kernel's stage swap (kdb/replay/why.py), in `why_workers` toolchain processes
    why_workers: int = 1
    expand: bool = False  # every member of an autotune group as its own row (kdb/diff/groups.py)


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
        opts = TableOptions(width=width, color=color, only=r.only, top=r.top, show_all=r.show_all, expand=r.expand)
        return render_diff(self.result, r.fmt, self.views, opts)


def grouped(result: DiffResult, sa: Side, sb: Side) -> DiffResult:
    """The result with its kernels' autotune groups (kdb/diff/groups.py), read from both sides' rows and TTIR."""
    from kdb.diff.groups import group_map

    group_of = {key: g for s in (sa, sb) for key, g in group_map(s.kernels, s.ttir_constants).items()}
    best = frozenset(row["cache_key"] for s in (sa, sb) for row in s.kernels if row.get("is_autotune_best") is True)
    return replace(result, group_of=group_of, autotune_best=best)


def diff(session: Session, request: DiffRequest) -> DiffOutcome:
    """Match the kernels of the two sides (each a tag or a cache directory) and compare them; a rank by time no
    profile measured, or a --kernel naming more kernels than --limit, is a notice. The format is the caller's to
    check (diff_formats()) before this is called."""
    from kdb.diff.deep import select
    from kdb.diff.engine import RANKS, diff_sides, ranked
    from kdb.diff.model import DiffOptions
    from kdb.diff.rules import check_min_match, parse_rules
    from kdb.diff.sides import load_side
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
        sources = []
        for ref in (r.a, r.b):
            session.record_captures(tag_of(ref))  # what captures left waiting for the tag is recorded first
            sources.append(stack.enter_context(open_source(session, ref)))
        sides = [load_side(s.catalog.diffs, s.store, s.tag, s.label) for s in sources]
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
        result = grouped(result, sides[0], sides[1])
        if r.why:
            result, views = _explained(session, sources, result, views, r)
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


def _explained(
    session: Session, sources: list[Source], result: DiffResult, views: list[KernelDeepView], request: DiffRequest
) -> tuple[DiffResult, list[KernelDeepView]]:
    """The result with each changed kernel's `why` (kdb/replay/why.py): A's LLIR (and PTX) compiled by B's release's
    later stages in the toolchain registered for it, the swaps' figures from kdb's own analysis. With --kernel,
    the kernels of its deep views only."""
    import tempfile
    from pathlib import Path

    from kdb.replay.why import WhyRequest, WhySource, explain

    a, b = (
        WhySource({row["cache_key"]: row for row in s.catalog.queries.replay_sources(s.tag)}, s.store) for s in sources
    )
    why = WhyRequest(a, b, session.local_home.root, Path(tempfile.gettempdir()), max(1, request.why_workers))
    shown = {(v.kernel.a_cache_key, v.kernel.b_cache_key) for v in views} if request.kernel is not None else None
    chosen = [i for i, k in enumerate(result.kernels) if shown is None or (k.a_cache_key, k.b_cache_key) in shown]
    found = {chosen[i]: w for i, w in explain(why, [result.kernels[i] for i in chosen]).items()}
    kernels = tuple(replace(k, why=found[i]) if i in found else k for i, k in enumerate(result.kernels))
    by_pair = {(k.a_cache_key, k.b_cache_key): k for k in kernels if k.why is not None}
    views = [replace(v, kernel=by_pair.get((v.kernel.a_cache_key, v.kernel.b_cache_key), v.kernel)) for v in views]
    return replace(result, kernels=kernels), views


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
