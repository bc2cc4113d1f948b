"""`kdb push` / `kdb pull`: copy snapshots between two homes (a local one and a shared one).

Only the blobs the destination lacks travel, as stored (zstd frames), each checked on arrival
(decompressed and re-hashed: the source is never trusted). Blobs first, then the catalog rows in one
transaction through the same writer an ingest uses, so the snapshot appears whole or not at all; a
transfer killed before its commit leaves only unreferenced, intact blobs (the next transfer reuses
them; `kdb gc` frees them, on a shared home after its grace period, which also keeps a concurrent gc
from deleting them before the commit names them)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kdb.errors import CollectedMeanwhile, TagError, UsageError
from kdb.store.catalog import Catalog
from kdb.store.dictionary_index import dict_id_of
from kdb.store.home import Home
from kdb.store.tags import check_tag

ATTEMPTS = 3  # a concurrent gc on a shared destination may collect a reused blob: copy again


@dataclass(frozen=True)
class TransferResult:
    tag: str  # on the source
    dest_tag: str  # on the destination
    status: str  # copied, present (the destination holds the same snapshot already)
    kernels: int
    blobs: int  # distinct blobs the snapshot references
    blobs_copied: int
    bytes_copied: int  # stored (compressed) bytes that travelled


def transfer(
    source: Home,
    dest: Home,
    tags: list[str],
    wait_s: float,
    *,
    as_tag: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[TransferResult]:
    """Copy each snapshot `tags` names from `source` to `dest` (as `as_tag`, with one tag)."""
    if as_tag is not None and len(tags) != 1:
        raise UsageError("--as renames one snapshot: give exactly one TAG with it")
    for dest_tag in [as_tag] if as_tag is not None else tags:
        check_tag(dest_tag)  # a tag the other side gets is a new tag there
    if not source.has_catalog():
        raise TagError(f"no snapshot in {source.describe()} yet")
    return [_transfer_one(source, dest, tag, as_tag or tag, wait_s, progress) for tag in tags]


def _transfer_one(
    source: Home, dest: Home, tag: str, dest_tag: str, wait_s: float, progress: Callable[[int, int], None] | None
) -> TransferResult:
    scratch = Path(tempfile.mkdtemp(prefix="kdb-transfer-"))
    try:
        staging = scratch / "snapshot.duckdb"
        with Catalog.open(source.catalog, read_only=True, wait_s=wait_s) as catalog:
            content = catalog.transfer.snapshot_content(tag)
            blobs = catalog.transfer.snapshot_blobs(tag)
            kernels = catalog.queries.get_snapshot(tag)["kernel_count"]
            snapshot = catalog.transfer.stage_snapshot(tag, staging)
        snapshot["tag"] = dest_tag
        with dest.writer(wait_s):
            with Catalog.open(dest.catalog, wait_s=wait_s) as catalog:
                if catalog.snapshot_id(dest_tag) is not None:
                    if catalog.transfer.snapshot_content(dest_tag) == content:
                        return TransferResult(tag, dest_tag, "present", kernels, len(blobs), 0, 0)
                    raise TagError(
                        f"{dest.describe()} has a snapshot {dest_tag!r} already, with other content "
                        "(`--as NEWTAG` copies it under another tag)"
                    )
            dest.store.ensure()
            for attempt in range(ATTEMPTS):
                copied, nbytes = _copy_blobs(source, dest, blobs, progress)
                dest.store.durable()
                try:
                    with Catalog.open(dest.catalog, wait_s=wait_s) as catalog:
                        catalog.writer.write_snapshot(
                            snapshot,
                            staging,
                            replace=False,
                            ensure_blobs=dest.store.refresh if dest.is_shared else None,
                        )
                    break
                except CollectedMeanwhile:
                    if attempt == ATTEMPTS - 1:
                        raise
        return TransferResult(tag, dest_tag, "copied", kernels, len(blobs), copied, nbytes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _copy_blobs(
    source: Home, dest: Home, blobs: list[tuple[str, int]], progress: Callable[[int, int], None] | None
) -> tuple[int, int]:
    """Copy the blobs `dest` lacks, or holds damaged (by the frame check of kdb/store/blobs.py: the copy
    replaces it); return (blobs copied, stored bytes copied). The dictionaries frames were made with travel
    first; a frame whose dictionary id names another dictionary at `dest` (ids are random 31-bit numbers:
    possible, unlikely) is decompressed and stored anew instead."""
    copied = nbytes = 0
    clashing = dest.store.dictionaries.adopt(source.store.dictionaries)
    for i, (digest, size) in enumerate(blobs):
        # present and whole: its mtime refreshed (a shared gc's grace period); else copied
        if not dest.store.repair.holds(digest, size):
            payload = source.store.read_compressed(digest)
            if dict_id_of(payload) in clashing:
                put = dest.store.put_bytes(source.store.get(digest, size), digest)
                written = put.new or put.repaired
                copied += written
                nbytes += put.stored_size if written else 0
            elif dest.store.put_compressed(digest, size, payload):
                copied += 1
                nbytes += len(payload)
        if progress is not None:
            progress(i + 1, len(blobs))
    return copied, nbytes
