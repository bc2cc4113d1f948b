"""kdb: an offline artifact database and diff tool for Triton kernel caches.

The Python API (kdb/api/__init__.py documents it): `with kdb.open() as db: db.diff("a", "b").to_json()`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import os

    from kdb.api import Kdb

# The package version (pyproject.toml reads it from here): a constant, since importlib.metadata cost
# 25-45 ms of every command's start-up.
__version__ = "0.1.0"
__all__ = ["__version__", "open"]


def open(
    home: str | os.PathLike[str] | None = None,
    *,
    catalog: str | None = None,
    store: str | os.PathLike[str] | None = None,
    wait: float = 600.0,
) -> Kdb:
    """Open a kdb home and return a `kdb.api.Kdb` (kdb.api.open documents the arguments). kdb.api is
    imported here, on first use, so that `import kdb`, which every CLI command pays for, stays cheap."""
    from kdb.api import open as api_open

    return api_open(home, catalog=catalog, store=store, wait=wait)
