"""The `kdb` command line: parse arguments, call the core, render, and map errors to exit codes (in main())."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated

import typer

from kdb import __version__
from kdb.errors import ExitCode, KdbError, TagError, UsageError
from kdb.render import listings, tables
from kdb.store.blobs import BlobStore
from kdb.store.catalog import Catalog
from kdb.store.home import Home, resolve_home, resolve_shared

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="kdb: an offline artifact database and diff tool for Triton kernel caches.",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class State:
    home: Home
    wait: float


state = State()

FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table, json or csv")]


def _fmt(value: str, allowed: tuple[str, ...] = tables.FORMATS) -> str:
    if value not in allowed:
        raise UsageError(f"unknown format {value!r}: choose one of {', '.join(allowed)}")
    return value


def _out(text: str) -> None:
    sys.stdout.write(text)


def _version(value: bool) -> None:
    if value:
        _out(f"kdb {__version__}\n")
        raise typer.Exit()


@app.callback()
def _global(
    home: Annotated[
        Path | None, typer.Option("--home", help="kdb home directory (default: $KDB_HOME, else the user data dir)")
    ] = None,
    wait: Annotated[
        float, typer.Option("--wait", help="seconds to wait for another kdb process holding the catalog")
    ] = 600.0,
    catalog: Annotated[
        str | None,
        typer.Option(
            "--catalog",
            help="shared catalog, e.g. 'ducklake:postgres:dbname=kdb host=HOST user=USER' (default: $KDB_CATALOG; "
            "without it, the local home)",
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option("--store", help="shared store path for blobs and Parquet files (default: $KDB_STORE)"),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="show the version and exit")
    ] = False,
) -> None:
    shared = resolve_shared(catalog, store)
    state.home = Home.shared(*shared) if shared else Home(resolve_home(home))
    state.wait = wait


@app.command()
def ingest(
    directory: Annotated[Path, typer.Argument(help="a Triton cache directory (TRITON_CACHE_DIR)")],
    tag: Annotated[str, typer.Option("--tag", "-t", help="unique name for this snapshot")],
    label: Annotated[list[str], typer.Option("--label", "-l", help="key=value, repeatable")] = [],  # noqa: B006
    replace: Annotated[bool, typer.Option("--replace", help="overwrite an existing snapshot with this tag")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar or summary")] = False,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="worker processes (default: all cores)")] = 0,
    max_file_size: Annotated[
        int, typer.Option("--max-file-size", help="bytes; larger files are recorded as problems")
    ] = 1 << 30,
    sass: Annotated[
        bool,
        typer.Option(
            "--sass/--no-sass",
            help="disassemble NVIDIA cubins with nvdisasm for the SASS mix (the PTX mix is always kept)",
        ),
    ] = True,
    fmt: FormatOpt = "table",
) -> None:
    """Snapshot a whole Triton cache into the store and catalog."""
    from kdb.analysis.model import AnalysisOptions
    from kdb.ingest.snapshot import ingest as run_ingest
    from kdb.ingest.snapshot import parse_labels

    fmt = _fmt(fmt, ("table", "json"))
    labels = parse_labels(label)
    show_progress = not quiet and sys.stderr.isatty()
    progress_cm = _progress() if show_progress else None
    if progress_cm is not None:
        with progress_cm as (bar, task):

            def on_progress(files: int, total: int, done_bytes: int, total_bytes: int) -> None:
                bar.update(task, completed=done_bytes, total=total_bytes, files=files, total_files=total)

            summary = run_ingest(
                state.home,
                directory,
                tag,
                labels=labels,
                replace=replace,
                workers=jobs or None,
                max_file_bytes=max_file_size,
                progress=on_progress,
                lock_wait_s=state.wait,
                options=AnalysisOptions(sass=sass),
            )
    else:
        summary = run_ingest(
            state.home,
            directory,
            tag,
            labels=labels,
            replace=replace,
            workers=jobs or None,
            max_file_bytes=max_file_size,
            lock_wait_s=state.wait,
            options=AnalysisOptions(sass=sass),
        )
    if fmt == "json":
        _out(tables.to_json(summary.__dict__))
    elif not quiet:
        _out(listings.render_ingest(summary))
    if summary.problems:
        raise typer.Exit(ExitCode.FINDINGS)


def _progress():
    from contextlib import contextmanager

    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    @contextmanager
    def cm():
        columns = [
            TextColumn("ingest"),
            BarColumn(),
            TextColumn("{task.fields[files]}/{task.fields[total_files]} files"),
            TextColumn("{task.fields[rate]}"),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
        ]
        import time

        start = time.monotonic()

        class RateProgress(Progress):
            def get_renderables(self):  # files/s computed here so it refreshes with the bar
                for t in self.tasks:
                    elapsed = max(time.monotonic() - start, 1e-6)
                    t.fields["rate"] = f"{t.fields.get('files', 0) / elapsed:.0f} files/s"
                yield from super().get_renderables()

        with RateProgress(*columns, transient=True, console=_stderr_console()) as bar:
            task = bar.add_task("ingest", total=None, files=0, total_files=0, rate="")
            yield bar, task

    return cm()


def _stderr_console():
    from rich.console import Console

    return Console(file=sys.stderr)


@app.command()
def tags(fmt: FormatOpt = "table") -> None:
    """List snapshots with counts, sizes, Triton versions and targets."""
    fmt = _fmt(fmt)
    with _reader() as catalog:
        _out(listings.render_tags(catalog.list_snapshots(), fmt))


@app.command()
def show(
    tag: Annotated[str, typer.Argument(help="snapshot tag")],
    kernel: Annotated[str | None, typer.Option("--kernel", "-k", help="kernel name, glob or cache key")] = None,
    fmt: FormatOpt = "table",
) -> None:
    """Show one snapshot, or with --kernel the facts of matching kernels."""
    fmt = _fmt(fmt, ("table", "json"))
    with _reader() as catalog:
        if kernel is not None:
            rows = catalog.kernel_rows(tag, kernel)
            if not rows:
                raise UsageError(f"no kernel matching {kernel!r} in snapshot {tag!r}")
            details = [{**row, **catalog.kernel_detail(tag, row["cache_key"])} for row in rows]
            _out(listings.render_kernels(details, fmt))
            return
        _out(
            listings.render_snapshot(
                catalog.get_snapshot(tag), catalog.kind_counts(tag), catalog.snapshot_problems(tag), fmt
            )
        )


@app.command()
def reindex(
    tags: Annotated[list[str] | None, typer.Argument(help="snapshot tags (default: all)")] = None,
    sass: Annotated[
        bool,
        typer.Option(
            "--sass/--no-sass",
            help="disassemble NVIDIA cubins with nvdisasm for the SASS mix (the PTX mix is always kept)",
        ),
    ] = True,
) -> None:
    """Recompute the analysis of stored snapshots from their blobs (after a kdb upgrade)."""
    from kdb.analysis.model import AnalysisOptions
    from kdb.ingest.reindex import reindex as run_reindex

    for tag, kernels in run_reindex(
        state.home, tags or None, lock_wait_s=state.wait, options=AnalysisOptions(sass=sass)
    ).items():
        _out(f"reindexed {tag}: {kernels} kernels\n")


@app.command()
def rm(tag: Annotated[str, typer.Argument(help="snapshot tag")]) -> None:
    """Remove a snapshot from the catalog (its blobs stay until `kdb gc`)."""
    from kdb.store.maintenance import remove_snapshot

    remove_snapshot(state.home, tag, state.wait)
    _out(f"removed {tag}; run `kdb gc` to free blobs no other snapshot uses\n")


@app.command()
def gc(
    fmt: FormatOpt = "table",
    compact: Annotated[
        bool,
        typer.Option(
            "--compact", help="copy the catalog without its free space even when less than a quarter of it is free"
        ),
    ] = False,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            help="shared home: keep unreferenced blobs written or reused this many seconds ago (an ingest may still commit them)",
        ),
    ] = 3600.0,
) -> None:
    """Delete blobs no snapshot references, compact the catalog when much of it is free space, and report the bytes freed."""
    from kdb.store.maintenance import collect_garbage

    fmt = _fmt(fmt, ("table", "json"))
    result = collect_garbage(state.home, state.wait, compact=compact, grace_s=grace)
    if fmt == "json":
        _out(tables.to_json(result.__dict__))
    else:
        _out(listings.gc_summary(result))


@app.command()
def verify(fmt: FormatOpt = "table") -> None:
    """Re-hash every blob and check every catalog reference; exit 5 on any problem."""
    from kdb.store.maintenance import verify as run_verify

    fmt = _fmt(fmt, ("table", "json"))
    report = run_verify(state.home, state.wait)
    _out(listings.render_verify(report, fmt))
    if not report.ok:
        raise typer.Exit(ExitCode.INTEGRITY)


@app.command()
def export(
    tag: Annotated[str, typer.Argument(help="snapshot tag")],
    dest: Annotated[Path, typer.Argument(help="new or empty directory to restore the cache into")],
) -> None:
    """Restore a snapshot's files, byte for byte, under DEST (never outside it)."""
    from kdb.store.maintenance import export_snapshot

    result = export_snapshot(state.home, tag, dest, state.wait)
    _out(f"exported {result.files} files ({tables.human_bytes(result.bytes)}) to {dest}\n")


