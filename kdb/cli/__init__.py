"""The `kdb` command line: parse arguments, call the core, render, and map errors to exit codes (in main())."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer

from kdb.cli.capture import record_captures  # every command that reads a tag records what captures left for it
from kdb.cli.common import FormatOpt, TagArg, _fmt, _out, _page, _reader, _version, app, state
from kdb.errors import ExitCode, KdbError, TagError, UsageError
from kdb.progress import progress_bar, set_phase
from kdb.render import examples, listings, tables
from kdb.store.home import Home, resolve_home, resolve_shared
from kdb.terminal import click_error, is_click_error, terminal_width


@app.callback()
def _global(
    home: Annotated[
        Path | None,
        typer.Option("--home", metavar="DIR", help="kdb home directory (default: $KDB_HOME, else the user data dir)"),
    ] = None,
    wait: Annotated[
        float,
        typer.Option("--wait", metavar="SECONDS", help="seconds to wait for another kdb process holding the catalog"),
    ] = 600.0,
    catalog: Annotated[
        str | None,
        typer.Option(
            "--catalog",
            metavar="URL",
            help="shared catalog, e.g. 'ducklake:postgres:dbname=kdb host=HOST user=USER' (default: $KDB_CATALOG; "
            "without it, the local home)",
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store", metavar="PATH", help="shared store path for blobs and Parquet files (default: $KDB_STORE)"
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="show the version and exit")
    ] = False,
) -> None:
    shared = resolve_shared(catalog, store)
    state.local_home = Home(resolve_home(home))
    state.shared_home = Home.shared(*shared) if shared else None
    state.home = state.shared_home or state.local_home
    state.wait = wait


@app.command(epilog=examples.INGEST_EPILOG)
def ingest(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="a Triton cache directory (TRITON_CACHE_DIR)")],
    tag: Annotated[str, typer.Option("--tag", "-t", metavar="TAG", help="unique name for this snapshot")],
    label: Annotated[list[str], typer.Option("--label", "-l", metavar="KEY=VALUE", help="key=value, repeatable")] = [],  # noqa: B006
    replace: Annotated[bool, typer.Option("--replace", help="overwrite an existing snapshot with this tag")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar or summary")] = False,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", metavar="N", help="worker processes (default: all cores)", show_default=False)
    ] = 0,
    max_file_size: Annotated[
        int, typer.Option("--max-file-size", metavar="BYTES", help="bytes; larger files are recorded as problems")
    ] = 1 << 30,
    sass: Annotated[
        bool,
        typer.Option(
            "--sass/--no-sass",
            help="disassemble NVIDIA cubins with nvdisasm for the SASS mix (the PTX mix is always kept)",
        ),
    ] = True,
    rehash: Annotated[
        bool,
        typer.Option(
            "--rehash",
            help="read every file, even those whose size, mtime and inode match the last ingest of DIR",
        ),
    ] = False,
    fmt: FormatOpt = "table",
) -> None:
    """Snapshot a whole Triton cache into the store and catalog."""
    from kdb.analysis.model import AnalysisOptions
    from kdb.ingest.snapshot import ingest as run_ingest
    from kdb.ingest.snapshot import parse_labels

    fmt = _fmt(fmt, ("table", "json"))
    labels = parse_labels(label)
    with ExitStack() as stack:
        on_progress = on_phase = None
        if not quiet and sys.stderr.isatty():
            bar, task = stack.enter_context(progress_bar())
            on_phase = set_phase(bar, task)

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
            rehash=rehash,
            phase=on_phase,
        )
    if fmt == "json":
        _out(tables.to_json(summary.__dict__))
    elif not quiet:
        _out(listings.render_ingest(summary))
    if summary.problems:
        raise typer.Exit(ExitCode.FINDINGS)


@app.command(epilog=examples.TAGS_EPILOG)
def tags(fmt: FormatOpt = "table") -> None:
    """List snapshots with counts, sizes, Triton versions and targets (on a terminal, fitted to its width)."""
    fmt = _fmt(fmt)
    record_captures()
    width = terminal_width() if sys.stdout.isatty() or os.environ.get("COLUMNS") else None  # as `kdb sql`
    if not state.home.has_catalog():
        _out(listings.render_tags([], fmt, width))
        return
    with _reader() as catalog:
        _out(listings.render_tags(catalog.list_snapshots(), fmt, width))


@app.command(epilog=examples.SHOW_EPILOG)
def show(
    tag: Annotated[str | None, typer.Argument(metavar="[TAG]", help="snapshot tag (none: list the snapshots)")] = None,
    kernel: Annotated[
        str | None,
        typer.Option(
            "--kernel",
            "-k",
            metavar="PATTERN",
            help="kernel name, glob, or a unique cache-key prefix (the 6-character key kdb diff prints)",
        ),
    ] = None,
    fmt: FormatOpt = "table",
) -> None:
    """Show one snapshot, or with --kernel the facts, mix and hot source lines of matching kernels."""
    fmt = _fmt(fmt, ("table", "json"))
    if tag is None:
        tags(fmt)
        return
    record_captures(tag)
    if not state.home.has_catalog():
        raise TagError(f"unknown snapshot {tag!r}: the home {state.home.root} has no snapshot yet")
    with _reader() as catalog:
        if kernel is not None:
            from kdb.api._core import kernel_details  # the Python API's Kdb.kernel runs the same lookup

            details = kernel_details(catalog, tag, kernel)
            _page(listings.render_kernels(details, fmt), enabled=fmt == "table")
            return
        _out(
            listings.render_snapshot(
                catalog.get_snapshot(tag), catalog.kind_counts(tag), catalog.snapshot_problems(tag), fmt
            )
        )


@app.command()
def reindex(
    tags: Annotated[list[str] | None, typer.Argument(metavar="TAG", help="snapshot tags (default: all)")] = None,
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

    record_captures(*(tags or []))
    for tag, kernels in run_reindex(
        state.home, tags or None, lock_wait_s=state.wait, options=AnalysisOptions(sass=sass)
    ).items():
        _out(f"reindexed {tag}: {kernels} kernels\n")


@app.command()
def rm(tag: TagArg) -> None:
    """Remove a snapshot from the catalog (its blobs stay until `kdb gc`)."""
    from kdb.store.maintenance import remove_snapshot

    record_captures(tag)  # what waits for the tag goes with it, instead of making the tag again later
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
            metavar="SECONDS",
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
    tag: TagArg,
    dest: Annotated[Path, typer.Argument(metavar="DEST", help="new or empty directory to restore the cache into")],
    verbatim: Annotated[
        bool,
        typer.Option(
            "--verbatim",
            help="keep the stored bytes of Triton's group files (their child paths then name the folder the "
            "cache was compiled into, and Triton recompiles its kernels anywhere else)",
        ),
    ] = False,
) -> None:
    """Restore a snapshot under DEST (never outside it) as a working Triton cache there.

    Files are restored byte for byte, except Triton's group files (`__grp__NAME.json`), written as Triton
    writes them when it compiles into DEST (their child paths point into DEST; --verbatim keeps the stored
    bytes); modes are those Triton gives (0644 under umask 022). The export is written into a temporary
    folder beside DEST and renamed: a failure leaves nothing behind.
    """
    from kdb.store.maintenance import export_snapshot

    record_captures(tag)
    result = export_snapshot(state.home, tag, dest, state.wait, verbatim=verbatim)
    relocated = f", {result.groups_relocated} group files pointing into it" if result.groups_relocated else ""
    _out(f"exported {result.files} files ({tables.human_bytes(result.bytes)}) to {dest}{relocated}\n")


@app.command()
def cat(
    tag: TagArg,
    path: Annotated[
        str,
        typer.Argument(
            metavar="PATH",
            help="file path relative to the cache root, or an imported profile's file name or sha256",
        ),
    ],
) -> None:
    """Write one stored file (or imported profile file, as imported) to standard output."""
    from kdb.profile.importer import stored_profile
    from kdb.store.maintenance import read_file

    record_captures(tag)
    profile = stored_profile(state.home, tag, path, state.wait)
    data = read_file(state.home, tag, path, state.wait) if profile is None else profile
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@app.command(epilog=examples.SQL_EPILOG)
def sql(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="a SQL query over the catalog (read-only)")],
    fmt: Annotated[
        str, typer.Option("--format", "-f", metavar="FORMAT", help="table, json, csv or markdown")
    ] = "table",
    max_rows: Annotated[
        int | None,
        typer.Option(
            "--max-rows",
            metavar="N",
            help="table: show at most N rows, 0 for all (default: 40 on a terminal, else all)",
        ),
    ] = None,
) -> None:
    """Run a read-only SQL query over the catalog and print the result.

    On a terminal the table fits its width (wide cells elided, columns from the middle dropped) and shows
    40 rows, with a note of what was left out, like the DuckDB shell.
    """
    from kdb.store.catalog.user_sql import UserSql

    fmt = _fmt(fmt, ("table", "json", "csv", "markdown"))
    record_captures()
    where = state.home.location if state.home.location is not None else state.home.catalog_path
    with UserSql.open(where, wait_s=state.wait) as user_sql:
        columns, rows = user_sql.run(query)
    if fmt != "table":
        _out(tables.render_rows(columns, rows, fmt))
        return
    limit = max_rows if max_rows is not None else (40 if sys.stdout.isatty() else 0)
    width = terminal_width() if sys.stdout.isatty() or os.environ.get("COLUMNS") else None
    _page(tables.fitted_rows(columns, rows, width, limit))


@app.command()
def shell(
    print_sql: Annotated[
        bool, typer.Option("--print", help="shared home: print the statements that attach the catalog, and exit")
    ] = False,
) -> None:
    """Open the catalog in the DuckDB shell (`duckdb` on PATH), read-only, or print how to.

    The shell cannot write a file or reach the network: the database is read-only, external access off,
    extensions neither installed nor loaded on demand, the configuration locked, and its safe mode refuses
    the dot commands that write files or run programs. To save a result:
    `kdb sql "SELECT …" --format csv > FILE`. A shared catalog is read with `kdb sql` (`--print` gives the
    statements that attach it in a DuckDB of your own, without these protections).
    """
    from kdb.store.catalog.user_sql import shell_args

    location = state.home.location
    if location is not None:
        from kdb.store.catalog.lake import shell_sql

        if not print_sql:
            raise UsageError(
                "kdb shell opens only a local catalog read-only: DuckDB cannot read a shared catalog's Parquet "
                "files without being able to overwrite them; query it with `kdb sql`, or attach it in your own "
                "DuckDB with the statements of `kdb shell --print`"
            )
        _out(shell_sql(location.url, location.data_path))
        return
    path = state.home.catalog_path
    if not path.exists():
        raise UsageError(f"no catalog at {path} yet: run `kdb ingest` first")
    args = shell_args(path)
    exe = shutil.which("duckdb")
    if exe is None:
        _out(f"the DuckDB shell is not installed (pip install duckdb-cli); then run: {shlex.join(['duckdb', *args])}\n")
        return
    sys.stderr.write(
        'kdb shell: read-only, no files, no network; to save a result: kdb sql "SELECT …" --format csv > FILE\n'
    )
    sys.stderr.flush()
    os.execv(exe, [exe, *args])


def run(argv: list[str] | None = None) -> int:
    """Run kdb with argv and return its exit status; every error becomes one line on stderr."""
    try:
        rv = app(args=argv, prog_name="kdb", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
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
        if is_click_error(exc):
            return click_error(exc)
        if os.environ.get("KDB_DEBUG"):
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        sys.stderr.write(f"kdb: internal error: {type(exc).__name__}: {first} (set KDB_DEBUG=1 for details)\n")
        return ExitCode.FAILURE
    return 0


def main() -> None:
    sys.exit(run())


from kdb.cli import capture as _capture  # noqa: E402, F401  (registers `capture env|check|commit|status` on `app`)
from kdb.cli import compare as _compare  # noqa: E402, F401  (registers diff and report on `app`)
from kdb.cli import fleet as _fleet  # noqa: E402, F401  (registers push and pull on `app`)
from kdb.cli import profile as _profile  # noqa: E402, F401  (registers `profile import` on `app`)
