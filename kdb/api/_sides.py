"""The one side resolver: what a diff or report argument names (a snapshot tag of the home, or a cache directory
ingested into a temporary home), opened over a read-only catalog held open while it is used."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kdb.api._session import Session
from kdb.errors import TagError, UsageError

if TYPE_CHECKING:
    from kdb.diff.sides import Side
    from kdb.store.blobs import BlobStore
    from kdb.store.catalog import Catalog

TAG_PREFIX = "tag:"  # `kdb diff tag:NAME …`: the snapshot NAME, whatever directory is called NAME


@dataclass(frozen=True)
class Source:
    """A snapshot to read: its catalog (open), its blob store, its tag, and the label outputs give it (the tag,
    or the directory it was ingested from)."""

    catalog: Catalog
    store: BlobStore
    tag: str
    label: str


def tag_of(ref: str) -> str:
    """The tag an argument names if it names one (`tag:NAME` is NAME)."""
    return ref[len(TAG_PREFIX) :] if ref.startswith(TAG_PREFIX) else ref


@contextmanager
def open_source(session: Session, ref: str, *, directories: bool = True) -> Iterator[Source]:
    """The snapshot `ref` names: a tag of the home, else (with `directories`) a cache directory ingested into a
    temporary home, deleted afterwards. A name that is both a tag and a directory is refused (exit 2) rather than
    silently taken as either: `tag:NAME` names the snapshot, `./NAME` the directory (a tag never holds a `/`,
    kdb/store/tags.py). Without `directories` (the Python API) `ref` is a tag, and a home without a catalog says
    so."""
    home = session.home
    explicit = directories and ref.startswith(TAG_PREFIX)
    tag = tag_of(ref) if directories else ref
    path = Path(ref)
    if not directories and not home.has_catalog():
        raise TagError(f"unknown snapshot {tag!r}: the home {home.root} has no snapshot yet")
    if home.has_catalog():
        with session.reader() as catalog:
            if catalog.snapshot_id(tag) is not None:
                if directories and not explicit and path.is_dir():
                    as_path = f"./{ref}" if "/" not in ref else str(path.resolve())
                    raise UsageError(
                        f"{ref!r} is both a snapshot tag of {home.describe()} and a directory: "
                        f"write {TAG_PREFIX}{ref} for the snapshot or {as_path} for the directory"
                    )
                yield Source(catalog, home.store, tag, tag)
                return
    if explicit or not directories:
        raise TagError(f"unknown snapshot {tag!r} (see `kdb tags`)")
    if not path.is_dir():
        raise TagError(f"{ref!r} is neither a snapshot tag (see `kdb tags`) nor a cache directory")
    from kdb.ingest.temporary import temporary_snapshot
    from kdb.store.catalog import Catalog

    with (
        session.directory_progress(path) as progress,
        temporary_snapshot(path, session.wait_s, progress) as (temp_home, tag),
        Catalog.open(temp_home.catalog_path, read_only=True, wait_s=session.wait_s) as catalog,
    ):
        yield Source(catalog, temp_home.store, tag, str(path))


@contextmanager
def open_side(session: Session, ref: str, *, directories: bool = True) -> Iterator[Side]:
    """The loaded diff side of `ref` (open_source), its catalog held open until the block ends (so every lazy
    read of the side sees one catalog state)."""
    from kdb.diff.sides import load_side

    with open_source(session, ref, directories=directories) as source:
        yield load_side(source.catalog.diffs, source.store, source.tag, source.label)