@app.command()
def cat(
    tag: Annotated[str, typer.Argument(help="snapshot tag")],
    path: Annotated[str, typer.Argument(help="file path relative to the cache root")],
) -> None:
    """Write one stored file to standard output."""
    from kdb.store.maintenance import read_file

    data = read_file(state.home, tag, path, state.wait)
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="a SQL query over the catalog (read-only)")],
    fmt: FormatOpt = "table",
) -> None:
    """Run a read-only SQL query over the catalog and print the result."""
    fmt = _fmt(fmt, ("table", "json", "csv", "markdown"))
    with _reader() as catalog:
        columns, rows = catalog.query(query)
    _out(tables.render_rows(columns, rows, fmt))


@app.command()
def shell(
    print_sql: Annotated[
        bool, typer.Option("--print", help="shared home: print the statements that attach the catalog, and exit")
    ] = False,
) -> None:
    """Open the catalog in the DuckDB shell (`duckdb` on PATH), or print how to."""
    if state.home.location is not None:
        from kdb.store.catalog.lake import shell_sql

        init = shell_sql(state.home.location.url, state.home.location.data_path)
        exe = shutil.which("duckdb")
        if print_sql or exe is None:
            _out(init)
            return
        os.execv(exe, [exe, "-cmd", init.replace("\n", " ")])
    path = state.home.catalog_path
    if not path.exists():
        raise UsageError(f"no catalog at {path} yet: run `kdb ingest` first")
    exe = shutil.which("duckdb")
    if exe is None:
        _out(f"the DuckDB shell is not installed (pip install duckdb-cli); then run: duckdb -readonly {path}\n")
        return
    os.execv(exe, [exe, "-readonly", str(path)])


