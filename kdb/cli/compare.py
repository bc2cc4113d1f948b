"""`kdb diff` and `kdb report`: two snapshots (or cache directories) compared, as text or as an HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kdb.api import _compare as compare
from kdb.cli.common import _fmt, _out, _page, app, state
from kdb.cli.terminal import terminal_width, use_color
from kdb.errors import ExitCode, UntrustedComparison
from kdb.render import examples, tables


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
    expand: Annotated[
        bool, typer.Option("--expand", help="list every member of an autotune group as a row (default: one row each)")
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
    why: Annotated[
        bool,
        typer.Option(
            "--why",
            help="name the stage that carries each changed kernel's change (triton, llvm, ptxas, both, unknown): "
            "A's LLIR (and PTX) compiled by B's release's later stages, with the toolchain registered for it "
            "(kdb toolchain add VERSION)",
        ),
    ] = False,
    jobs: Annotated[int, typer.Option("--jobs", "-j", metavar="N", help="--why: compiles at once")] = 1,
) -> None:
    """Match the kernels of two snapshots and compare resources, occupancy, instruction mix and IR stages.

    Exit 0: no --fail-on rule fired; 1: a rule fired; 2: bad usage, or a comparison that cannot be trusted;
    8: no rule fired but one met a figure kdb could not compute (unknown; --allow-unknown passes it).
    On a terminal the table fits its width, is coloured (unless NO_COLOR is set) and goes through a pager
    ($KDB_PAGER, else $PAGER, else less) when longer than the screen.
    """
    fmt = _fmt(fmt, compare.diff_formats())
    request = compare.DiffRequest(
        a,
        b,
        fail_on=tuple(fail_on or []),
        across_targets=across_targets,
        kernel=kernel,
        limit=limit,
        raw_isa=raw_isa,
        only=only,
        top=top,
        show_all=show_all,
        expand=expand,
        min_match=min_match,
        fmt=fmt,
        allow_unknown=allow_unknown,
        rank=rank,
        why=why,
        why_workers=max(1, jobs),
    )
    outcome = compare.diff(state.session, request)
    _page(outcome.render(terminal_width(), use_color()), enabled=fmt == "table" and not no_pager)
    code = outcome.exit_code  # the Python API's Diff.exit_code
    if code == ExitCode.USAGE:
        raise UntrustedComparison(str(outcome.result.trust_problem))
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
    text = compare.report(state.session, a, b, across_targets=across_targets, limit=limit)
    output.write_text(text, encoding="utf-8")
    _out(f"wrote {output} ({tables.human_bytes(len(text.encode()))})\n")
