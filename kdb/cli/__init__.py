"""The `kdb` command line: parse arguments, call the core, render, and map errors to exit codes.

Start-up is what every command, test subprocess and hooked Triton process pays, so this package imports
nothing of its own up front: main() answers `kdb --version` from the package's constant without importing
typer or any of kdb, and any other command imports the app (kdb/cli/commands.py), whose command modules
import the parts of kdb.api a command runs when it runs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

    app: typer.Typer

__all__ = ["app", "main", "run"]


def __getattr__(name: str) -> Any:
    """`kdb.cli.app`, the typer app, imported on first use."""
    if name == "app":
        from kdb.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run(argv: list[str] | None = None) -> int:
    """Run kdb with argv and return its exit status; every error becomes one line on stderr."""
    from kdb.cli.commands import run as run_app

    return run_app(argv)


def main() -> None:
    if sys.argv[1:] == ["--version"]:  # as typer's eager --version prints it, without importing typer
        from kdb.api._version import VERSION

        sys.stdout.write(f"kdb {VERSION}\n")
        sys.exit(0)
    sys.exit(run())
