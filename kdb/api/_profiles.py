"""`kdb profile import` / `kdb profile rm` as values: measured time beside a snapshot's artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdb.api._session import Session

if TYPE_CHECKING:
    from kdb.profile.importer import ImportSummary


def import_profiles(session: Session, tag: str, files: list[Path], *, allow_unlinked: bool = False) -> ImportSummary:
    """Link every kernel launch of the files to the snapshot's kernel folder that ran it; store the files."""
    from kdb.profile.importer import import_profiles as run_import

    session.record_captures(tag)  # the kernel folders a capture left waiting are the ones its launches link to
    return run_import(session.home, tag, files, session.wait_s, allow_unlinked=allow_unlinked)


def remove_profile(session: Session, tag: str, profile: str) -> dict[str, Any]:
    """Forget one imported profile of a snapshot → its row (`name`, `profile_hash`)."""
    from kdb.profile.importer import remove_profile as run_remove

    return run_remove(session.home, tag, profile, session.wait_s)
