"""One stored profile of a snapshot: `kdb profile rm`, `kdb cat TAG NAME|SHA256` (imported by kdb/profile/importer.py)."""

from __future__ import annotations

from typing import Any

from kdb.errors import TagError, UsageError
from kdb.store.catalog import Catalog
from kdb.store.home import Home


def _one_profile(catalog: Catalog, tag: str, key: str) -> dict[str, Any] | None:
    """The profile of the snapshot that `key` (a file name, or the sha256 of the file or of its JSON, or a prefix
    of 8+ hex digits) names; None when none does; UsageError when several do."""
    found = catalog.profiles.find_profiles(tag, key)
    if len(found) > 1:
        listed = ", ".join(f"{r['name']} {r['profile_hash'][:12]}" for r in found[:5])
        raise UsageError(
            f"{len(found)} profiles of snapshot {tag!r} match {key!r} ({listed}): name one by its sha256 "
            "(SELECT name, profile_hash FROM profile_files …)"
        )
    return found[0] if found else None


def remove_profile(home: Home, tag: str, key: str, lock_wait_s: float) -> dict[str, Any]:
    """Forget one profile file of a snapshot (its rows; its blob stays until `kdb gc`); return its row."""
    if not home.has_catalog():
        raise TagError(f"no snapshot tagged {tag!r}: the home {home.describe()} has no snapshot yet")
    with home.writer(lock_wait_s), Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
        row = _one_profile(catalog, tag, key)
        if row is None:
            raise UsageError(f"no profile {key!r} in snapshot {tag!r} (a file name or sha256 it was imported with)")
        catalog.profiles.remove_profile(tag, row["profile_hash"])
    return row


def stored_profile(home: Home, tag: str, key: str, lock_wait_s: float) -> bytes | None:
    """`kdb cat TAG KEY`: None when KEY is the path of a file of the snapshot (read as such), else the bytes of the
    profile file KEY names, as imported (verified against their hash); UsageError when it names neither."""
    if not home.has_catalog():
        return None
    with Catalog.open(home.catalog, read_only=True, wait_s=lock_wait_s) as catalog:
        if catalog.queries.snapshot_file(tag, key) is not None:
            return None
        row = _one_profile(catalog, tag, key)
    if row is None:
        raise UsageError(f"no file or profile {key!r} in snapshot {tag!r}")
    return home.store.get(row["profile_hash"], row["size"])
