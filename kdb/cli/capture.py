"""`kdb capture env|check|commit|status`: kdb as Triton's cache (kdb/capture/)."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from kdb.api import _capture as capture
from kdb.cli.common import _out, app, state

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
