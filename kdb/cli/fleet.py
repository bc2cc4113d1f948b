"""`kdb push` / `kdb pull`: snapshots between the local home (--home) and the shared one (--catalog/--store)."""

from __future__ import annotations

from typing import Annotated

import typer

from kdb.api import _fleet as fleet
from kdb.cli.common import FormatOpt, _fmt, _out, app, state
from kdb.render import listings

TagsArg = Annotated[list[str], typer.Argument(metavar="TAG...", help="snapshot tags")]
AsOpt = Annotated[str | None, typer.Option("--as", metavar="NEWTAG", help="the tag on the other side (one TAG only)")]


@app.command()
def push(tags: TagsArg, as_tag: AsOpt = None, fmt: FormatOpt = "table") -> None:
    """Copy snapshots from the local home to the shared one: only the blobs it lacks travel, each checked on
    arrival; each snapshot appears there whole or not at all."""
    fmt = _fmt(fmt)
    done = fleet.push(state.session, tags, as_tag=as_tag)
    _out(listings.render_transfer(done.results, "push", done.source, done.dest, fmt))


@app.command()
def pull(tags: TagsArg, as_tag: AsOpt = None, fmt: FormatOpt = "table") -> None:
    """Copy snapshots from the shared home to the local one (the reverse of push)."""
    fmt = _fmt(fmt)
    done = fleet.pull(state.session, tags, as_tag=as_tag)
    _out(listings.render_transfer(done.results, "pull", done.source, done.dest, fmt))
