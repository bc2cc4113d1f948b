"""`kdb profile import FILE… --tag T`: measured time beside a snapshot's artifacts."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from kdb.cli.common import _fmt, _out, app, state
from kdb.render import profiles as render_profiles

profile_app = typer.Typer(
    no_args_is_help=True,
    help="Measured time: import profiles of a run (torch.profiler traces, Triton Proton) into a snapshot.",
    rich_markup_mode=None,
)
app.add_typer(profile_app, name="profile")


@profile_app.command("import", epilog=render_profiles.PROFILE_EPILOG)
def import_(
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE...", help="torch.profiler Chrome traces (.json, .json.gz) or Triton Proton .hatchet files"
        ),
    ],
    tag: Annotated[str, typer.Option("--tag", "-t", metavar="TAG", help="the snapshot of the cache the run used")],
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT", help="table or json")] = "table",
) -> None:
    """Link every kernel launch of the files to the snapshot's kernel folder that ran it; store the files."""
    from kdb.profile.importer import import_profiles

    fmt = _fmt(fmt, ("table", "json"))
    summary = import_profiles(state.home, tag, files, state.wait)
    document = {"tag": summary.tag, "files": [asdict(f) for f in summary.files]}
    _out(render_profiles.render_profile_import(document, fmt))
