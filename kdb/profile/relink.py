"""`kdb ingest --replace`: the snapshot's profiles carried over and relinked to the new snapshot's kernels, in the
replacing transaction (linking as an import does: kdb/profile/importer.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kdb.errors import KdbError
from kdb.profile.formats import Profile, parse_profile
from kdb.profile.importer import (
    MAX_NO_KERNEL_SHARE,
    FileSummary,
    describe_devices,
    describe_targets,
    folders_by_kernel,
    foreign_device,
    link_file,
)
from kdb.store.catalog import ProfileCatalog
from kdb.store.home import Home


@dataclass
class ProfileRelink:
    """Given to the catalog writer by `kdb ingest --replace`: called inside the replacing transaction with the old
    snapshot's id (before its rows go), it reads that snapshot's profile files back from the store; the function it
    returns is called with the new snapshot's id once its kernels are recorded, and links each profile again to
    them, in the same transaction. A profile whose stored file cannot be read back, or whose device runs none of
    the new snapshot's targets, is dropped and named (`dropped`); the others are kept (`kept`: their summaries).
    On a shared catalog the transaction may run again: each call starts afresh. Profiles are read back before the
    old rows go and relinked after the new ones are in, so a profile another process imported meanwhile is kept
    too, and nothing ever leaves their blobs unreferenced (a `kdb gc` could delete them)."""

    home: Home
    tag: str
    catalog: ProfileCatalog | None = None  # the writer's: set by `bound`
    kept: list[FileSummary] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)

    def bound(self, catalog: ProfileCatalog) -> ProfileRelink:
        self.catalog = catalog
        return self

    def __call__(self, old_sid: int) -> Callable[[int], None]:
        assert self.catalog is not None
        self.kept, self.dropped = [], []
        stored = []
        for row in self.catalog.profile_files_by_id(old_sid):
            try:
                profile = parse_profile(self.home.store.get(row["profile_hash"], row["size"]))
            except KdbError as exc:
                self._drop(row, f"its stored file cannot be read back: {exc}")
                continue
            stored.append((row, profile))
        return lambda sid: self._relink(sid, stored)

    def _relink(self, sid: int, stored: list[tuple[dict[str, Any], Profile]]) -> None:
        assert self.catalog is not None
        if not stored:
            return
        targets = self.catalog.snapshot_targets(self.tag)
        names = sorted({launch.name for _, profile in stored for launch in profile.launches})
        folders = folders_by_kernel(self.home, self.catalog.profile_folders(self.tag, names))
        files, times, unlinked = [], [], []
        for row, profile in stored:
            foreign = foreign_device(profile, targets)
            if foreign is not None:
                self._drop(
                    row,
                    f"recorded on {foreign.describe()}, but the snapshot now holds kernels for "
                    f"{describe_targets(targets)} only",
                )
                continue
            summary, linked, missed = link_file(profile, folders, row["profile_hash"])
            summary.name, summary.profile_hash, summary.targets = row["name"], row["profile_hash"], targets
            summary.mostly_unlinked = bool(
                summary.triton_launches and summary.no_kernel_launches > MAX_NO_KERNEL_SHARE * summary.triton_launches
            )
            self.kept.append(summary)
            files.append(
                {
                    **{k: row[k] for k in ("profile_hash", "name", "format", "gzipped", "size", "imported_at")},
                    "launches": profile.launch_count,
                    "total_ns": profile.total_ns,
                    "content_hash": profile.content_hash,
                    "device": describe_devices(profile.devices),
                }
            )
            times += linked
            unlinked += missed
        self.catalog.insert_profile_rows(sid, files, times, unlinked)

    def _drop(self, row: dict[str, Any], reason: str) -> None:
        self.dropped.append({"name": row["name"], "profile_hash": row["profile_hash"], "reason": reason})
