"""`kdb capture env|check|commit|status`: kdb as Triton's cache (kdb/capture/)."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from kdb.cli.common import _out, app, state
from kdb.errors import InputError

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
    from kdb.capture.spool import check_tag

    return check_tag(tag or os.environ.get("KDB_CAPTURE_TAG") or default_tag())


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


@capture_app.command("check")
def check() -> None:
    """Say which of Triton's cache hooks the Triton of this Python has (exit 3 when it has neither)."""
    from kdb.capture.hooks import triton_hooks

    hooks = triton_hooks()
    _out(hooks.describe() + "\n")
    if not hooks.cache_manager and not hooks.remote_backend:
        raise InputError(hooks.describe())


@capture_app.command("commit")
def commit(
    tag: TagOpt = None,
    wait: Annotated[float, typer.Option("--wait-commit", metavar="SECONDS", help="wait for a running commit")] = 60.0,
) -> None:
    """Record what captures of TAG left spooled (a process killed, the catalog busy at its exit)."""
    from kdb.capture.cache import Capture

    capture = Capture(state.home, _tag(tag))
    try:
        recorded = capture.commit(wait_s=wait)
    finally:
        capture.close()
    _out(f"recorded {recorded} folders into {capture.layout.tag}\n")


@capture_app.command("status")
def status(tag: TagOpt = None) -> None:
    """Folders of TAG spooled and not recorded yet, whole (compile finished) or not; folders the index serves."""
    from kdb.capture.cache import capture_root
    from kdb.capture.spool import SpoolLayout

    layout = SpoolLayout(capture_root(state.home), _tag(tag))
    spooled = sorted(p.name for p in layout.spool.iterdir()) if layout.spool.is_dir() else []
    whole = {p.name for p in layout.whole_folders()}
    index = layout.root / "index"
    served = sum(1 for _ in index.glob("*/*.json")) if index.is_dir() else 0
    _out(
        f"{layout.tag}: {len(layout.waiting())} whole folders wait to be recorded, "
        f"{len(spooled) - len(whole)} still being written; the index serves {served} folders (all tags)\n"
    )
