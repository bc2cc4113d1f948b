"""`kdb diff` and `kdb report`: two snapshots (or cache directories) compared, as text or as an HTML page."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated

import typer

from kdb.cli.common import _fmt, _out, _page, _warn, app, state
from kdb.errors import ExitCode, TagError, UsageError
from kdb.progress import ingest_progress
from kdb.render import examples, tables
from kdb.store.blobs import BlobStore
from kdb.store.catalog import Catalog
from kdb.terminal import terminal_width, use_color


@app.command("diff", epilog=examples.DIFF_EPILOG)
def diff_cmd(
    a: Annotated[
        str,
        typer.Argument(
            metavar="A",
            help="baseline: a snapshot tag, or a cache directory (ingested into a temporary home); a name that is "
            "both: tag:NAME for the snapshot, ./NAME for the directory",
        ),
    ],
    b: Annotated[str, typer.Argument(metavar="B", help="candidate: a snapshot tag (tag:NAME), or a cache directory")],
    fail_on: Annotated[
        list[str],
        typer.Option(
            "--fail-on",
            metavar="RULE",
            help="exit 1 when a rule fires: occupancy-drop, new-spills, scratch-increase, vgpr:+N, vgpr:+N% (sgpr:, "
            "agpr:, registers:), headroom-below:N, unmatched, any-change, winner-flip, winner-spills; repeatable or "
            "comma-separated",
        ),
    ] = [],  # noqa: B006
    across_targets: Annotated[
        bool,
        typer.Option(
            "--across-targets", help="match kernels across GPU targets (identity without backend:arch:warp_size)"
        ),
    ] = False,
    kernel: Annotated[
        str | None,
        typer.Option(
            "--kernel",
            "-k",
            metavar="PATTERN",
            help="deep view of the kernels whose name matches NAME or a glob, or whose cache key (or the key this "
            "table prints) starts with PATTERN",
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", metavar="N", help="at most N deep views (--kernel), worst first")
    ] = 20,
    raw_isa: Annotated[
        bool,
        typer.Option(
            "--raw-isa",
            help="deep views diff the ISA files as compiled (default: registers renamed by first use, "
            "branch targets, addresses and encodings stripped)",
        ),
    ] = False,
    only: Annotated[
        str | None,
        typer.Option(
            "--only", metavar="WHAT", help="rows to list: regressed, improved, changed, fired, new-spills, unmatched"
        ),
    ] = None,
    top: Annotated[int | None, typer.Option("--top", metavar="N", help="at most N rows (markdown: default 25)")] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="list unmatched and ambiguous kernels as rows, not counts")
    ] = False,
    no_pager: Annotated[bool, typer.Option("--no-pager", help="never pipe the table into a pager")] = False,
    min_match: Annotated[
        float,
        typer.Option(
            "--min-match", metavar="FRACTION", help="exit 2 when fewer than this fraction of the smaller side is paired"
        ),
    ] = 0.5,
    fmt: Annotated[
        str, typer.Option("--format", "-f", metavar="FORMAT", help="table, json, markdown or csv")
    ] = "table",
    allow_unknown: Annotated[
        bool,
        typer.Option(
            "--allow-unknown",
            help="let --fail-on pass where a figure it reads is unknown (an unknown GPU, an unreadable code object)",
        ),
    ] = False,
    rank: Annotated[
        str,
        typer.Option(
            "--rank",
            metavar="ORDER",
            help="severity (worst first), or time: the kernels imported profiles measured longest first "
            "(kdb profile import)",
        ),
    ] = "severity",
) -> None:
    """Match the kernels of two snapshots and compare resources, occupancy, instruction mix and IR stages.

    Exit 0: no --fail-on rule fired; 1: a rule fired; 2: bad usage, or a comparison that cannot be trusted;
    8: no rule fired but one met a figure kdb could not compute (unknown; --allow-unknown passes it).
    On a terminal the table fits its width, is coloured (unless NO_COLOR is set) and goes through a pager
    ($KDB_PAGER, else $PAGER, else less) when longer than the screen.
    """
    from kdb.api._core import exit_code
    from kdb.diff import render as diff_render
    from kdb.diff.engine import RANKS, diff_sides, ranked, select
    from kdb.diff.rules import check_min_match, parse_rules
    from kdb.diff.sides import load_side
    from kdb.diff.terminal import ONLY, TableOptions
    from kdb.errors import UntrustedComparison

    fmt = _fmt(fmt, diff_render.FORMATS)
    if only is not None and only not in ONLY:
        raise UsageError(f"unknown --only {only!r}: choose one of {', '.join(ONLY)}")
    for name, value in (("--top", top), ("--limit", limit)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1, not {value}")
    if rank not in RANKS:
        raise UsageError(f"unknown --rank {rank!r}: choose one of {', '.join(RANKS)}")
    rules = parse_rules(fail_on or [])
    check_min_match(min_match)
    with ExitStack() as stack:
        sides = [load_side(*stack.enter_context(_diff_source(ref))) for ref in (a, b)]
        result, views = diff_sides(
            *sides,
            across_targets=across_targets,
            rules=rules,
            min_match=min_match,
            kernel=kernel,
            limit=limit,
            allow_unknown=allow_unknown,
            raw_isa=raw_isa,
        )
    if rank == "time" and all(k.measured_ns is None for k in result.kernels):
        _warn("--rank time: no kernel of either side has measured time (kdb profile import FILE --tag TAG)")
    result = ranked(result, rank)
    if kernel is not None:
        matched = len(select(result, kernel))
        if matched > limit:
            _warn(f"{kernel!r} matches {matched} kernels: showing the first {limit}, worst first (--limit N)")
    opts = TableOptions(width=terminal_width(), color=use_color(), only=only, top=top, show_all=show_all)
    _page(diff_render.render_diff(result, fmt, views, opts), enabled=fmt == "table" and not no_pager)
    code = exit_code(result)  # the Python API's Diff.exit_code
    if code == ExitCode.USAGE:
        raise UntrustedComparison(str(result.trust_problem))
    if code:
        raise typer.Exit(code)


@app.command(epilog=examples.REPORT_EPILOG)
def report(
    a: Annotated[str, typer.Argument(metavar="A", help="a snapshot tag or cache directory (alone: that snapshot)")],
    b: Annotated[str | None, typer.Argument(metavar="[B]", help="the candidate to compare A with")] = None,
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE.html", help="the HTML file to write")] = Path(
        "kdb-report.html"
    ),
    across_targets: Annotated[bool, typer.Option("--across-targets", help="match kernels across GPU targets")] = False,
    limit: Annotated[int, typer.Option("--limit", metavar="N", help="ISA hunks for the N worst changed kernels")] = 50,
) -> None:
    """Write one self-contained static HTML report (plots, sortable table, drill-down) that opens from file://."""
    from kdb.api._core import diff_page, snapshot_page  # the Python API's Diff.to_html writes the same page

    with ExitStack() as stack:
        if b is None:
            catalog, _store, tag, label = stack.enter_context(_diff_source(a))
            text = snapshot_page(catalog, tag, label)
        else:
            from kdb.diff.sides import load_side

            sa, sb = (load_side(*stack.enter_context(_diff_source(ref))) for ref in (a, b))
            text = diff_page(sa, sb, across_targets=across_targets, limit=limit)
    output.write_text(text, encoding="utf-8")
    _out(f"wrote {output} ({tables.human_bytes(len(text.encode()))})\n")


