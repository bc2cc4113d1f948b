"""`kdb capture env|check|commit|status`: kdb as Triton's cache (kdb/capture/)."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from kdb.api import _capture as capture
from kdb.cli.common import _fmt, _out, app, state
from kdb.errors import ExitCode
from kdb.render.capture import render_misses

capture_app = typer.Typer(
    no_args_is_help=True,
    help="kdb as Triton's cache: the environment to set, what the installed Triton supports, pending commits.",
    rich_markup_mode=None,
)
app.add_typer(capture_app, name="capture")

TagOpt = Annotated[
    str | None,
    typer.Option("--tag", "-t", metavar="TAG", help="the capture's snapshot (default: $KDB_CAPTURE_TAG, else today's)"),
]


@capture_app.command("env")
def env(
    tag: TagOpt = None,
    remote: Annotated[
        bool,
        typer.Option("--remote", help="keep Triton's local cache folder, with kdb as its remote cache backend"),
    ] = False,
) -> None:
    """Print the environment that makes Triton use this kdb home as its cache (`eval $(kdb capture env)`)."""
    pairs = capture.environment(state.session, tag, remote=remote)
    _out("".join(f"export {name}={shlex.quote(value)}\n" for name, value in pairs))


@capture_app.command("check")
def check() -> None:
    """Say which of Triton's cache hooks the Triton this Python imports has (exit 3, one line on stderr, when it
    has neither, or when a module shadows it or it cannot be imported)."""
    _out(capture.check() + "\n")


@capture_app.command("commit")
def commit(
    tag: TagOpt = None,
    wait: Annotated[float, typer.Option("--wait-commit", metavar="SECONDS", help="wait for a running commit")] = 60.0,
) -> None:
    """Record what captures of TAG left spooled (a process killed, the catalog busy at its exit)."""
    done = capture.commit(state.session, tag, wait_s=wait)
    _out(f"recorded {done.folders} folders into {done.tag}\n")


@capture_app.command("status")
def status(tag: TagOpt = None) -> None:
    """Folders of TAG spooled and not recorded yet: whole (compile finished), still being written, or left by a
    writer that died mid-compile (each named); folders the index serves."""
    _out("".join(line + "\n" for line in capture.status(state.session, tag)))


@capture_app.command("misses")
def misses(
    tag: TagOpt = None,
    after_warmup: Annotated[
        bool, typer.Option("--after-warmup", help="only compiles after their process marked the end of warm-up")
    ] = False,
    fail: Annotated[bool, typer.Option("--fail", help="exit 1 when any compile is listed (a CI gate)")] = False,
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT", help="table, json or markdown")] = "table",
) -> None:
    """Every compile of TAG's captures (not a hit), with the nearest earlier specialization of the same kernel kdb
    held and what differs: `constexpr BLOCK_M 64→128`, `arg 2 dtype fp16→bf16`, `num_warps 4→8`,
    `TRITON_DISABLE_LINE_INFO unset → "0"`, `source moved from line 104 to 106, body unchanged`,
    `debug locations differ only in a path`, `Triton 3.6.0 → 3.7.1`, `first compile of this kernel`. A part
    a release does not expose is said to be unknown, and damaged record lines are counted. Compiles after
    warm-up (KDB_CAPTURE_PHASE, or `kdb.capture.end_warmup()` in the process) come first.

    Examples:

        kdb capture misses --tag serving-nightly

        kdb capture misses --after-warmup --fail --format markdown   # exit 1 when anything compiled after warm-up
    """
    fmt = _fmt(fmt, ("table", "json", "markdown"))
    document = capture.misses(state.session, tag, after_warmup=after_warmup)
    _out(render_misses(document, fmt))
    if fail and document["compiles"]:
        raise typer.Exit(ExitCode.FINDINGS)
