"""The `kdb` command line's app: the global options, the top-level commands, and run(), which maps errors to exit
codes. kdb.cli imports this module only when a command runs (`kdb --version` answers without it)."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from kdb.api import _commands as commands
from kdb.api._session import Session
from kdb.cli.common import FormatOpt, TagArg, _fmt, _out, _page, _version, _warn, app, state
from kdb.cli.progress import ingest_display, ingest_progress
from kdb.cli.terminal import click_error, is_click_error, terminal_width
from kdb.errors import ExitCode, KdbError
from kdb.render import examples, listings, tables


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
    state.session = Session.resolve(home, catalog, store, wait, hooks=(_warn, ingest_progress))


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
    fmt = _fmt(fmt, ("table", "json"))
    call = commands.IngestCall(
        directory,
        tag,
        label,
        replace=replace,
        workers=jobs or None,
        max_file_bytes=max_file_size,
        sass=sass,
        rehash=rehash,
    )
    display = ingest_display if not quiet and sys.stderr.isatty() else None
    summary = commands.ingest(state.session, call, display)
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
    rows = commands.snapshots(state.session)
    width = terminal_width() if sys.stdout.isatty() or os.environ.get("COLUMNS") else None  # as `kdb sql`
    _out(listings.render_tags(rows, fmt, width))


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
    if kernel is not None:
        details = commands.show_kernels(state.session, tag, kernel)
        _page(listings.render_kernels(details, fmt), enabled=fmt == "table")
        return
    shown = commands.show_snapshot(state.session, tag)
    _out(listings.render_snapshot(shown.snapshot, shown.kinds, shown.problems, fmt))


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
    for tag, kernels in commands.reindex(state.session, tags, sass=sass).items():
        _out(f"reindexed {tag}: {kernels} kernels\n")


@app.command()
def rm(tag: TagArg) -> None:
    """Remove a snapshot from the catalog (its blobs stay until `kdb gc`)."""
    commands.remove(state.session, tag)
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
    fmt = _fmt(fmt, ("table", "json"))
    result = commands.collect_garbage(state.session, compact=compact, grace_s=grace)
    if fmt == "json":
        _out(tables.to_json(result.__dict__))
    else:
        _out(listings.gc_summary(result))


@app.command()
def verify(fmt: FormatOpt = "table") -> None:
    """Re-hash every blob and check every catalog reference; exit 5 on any problem."""
    fmt = _fmt(fmt, ("table", "json"))
    report = commands.verify(state.session)
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
    result = commands.export(state.session, tag, dest, verbatim=verbatim)
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
    data = commands.read_file(state.session, tag, path)
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
    fmt = _fmt(fmt, ("table", "json", "csv", "markdown"))
    columns, rows = commands.run_sql(state.session, query)
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
    plan = commands.shell(state.session, print_sql=print_sql)
    if plan.text is not None:
        _out(plan.text)
        return
    sys.stderr.write(
        'kdb shell: read-only, no files, no network; to save a result: kdb sql "SELECT …" --format csv > FILE\n'
    )
    sys.stderr.flush()
    os.execv(plan.argv[0], list(plan.argv))


# the global options that take a value (the callback above): the command's name is the first other word
_VALUED_GLOBALS = frozenset({"--home", "--wait", "--catalog", "--store"})


def _command_name(argv: list[str]) -> str | None:
    words = iter(argv)
    for word in words:
        if word in _VALUED_GLOBALS:
            next(words, None)
        elif word == "--":
            return None
        elif not word.startswith("-"):
            return word
    return None


def _registered_name(command: typer.models.CommandInfo) -> str:
    """The name typer gives a command: its own, else its function's, lower case, `_` as `-`."""
    return command.name or getattr(command.callback, "__name__", "").lower().replace("_", "-")


def app_for(argv: list[str]) -> typer.Typer:
    """The app with only the command argv names (typer builds every command's click object, options and help for
    any command it runs: ~1/3 of the app's start-up); the whole app for help, completion or a name it does not
    know, so that what is printed, suggested or completed is the same."""
    name = _command_name(argv)
    if name is None or any(k.startswith("_KDB_COMPLETE") for k in os.environ):
        return app
    commands = [c for c in app.registered_commands if _registered_name(c) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    only = copy.copy(app)
    only.registered_commands, only.registered_groups = commands, groups
    return only


def run(argv: list[str] | None = None) -> int:
    """Run kdb with argv and return its exit status; every error becomes one line on stderr."""
    try:
        args = sys.argv[1:] if argv is None else argv
        rv = app_for(args)(args=args, prog_name="kdb", standalone_mode=False)
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


from kdb.cli import capture as _capture  # noqa: E402, F401  (registers `capture env|check|commit|status` on `app`)
from kdb.cli import compare as _compare  # noqa: E402, F401  (registers diff and report on `app`)
from kdb.cli import fleet as _fleet  # noqa: E402, F401  (registers push and pull on `app`)
from kdb.cli import profile as _profile  # noqa: E402, F401  (registers `profile import` on `app`)
from kdb.cli import replay as _replay  # noqa: E402, F401  (registers `toolchain`, `replay` and `bisect` on `app`)
