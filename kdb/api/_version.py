"""kdb's version, for `kdb --version`: the package root's constant (never importlib.metadata), in a module that
imports nothing else, so that the CLI answers --version before importing typer or any other part of kdb."""

from __future__ import annotations

from kdb import __version__ as VERSION

__all__ = ["VERSION"]
