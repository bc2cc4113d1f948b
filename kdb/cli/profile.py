"""`kdb profile import FILE… --tag T` and `kdb profile rm NAME|SHA256 --tag T`: measured time beside a snapshot's
artifacts."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from kdb.api import _profiles as profiles
from kdb.cli.common import _fmt, _out, app, state
from kdb.render import profiles as render_profiles

profile_app = typer.Typer(
    no_args_is_help=True,
    help="Measured time: import profiles of a run (torch.profiler traces, Triton Proton) into a snapshot.",
    rich_markup_mode=None,
)
app.add_typer(profile_app, name="profile")

TagOpt = Annotated[str, typer.Option("--tag", "-t", metavar="TAG", help="the snapshot of the cache the run used")]


@profile_app.command("import", epilog=render_profiles.PROFILE_EPILOG)
def import_(
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE...", help="torch.profiler Chrome traces (.json, .json.gz) or Triton Proton .hatchet files"
        ),
    ],
    tag: TagOpt,
    allow_unlinked: Annotated[
        bool,
        typer.Option(
            "--allow-unlinked",
            help="import a profile even when more than half of its Triton launches find no kernel folder of the "
            "snapshot (refused otherwise: a run of another cache)",
        ),
    ] = False,
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT", help="table or json")] = "table",
) -> None:
    """Link every kernel launch of the files to the snapshot's kernel folder that ran it; store the files.

    A profile recorded on a GPU that runs none of the snapshot's targets is refused (exit 3), and so is one most of
    whose Triton launches find no kernel of the snapshot, unless --allow-unlinked. The same profile imported again,
    plain or gzipped, replaces its rows."""
    fmt = _fmt(fmt, ("table", "json"))
    summary = profiles.import_profiles(state.session, tag, files, allow_unlinked=allow_unlinked)
    document = {"tag": summary.tag, "files": [asdict(f) for f in summary.files]}
    _out(render_profiles.render_profile_import(document, fmt))


@profile_app.command("rm", epilog=render_profiles.PROFILE_RM_EPILOG)
def rm(
    profile: Annotated[
        str,
        typer.Argument(
            metavar="NAME|SHA256",
            help="the file name it was imported with, or the sha256 of the file or of its JSON (8+ hex digits)",
        ),
    ],
    tag: Annotated[str, typer.Option("--tag", "-t", metavar="TAG", help="the snapshot it was imported into")],
) -> None:
    """Forget one imported profile of a snapshot (its file's blob stays until `kdb gc`)."""
    row = profiles.remove_profile(state.session, tag, profile)
    _out(
        f"removed profile {row['name']} (sha256 {row['profile_hash']}) from {tag}; "
        "run `kdb gc` to free its file if nothing else uses it\n"
    )