TAG_PREFIX = "tag:"  # `kdb diff tag:NAME …`: the snapshot NAME, whatever directory is called NAME


@contextmanager
def _diff_source(ref: str) -> Iterator[tuple[Catalog, BlobStore, str, str]]:
    """(catalog, blob store, tag, label) of a `kdb diff` argument: a tag of the home, else a cache directory
    ingested into a temporary home (deleted afterwards). The catalog is opened once and held open. A name that is
    both a tag and a directory is refused (exit 2) rather than silently taken as either: `tag:NAME` names the
    snapshot, `./NAME` the directory (a tag never holds a `/`, kdb/store/tags.py)."""
    from kdb.cli.capture import record_captures

    home = state.home
    explicit = ref.startswith(TAG_PREFIX)
    tag = ref[len(TAG_PREFIX) :] if explicit else ref
    path = Path(ref)
    record_captures(tag)  # what captures left waiting for the tag is recorded first
    if home.has_catalog():
        with Catalog.open(home.catalog, read_only=True, wait_s=state.wait) as catalog:
            if catalog.snapshot_id(tag) is not None:
                if not explicit and path.is_dir():
                    as_path = f"./{ref}" if "/" not in ref else str(path.resolve())
                    raise UsageError(
                        f"{ref!r} is both a snapshot tag of {home.describe()} and a directory: "
                        f"write {TAG_PREFIX}{ref} for the snapshot or {as_path} for the directory"
                    )
                yield catalog, home.store, tag, tag
                return
    if explicit:
        raise TagError(f"unknown snapshot {tag!r} (see `kdb tags`)")
    if not path.is_dir():
        raise TagError(f"{ref!r} is neither a snapshot tag (see `kdb tags`) nor a cache directory")
    from kdb.ingest.temporary import temporary_snapshot

    with (
        ingest_progress(path) as progress,
        temporary_snapshot(path, state.wait, progress) as (temp_home, tag),
        Catalog.open(temp_home.catalog_path, read_only=True, wait_s=state.wait) as catalog,
    ):
        yield catalog, temp_home.store, tag, str(path)