def _reader() -> Catalog:
    return Catalog.open(state.home.catalog, read_only=True, wait_s=state.wait)


def run(argv: list[str] | None = None) -> int:
    """Run kdb with argv and return its exit status; every error becomes one line on stderr."""
    try:
        app(args=argv, prog_name="kdb", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else ExitCode.USAGE)
    except KdbError as exc:
        sys.stdout.flush()
        sys.stderr.write(f"kdb: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("kdb: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        sys.stderr.write(f"kdb: error: {exc.strerror or exc}: {exc.filename or ''}\n")
        return ExitCode.FAILURE
    except Exception as exc:  # a bug: still one line, the traceback only on request
        if os.environ.get("KDB_DEBUG"):
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        sys.stderr.write(f"kdb: internal error: {type(exc).__name__}: {first} (set KDB_DEBUG=1 for details)\n")
        return ExitCode.FAILURE
    return 0


def main() -> None:
    sys.exit(run())


@app.command("diff")
def diff_cmd(
    a: Annotated[
        str, typer.Argument(help="baseline: a snapshot tag, or a cache directory (ingested into a temporary home)")
    ],
    b: Annotated[str, typer.Argument(help="candidate: a snapshot tag, or a cache directory")],
    fail_on: Annotated[
        list[str],
        typer.Option(
            "--fail-on",
            help="exit 1 when a rule fires: occupancy-drop, new-spills, "
            "scratch-increase, vgpr:+N, vgpr:+N% (sgpr:, agpr:, registers:), unmatched, any-change; repeatable or comma-separated",
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
            "--kernel", "-k", help="deep view of kernels whose name matches NAME|PATTERN (or a cache-key prefix)"
        ),
    ] = None,
    min_match: Annotated[
        float, typer.Option("--min-match", help="exit 2 when fewer than this fraction of the smaller side is paired")
    ] = 0.5,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, json, markdown or csv")] = "table",
) -> None:
    """Match the kernels of two snapshots and compare resources, occupancy, instruction mix and IR stages.

    Exit 0: no --fail-on rule fired; 1: a rule fired; 2: bad usage, or a comparison that cannot be trusted.
    """
    from kdb.diff import render as diff_render
    from kdb.diff.engine import diff_sides
    from kdb.diff.rules import check_min_match, parse_rules
    from kdb.diff.sides import load_side
    from kdb.errors import UntrustedComparison

    fmt = _fmt(fmt, diff_render.FORMATS)
    rules = parse_rules(fail_on or [])
    check_min_match(min_match)
    with ExitStack() as stack:
        sides = [load_side(*stack.enter_context(_diff_source(ref))) for ref in (a, b)]
        result, views = diff_sides(
            *sides, across_targets=across_targets, rules=rules, min_match=min_match, kernel=kernel
        )
    _out(diff_render.render_diff(result, fmt, views))
    if result.trust_problem:
        raise UntrustedComparison(result.trust_problem)
    if result.fired:
        raise typer.Exit(ExitCode.FINDINGS)


@contextmanager
def _diff_source(ref: str) -> Iterator[tuple[Catalog, BlobStore, str, str]]:
    """(catalog, blob store, tag, label) of a `kdb diff` argument: a tag of the home, else a cache directory
    ingested into a temporary home (deleted afterwards). The catalog is opened once and held open."""
    home = state.home
    if home.has_catalog():
        with Catalog.open(home.catalog, read_only=True, wait_s=state.wait) as catalog:
            if catalog.snapshot_id(ref) is not None:
                yield catalog, home.store, ref, ref
                return
    path = Path(ref)
    if not path.is_dir():
        raise TagError(f"{ref!r} is neither a snapshot tag (see `kdb tags`) nor a cache directory")
    from kdb.ingest.temporary import temporary_snapshot

    with (
        temporary_snapshot(path, state.wait) as (temp_home, tag),
        Catalog.open(temp_home.catalog_path, read_only=True, wait_s=state.wait) as catalog,
    ):
        yield catalog, temp_home.store, tag, str(path)
