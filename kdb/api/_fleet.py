"""`kdb push` / `kdb pull` as values: snapshots copied between the local home and the shared one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kdb.api._session import Session

if TYPE_CHECKING:
    from kdb.store.transfer import TransferResult


@dataclass(frozen=True)
class Transferred:
    """Each snapshot's transfer, and the two homes described for the listing (`from` and `to`)."""

    results: list[TransferResult]
    source: str
    dest: str


def push(session: Session, tags: list[str], *, as_tag: str | None = None) -> Transferred:
    """Copy snapshots from the local home to the shared one: only the blobs it lacks travel, each checked on
    arrival; each snapshot appears there whole or not at all."""
    from kdb.store.transfer import transfer

    session.record_captures(*tags, home=session.local_home)
    shared = session.require_shared()
    results = transfer(session.local_home, shared, tags, session.wait_s, as_tag=as_tag)
    return Transferred(results, session.local_home.describe(), shared.describe())


def pull(session: Session, tags: list[str], *, as_tag: str | None = None) -> Transferred:
    """Copy snapshots from the shared home to the local one (the reverse of push)."""
    from kdb.store.transfer import transfer

    shared = session.require_shared()
    session.record_captures(*tags, home=shared)
    results = transfer(shared, session.local_home, tags, session.wait_s, as_tag=as_tag)
    return Transferred(results, shared.describe(), session.local_home.describe())
