"""`kdb profile import FILE… --tag T`: read profile files, link their launches to the snapshot's kernel folders,
store the files' bytes and record everything in one catalog transaction.

Every file is read and parsed before anything is written: a file kdb cannot read stops the import with one line
naming it, and the store and catalog stay as they were. Blobs are written first, the catalog last (as an ingest)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kdb.errors import InputError, ParseError, TagError
from kdb.profile.formats import Launches, Profile, parse_profile
from kdb.profile.link import NOT_TRITON, Folder, Link, inductor_grid, link_launches
from kdb.store.blobs import hash_bytes
from kdb.store.catalog import Catalog
from kdb.store.home import Home

# A profile of a long run is tens of MB; a file far beyond that is not one.
MAX_PROFILE_BYTES = 2 << 30


@dataclass
class FileSummary:
    """What one imported file held and how much of it was linked (times in ns)."""

    name: str
    format: str
    launches: int
    total_ns: int
    triton_launches: int = 0  # launches not counted as `not a Triton kernel`
    triton_ns: int = 0
    linked_launches: int = 0
    linked_ns: int = 0
    folders: int = 0  # distinct kernel folders linked
    by_rule: dict[str, int] = field(default_factory=dict)  # link rule -> launches
    unlinked: dict[str, list[int]] = field(default_factory=dict)  # reason -> [launches, ns]
    replaced: bool = False  # the same file was imported under the tag before: its rows were replaced

    @property
    def linked_share(self) -> float | None:
        """Linked Triton kernel time over all Triton kernel time (None without Triton launches)."""
        return self.linked_ns / self.triton_ns if self.triton_ns else None


@dataclass(frozen=True)
class ImportSummary:
    tag: str
    files: list[FileSummary]


def import_profiles(home: Home, tag: str, paths: list[Path], lock_wait_s: float) -> ImportSummary:
    parsed = _read_all(paths)
    if not home.has_catalog():
        raise TagError(f"no snapshot tagged {tag!r}: the home {home.describe()} has no snapshot yet")
    with home.writer(lock_wait_s):
        with Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
            catalog.require_snapshot(tag)
            names = sorted({launch.name for _, _, profile in parsed for launch in profile.launches})
            rows = catalog.profile_folders(tag, names)
            before = {f["profile_hash"]: f["imported_at"] for f in catalog.profile_files_of(tag)}
        folders = _folders(home, rows)
        now = datetime.now(UTC).replace(tzinfo=None)
        files, times, unlinked, summaries = [], [], [], []
        for path, data, profile in parsed:
            digest = hash_bytes(data)
            summary, linked, missed = _link_file(profile, folders, digest)
            summary.name, summary.replaced = path.name, digest in before
            summaries.append(summary)
            times += linked
            unlinked += missed
            files.append(
                {
                    "profile_hash": digest,
                    "name": path.name,
                    "format": profile.format,
                    "gzipped": profile.gzipped,
                    "size": len(data),
                    "launches": profile.launch_count,
                    "total_ns": profile.total_ns,
                    "imported_at": before.get(digest, now),  # a re-import keeps the first import's time
                }
            )
        home.store.ensure()
        blobs = []
        for _, data, _ in parsed:
            put = home.store.put_bytes(data)
            blobs.append({"hash": put.digest, "size": put.size, "stored_size": put.stored_size})
        home.store.durable()
        with Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
            catalog.record_profiles(
                tag, blobs, files, times, unlinked, ensure_blobs=home.store.refresh if home.is_shared else None
            )
    return ImportSummary(tag, summaries)


def _read_all(paths: list[Path]) -> list[tuple[Path, bytes, Profile]]:
    """Every file read and parsed (the same content given twice is read once)."""
    out, seen = [], set()
    for path in paths:
        try:
            if path.is_dir():
                raise InputError(f"{path}: a directory, not a profile file")
            if path.stat().st_size > MAX_PROFILE_BYTES:
                raise InputError(f"{path}: {path.stat().st_size} bytes, larger than any profile kdb reads")
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except PermissionError:
            raise InputError(f"{path}: permission denied") from None
        digest = hash_bytes(data)
        if digest in seen:
            continue
        seen.add(digest)
        try:
            out.append((path, data, parse_profile(data)))
        except ParseError as exc:
            raise InputError(f"{path}: {exc}") from None
    return out


def _folders(home: Home, rows: list[dict[str, Any]]) -> dict[str, list[Folder]]:
    """The linker's view of each candidate folder, by kernel name. The grid Inductor launches a folder with is
    worked out only where several folders share a name (it reads the generated module's source)."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    sources: dict[str, str] = {}
    out: dict[str, list[Folder]] = {}
    for name, group in by_name.items():
        folders = []
        for r in group:
            grid = None
            if len(group) > 1 and r["config"] and r["module_hash"] and r["grid_type"]:
                if r["module_hash"] not in sources:
                    raw = home.store.get(r["module_hash"], r["module_size"])
                    sources[r["module_hash"]] = raw.decode("utf-8", "replace")
                kwargs = json.loads(r["config"]).get("kwargs") or {}
                grid = inductor_grid(sources[r["module_hash"]], name, r["grid_type"], kwargs)
            folders.append(
                Folder(
                    r["cache_key"],
                    r["num_warps"],
                    r["warp_size"],
                    r["registers"],
                    r["shared"],
                    r["is_best"],
                    r["module"],
                    r["code_hash"],
                    grid,
                )
            )
        out[name] = folders
    return out


def _link_file(
    profile: Profile, folders: dict[str, list[Folder]], digest: str
) -> tuple[FileSummary, list[dict[str, Any]], list[dict[str, Any]]]:
    summary = FileSummary("", profile.format, profile.launch_count, profile.total_ns)
    linked: dict[str, dict[str, Any]] = {}
    missed: dict[tuple[str, str], dict[str, Any]] = {}
    for launch in profile.launches:
        link = link_launches(launch, folders.get(launch.name, []))
        if link.reason != NOT_TRITON:
            summary.triton_launches += launch.count
            summary.triton_ns += launch.total_ns
        if link.cache_key is None:
            _add_missed(missed, summary, launch, link, digest)
            continue
        row = linked.setdefault(
            link.cache_key,
            {
                "profile_hash": digest,
                "cache_key": link.cache_key,
                "kernel_name": launch.name,
                "launches": 0,
                "total_ns": 0,
                "link": set(),
                "detail": link.detail,
            },
        )
        row["launches"] += launch.count
        row["total_ns"] += launch.total_ns
        row["link"].update(link.rules)
        summary.linked_launches += launch.count
        summary.linked_ns += launch.total_ns
        for rule in link.rules:
            summary.by_rule[rule] = summary.by_rule.get(rule, 0) + launch.count
    summary.folders = len(linked)
    rows = [{**row, "link": ", ".join(sorted(row["link"]))} for row in linked.values()]
    return summary, rows, list(missed.values())


def _add_missed(
    missed: dict[tuple[str, str], dict[str, Any]], summary: FileSummary, launch: Launches, link: Link, digest: str
) -> None:
    assert link.reason is not None
    row = missed.setdefault(
        (launch.name, link.reason),
        {
            "profile_hash": digest,
            "kernel_name": launch.name,
            "reason": link.reason,
            "launches": 0,
            "total_ns": 0,
            "detail": None,
        },
    )
    row["launches"] += launch.count
    row["total_ns"] += launch.total_ns
    if link.detail and (row["detail"] is None or link.detail not in row["detail"]):
        row["detail"] = link.detail if row["detail"] is None else f"{row['detail']}; {link.detail}"
    counts = summary.unlinked.setdefault(link.reason, [0, 0])
    counts[0] += launch.count
    counts[1] += launch.total_ns
