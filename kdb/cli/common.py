"""What every command module of the CLI shares: the typer app, the global state its callback fills, the
format option and the printing primitives. Command modules import this, never kdb.cli itself (no circle)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from kdb.api._version import VERSION
from kdb.cli.terminal import page_text
from kdb.errors import UsageError
from kdb.render import tables

if TYPE_CHECKING:
    from kdb.api._session import Session

app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    help="kdb: an offline artifact database and diff tool for Triton kernel caches.",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _readable_types() -> None:
    """Help shows an argument's metavar (`[TAG]...`), not Python's `<list[str]>` (typer >= 0.2x prints types)."""
    import typer.core as core

    cls = getattr(core, "TyperArgument", None)
    # Usage lines name a required argument as `DIR`, not typer's `{DIR}` (click's and every man page's way).
    make_metavar = getattr(cls, "make_metavar", None)
    if cls is not None and make_metavar is not None:

        def metavar(self: object, ctx: object, **kw: object) -> str:
            text = make_metavar(self, ctx, **kw)
            return text[1:-1] if text.startswith("{") and text.endswith("}") else text

        cls.make_metavar = metavar
    original = getattr(cls, "display_type_rich", None)
    if cls is None or original is None:
        return

    def display(self: object, ctx: object) -> str | None:
        text = original(self, ctx)
        return None if text and "[" in text else text

    cls.display_type_rich = display


_readable_types()


class State:
    session: Session  # the global options resolved: where commands act, how long they wait


state = State()

FormatOpt = Annotated[str, typer.Option("--format", "-f", metavar="FORMAT", help="table, json or csv")]
TagArg = Annotated[str, typer.Argument(metavar="TAG", help="snapshot tag")]


def _fmt(value: str, allowed: tuple[str, ...] = tables.FORMATS) -> str:
    if value not in allowed:
        raise UsageError(f"unknown format {value!r}: choose one of {', '.join(allowed)}")
    return value


def _out(text: str) -> None:
    sys.stdout.write(text)


def _page(text: str, enabled: bool = True) -> None:
    page_text(text, enabled)


def _version(value: bool) -> None:
    if value:
        _out(f"kdb {VERSION}\n")
        raise typer.Exit()


def _warn(text: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"kdb: warning: {text}\n")
