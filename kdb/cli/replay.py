"""`kdb toolchain add|list|rm`, `kdb replay` and `kdb bisect`: another Triton release's answer, before the upgrade."""

from __future__ import annotations

from typing import Annotated

import typer

from kdb.cli.common import _fmt, _out, app, state
from kdb.render import replay as render

toolchain_app = typer.Typer(
    no_args_is_help=True,
    help="The Python environments kdb compiles with: one Triton release each (for replay and bisect).",
    rich_markup_mode=None,
)
app.add_typer(toolchain_app, name="toolchain")

VersionArg = Annotated[str, typer.Argument(metavar="VERSION", help="a Triton release, e.g. 3.7.1")]


@toolchain_app.command("add", epilog=render.TOOLCHAIN_EPILOG)
def toolchain_add(
    version: VersionArg,
    python: Annotated[
        str | None,
        typer.Option("--python", metavar="PATH", help="an interpreter that already has this Triton release"),
    ] = None,
) -> None:
    """Register an interpreter with Triton VERSION, or make one under the kdb home with pip."""
    from kdb.api import _replay as replays  # imported when the command runs: replay loads the ingest

    _out(render.render_toolchain_change(replays.toolchain_add(state.session, version, python), "added"))


@toolchain_app.command("list", epilog=render.TOOLCHAIN_EPILOG)
def toolchain_list(
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT", help="table or json")] = "table",
) -> None:
    """The registered toolchains."""
    from kdb.api import _replay as replays

    _out(render.render_toolchains(replays.toolchain_list(state.session), _fmt(fmt, ("table", "json"))))


@toolchain_app.command("rm", epilog=render.TOOLCHAIN_EPILOG)
def toolchain_rm(version: VersionArg) -> None:
    """Forget a toolchain (and delete its environment when kdb made it)."""
    from kdb.api import _replay as replays

    _out(render.render_toolchain_change(replays.toolchain_rm(state.session, version), "removed"))


@app.command("replay", epilog=render.REPLAY_EPILOG)
def replay(
    source: Annotated[str, typer.Argument(metavar="TAG", help="the snapshot to replay")],
    triton: Annotated[str, typer.Option("--triton", metavar="VERSION", help="the release to compile with")],
    tag: Annotated[str, typer.Option("--tag", "-t", metavar="NEW", help="the tag of the replayed snapshot")],
    target: Annotated[
        str | None, typer.Option("--target", metavar="ARCH", help="compile for another GPU (gfx950, sm90)")
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", metavar="N", help="compiles at once")] = 1,
    timeout: Annotated[float, typer.Option("--timeout", metavar="S", help="seconds one kernel may compile")] = 600.0,
    replace: Annotated[bool, typer.Option("--replace", help="overwrite the snapshot NEW")] = False,
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT", help="table or json")] = "table",
) -> None:
    """Compile every kernel of TAG from its stored TTIR with Triton VERSION, offline, as snapshot NEW.

    A value the user set is kept; an option at its release's default takes VERSION's default; an option VERSION
    lacks is dropped and said. A kernel that cannot be replayed is a problem of NEW with the compiler's first error
    line. Exit 1 when some kernel could not be replayed."""
    from kdb.api import _replay as replays

    fmt = _fmt(fmt, ("table", "json"))
    request = replays.ReplayRequest(source, triton, tag, target, max(1, jobs), timeout, None, replace)
    document = render.replay_document(replays.replay(state.session, request))
    _out(render.render_replay(document, fmt))
    if document["failed"]:
        raise typer.Exit(1)


@app.command("bisect", epilog=render.BISECT_EPILOG)
def bisect(
    a: Annotated[str, typer.Argument(metavar="A", help="the older snapshot (replayed)")],
    b: Annotated[str, typer.Argument(metavar="B", help="the newer snapshot")],
    kernel: Annotated[
        str | None, typer.Option("--kernel", "-k", metavar="KEY|GLOB", help="these kernels, changed or not")
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", metavar="N", help="compiles at once")] = 1,
    timeout: Annotated[float, typer.Option("--timeout", metavar="S", help="seconds one kernel may compile")] = 600.0,
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT", help="table, markdown or json")] = "table",
) -> None:
    """For the kernels that changed between A and B, the first release where each figure changed.

    A's kernels are replayed from their stored TTIR with every registered toolchain after A's release up to B's."""
    from kdb.api import _replay as replays

    fmt = _fmt(fmt, ("table", "markdown", "json"))
    request = replays.BisectRequest(a, b, kernel, max(1, jobs), timeout)
    _out(render.render_bisect(render.bisect_document(replays.bisect(state.session, request)), fmt))
