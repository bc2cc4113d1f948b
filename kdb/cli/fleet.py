"""`kdb push` / `kdb pull`: snapshots between the local home (--home) and the shared one (--catalog/--store)."""

from __future__ import annotations

from typing import Annotated

import typer

from kdb.cli.capture import record_captures
from kdb.cli.common import FormatOpt, _fmt, _out, app, state
from kdb.errors import UsageError
from kdb.render import listings
from kdb.store.home import Home
from kdb.store.transfer import transfer

TagsArg = Annotated[list[str], typer.Argument(metavar="TAG...", help="snapshot tags")]
AsOpt = Annotated[str | None, typer.Option("--as", metavar="NEWTAG", help="the tag on the other side (one TAG only)")]


def _shared() -> Home:
    if state.shared_home is None:
        raise UsageError(
            "push and pull move snapshots between the local home (--home) and a shared one: "
            "give --catalog and --store (or KDB_CATALOG and KDB_STORE)"
        )
    return state.shared_home


@app.command()
def push(tags: TagsArg, as_tag: AsOpt = None, fmt: FormatOpt = "table") -> None:
    """Copy snapshots from the local home to the shared one: only the blobs it lacks travel, each checked on
    arrival; each snapshot appears there whole or not at all."""
    fmt = _fmt(fmt)
    record_captures(*tags, home=state.local_home)
    results = transfer(state.local_home, _shared(), tags, state.wait, as_tag=as_tag)
    _out(listings.render_transfer(results, "push", state.local_home.describe(), _shared().describe(), fmt))


@app.command()
def pull(tags: TagsArg, as_tag: AsOpt = None, fmt: FormatOpt = "table") -> None:
    """Copy snapshots from the shared home to the local one (the reverse of push)."""
    fmt = _fmt(fmt)
    record_captures(*tags, home=_shared())
    results = transfer(_shared(), state.local_home, tags, state.wait, as_tag=as_tag)
    _out(listings.render_transfer(results, "pull", _shared().describe(), state.local_home.describe(), fmt))
