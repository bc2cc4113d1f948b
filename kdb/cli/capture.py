"""`kdb capture env|check|commit|status`: kdb as Triton's cache (kdb/capture/)."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from kdb.cli.common import _out, _warn, app, state
from kdb.errors import InputError
from kdb.store.home import Home

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


def _tag(tag: str | None) -> str:
    import os

    from kdb.capture.cache import default_tag
    from kdb.store.spool import check_tag

    # an explicit `--tag ''` is a tag that breaks the rules, not a request for the default
    return check_tag(tag if tag is not None else os.environ.get("KDB_CAPTURE_TAG") or default_tag())


@capture_app.command("env")
def env(
    tag: TagOpt = None,
    remote: Annotated[
        bool,
        typer.Option("--remote", help="keep Triton's local cache folder, with kdb as its remote cache backend"),
    ] = False,
) -> None:
    """Print the environment that makes Triton use this kdb home as its cache (`eval $(kdb capture env)`)."""
    home = state.home
    lines = []
    if remote:
        lines += [
            "TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager",
            "TRITON_REMOTE_CACHE_BACKEND=kdb.capture:RemoteBackend",
        ]
    else:
        lines.append("TRITON_CACHE_MANAGER=kdb.capture:CacheManager")
    if home.location is not None:
        lines += [f"KDB_CATALOG={home.location.url}", f"KDB_STORE={home.root.resolve()}"]
    else:
        lines.append(f"KDB_HOME={home.root.expanduser().resolve()}")
    lines.append(f"KDB_CAPTURE_TAG={_tag(tag)}")
    _out("".join(f"export {name}={shlex.quote(value)}\n" for name, _, value in (ln.partition("=") for ln in lines)))


def record_captures(*tags: str, home: Home | None = None) -> None:
    """Before a command reads `tags` (none given: every tag) of `home` (default: the home commands act on):
    record what captures left waiting for them, or say on stderr, one line a tag, how many folders wait and
    how to record them (kdb/capture/cache.py)."""
    from kdb.capture.cache import RECORD_BEFORE_READ_WAIT_S, record_waiting

    wait = min(state.wait, RECORD_BEFORE_READ_WAIT_S)
    for notice in record_waiting(home or state.home, list(tags) or None, wait):
        _warn(notice)


@capture_app.command("check")
def check() -> None:
    """Say which of Triton's cache hooks the Triton this Python imports has (exit 3, one line on stderr, when it
    has neither, or when a module shadows it or it cannot be imported)."""
    from kdb.capture.hooks import triton_hooks

    hooks = triton_hooks()
    if not hooks.usable:
        raise InputError(hooks.describe())
    _out(hooks.describe() + "\n")


@capture_app.command("commit")
def commit(
    tag: TagOpt = None,
    wait: Annotated[float, typer.Option("--wait-commit", metavar="SECONDS", help="wait for a running commit")] = 60.0,
) -> None:
    """Record what captures of TAG left spooled (a process killed, the catalog busy at its exit)."""
    from kdb.capture.cache import capture_root, record
    from kdb.store.spool import SpoolLayout

    layout = SpoolLayout(capture_root(state.home), _tag(tag))
    keys, adopted = record(state.home, layout, wait)
    _out(f"recorded {len(keys) + len(adopted)} folders into {layout.tag}\n")


@capture_app.command("status")
def status(tag: TagOpt = None) -> None:
    """Folders of TAG spooled and not recorded yet: whole (compile finished), still being written, or left by a
    writer that died mid-compile (each named); folders the index serves."""
    from kdb.capture.cache import status_lines

    _out("".join(line + "\n" for line in status_lines(state.home, _tag(tag))))
