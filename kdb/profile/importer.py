"""`kdb profile import FILE… --tag T`: read profile files, link their launches to the snapshot's kernel folders,
store the files' bytes and record everything in one catalog transaction. Also what else touches a snapshot's
profiles: `kdb profile rm`, `kdb cat TAG NAME|SHA256`, and `kdb ingest --replace`, which relinks them.

Every file is read and parsed, checked against the snapshot's targets and linked before anything is written: a
file kdb cannot read, one recorded on a GPU that runs none of the snapshot's kernels, or one most of whose Triton
launches find no kernel of the snapshot (a run of another cache) stops the import with one line naming it, and the
store and catalog stay as they were. Blobs are written first, the catalog last (as an ingest).

A profile is identified by its JSON (the file decompressed): importing a run's trace plain and then gzipped replaces
the first import's rows instead of counting the run twice.

The snapshot's stored profiles (`kdb profile rm`, `kdb cat`): kdb/profile/stored.py; their relinking by `kdb ingest
--replace`: kdb/profile/relink.py."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kdb.errors import InputError, KdbError, ParseError, TagError
from kdb.profile.formats import MAX_PROFILE_BYTES, Device, Launches, Profile, parse_profile
from kdb.profile.link import NO_FIT, NO_KERNEL, NOT_TRITON, Folder, Link, inductor_grid, link_launches

# where `kdb profile rm` and `kdb cat` have always found them
from kdb.profile.stored import remove_profile as remove_profile
from kdb.profile.stored import stored_profile as stored_profile
from kdb.store.blobs import hash_bytes
from kdb.store.catalog import Catalog, ProfileRows
from kdb.store.home import Home

# A profile most of whose Triton launches find no kernel folder of the snapshot (no kernel of that name, or none
# that fits the launch record) is of a run that used another cache: its time would dilute every share. Refused
# when more than this share of its Triton launches find none, unless --allow-unlinked. (Launches that find several
# folders, `ambiguous`, did find kernels: a Proton profile of a plain autotuned kernel is mostly that.)
MAX_NO_KERNEL_SHARE = 0.5
NO_KERNEL_REASONS = (NO_KERNEL, NO_FIT)
HASH_HEX_LEN = 64


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
    replaced: bool = False  # the same profile (same JSON) was imported under the tag before: its rows were replaced
    profile_hash: str = ""  # sha256 of the file as given (its blob)
    content_hash: str = ""  # sha256 of its JSON: the profile's identity
    replaced_name: str | None = None  # the file name that import had
    device: str | None = None  # the GPU(s) the file says ran its launches; None: it names none
    unnamed_launches: int = 0  # launches on a device the file does not name
    targets: list[str] = field(default_factory=list)  # the snapshot's targets the device was checked against
    no_kernel_launches: int = 0  # Triton launches that found no kernel folder (no kernel of that name, none fits)
    mostly_unlinked: bool = False  # more than MAX_NO_KERNEL_SHARE of them: imported only with --allow-unlinked
    same_as: list[str] = field(default_factory=list)  # other files of the command holding the same JSON (read once)

    @property
    def linked_share(self) -> float | None:
        """Linked Triton kernel time over all Triton kernel time (None without Triton launches)."""
        return self.linked_ns / self.triton_ns if self.triton_ns else None


@dataclass(frozen=True)
class ImportSummary:
    tag: str
    files: list[FileSummary]


@dataclass(frozen=True)
class _Read:
    path: Path
    data: bytes
    profile: Profile
    same_as: list[str] = field(default_factory=list)  # later files of the command with the same JSON


def import_profiles(
    home: Home, tag: str, paths: list[Path], lock_wait_s: float, *, allow_unlinked: bool = False
) -> ImportSummary:
    parsed = _read_all(paths)
    if not home.has_catalog():
        raise TagError(f"no snapshot tagged {tag!r}: the home {home.describe()} has no snapshot yet")
    with home.writer(lock_wait_s):
        with Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
            catalog.require_snapshot(tag)
            targets = catalog.profiles.snapshot_targets(tag)
            for read in parsed:
                foreign = foreign_device(read.profile, targets)
                if foreign is not None:
                    raise InputError(
                        f"{read.path}: recorded on {foreign.describe()}, but snapshot {tag!r} holds kernels for "
                        f"{describe_targets(targets)} only: its launches would link to them by coincidence"
                    )
            names = sorted({launch.name for read in parsed for launch in read.profile.launches})
            rows = catalog.profiles.profile_folders(tag, names)
            before = catalog.profiles.profile_files_of(tag)
        legacy = _legacy_content_hashes(home, before)
        by_content: dict[str, list[dict[str, Any]]] = {}
        for row in before:
            by_content.setdefault(row["content_hash"] or legacy.get(row["profile_hash"], ""), []).append(row)
        folders = folders_by_kernel(home, rows)
        now = datetime.now(UTC).replace(tzinfo=None)
        files, times, unlinked, summaries, replaced = [], [], [], [], []
        for read in parsed:
            digest = hash_bytes(read.data)
            summary, linked, missed = link_file(read.profile, folders, digest)
            earlier = by_content.get(read.profile.content_hash, [])
            summary.name, summary.replaced, summary.profile_hash = read.path.name, bool(earlier), digest
            summary.same_as = read.same_as
            summary.replaced_name = earlier[0]["name"] if earlier else None
            summary.targets = targets
            _check_linked(read.path, tag, summary, allow_unlinked)
            summaries.append(summary)
            times += linked
            unlinked += missed
            replaced += [row["profile_hash"] for row in earlier]
            files.append(
                _file_row(read, digest, earlier[0]["imported_at"] if earlier else now)  # a re-import keeps the time
            )
        home.store.ensure()
        blobs = []
        for read in parsed:
            put = home.store.put_bytes(read.data)
            blobs.append({"hash": put.digest, "size": put.size, "stored_size": put.stored_size})
        home.store.durable()
        with Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
            catalog.profiles.record_profiles(
                ProfileRows(tag, blobs, files, times, unlinked, replaced=replaced),
                ensure_blobs=home.store.refresh if home.is_shared else None,
            )
            catalog.profiles.set_content_hashes(tag, {h: c for h, c in legacy.items() if h not in replaced})
    return ImportSummary(tag, summaries)


def foreign_device(profile: Profile, targets: list[str]) -> Device | None:
    """A device the profile says ran its launches that runs none of a snapshot's targets (so the profile cannot be
    of a run of its kernels), or None. A file naming no device, or a snapshot naming no target (Triton 2.3's JSON
    names none), cannot be checked: the import's summary says so."""
    if not targets:
        return None
    return next((device for device in profile.devices if not any(device.runs(t) for t in targets)), None)


def describe_targets(targets: list[str]) -> str:
    words = []
    for target in targets:
        backend, _, rest = target.partition(":")
        arch, _, warp = rest.partition(":")
        words.append(f"{backend} {arch}" + (f" (warp size {warp})" if warp else ""))
    return ", ".join(words)


def describe_devices(devices: tuple[Device, ...]) -> str | None:
    return "; ".join(device.describe() for device in devices) or None


def _check_linked(path: Path, tag: str, summary: FileSummary, allow_unlinked: bool) -> None:
    if not summary.triton_launches or summary.no_kernel_launches <= MAX_NO_KERNEL_SHARE * summary.triton_launches:
        return
    summary.mostly_unlinked = True
    if allow_unlinked:
        return
    share = summary.no_kernel_launches / summary.triton_launches
    raise InputError(
        f"{path}: {summary.no_kernel_launches} of its {summary.triton_launches} Triton kernel launches "
        f"({100 * share:.0f}%) find no kernel folder of snapshot {tag!r} (no kernel of that name, or none that fits "
        f"the launch), more than the {100 * MAX_NO_KERNEL_SHARE:.0f}% kdb accepts: a run of another cache? "
        "(--allow-unlinked imports it anyway)"
    )


def _file_row(read: _Read, digest: str, imported_at: datetime) -> dict[str, Any]:
    profile = read.profile
    return {
        "profile_hash": digest,
        "name": read.path.name,
        "format": profile.format,
        "gzipped": profile.gzipped,
        "size": len(read.data),
        "launches": profile.launch_count,
        "total_ns": profile.total_ns,
        "imported_at": imported_at,
        "content_hash": profile.content_hash,
        "device": describe_devices(profile.devices),
    }


def _read_all(paths: list[Path]) -> list[_Read]:
    """Every file read and parsed (the same profile given twice, plain or gzipped, is read once)."""
    out: dict[str, _Read] = {}
    for path in paths:
        data = read_regular_file(path)
        try:
            profile = parse_profile(data)
        except ParseError as exc:
            raise InputError(f"{path}: {exc}") from None
        if profile.content_hash in out:
            out[profile.content_hash].same_as.append(path.name)
            continue
        out[profile.content_hash] = _Read(path, data, profile)
    return list(out.values())


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_regular_file(path: Path, limit: int = MAX_PROFILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. Opened without blocking (a FIFO's open would wait for
    a writer) and checked on the open descriptor: a FIFO, a device (/dev/zero never ends) or a directory is
    refused before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot open: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = next((name for test, name in _FILE_KINDS if test(mode)), "not a file")
        raise InputError(f"{path}: {what}, not a regular file: kdb reads profiles from regular files only")
    with open(fd, "rb", buffering=0, closefd=True) as fh:
        chunks, size = [], 0
        try:
            while size <= limit:
                chunk = fh.read(min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if size > limit:
        raise InputError(f"{path}: more than {limit >> 20} MiB, larger than any profile kdb reads")
    return b"".join(chunks)


def _legacy_content_hashes(home: Home, rows: list[dict[str, Any]]) -> dict[str, str]:
    """profile_hash -> content hash of files imported gzipped before migration 013 (their JSON's hash was not
    kept), read back from the store; a file that cannot be read back keeps none (kdb verify names its blob)."""
    out = {}
    for row in rows:
        if row["content_hash"] is None:
            try:
                out[row["profile_hash"]] = parse_profile(home.store.get(row["profile_hash"], row["size"])).content_hash
            except KdbError:
                continue
    return out


def folders_by_kernel(home: Home, rows: list[dict[str, Any]]) -> dict[str, list[Folder]]:
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
                    r["backend"],
                )
            )
        out[name] = folders
    return out


def link_file(
    profile: Profile, folders: dict[str, list[Folder]], digest: str
) -> tuple[FileSummary, list[dict[str, Any]], list[dict[str, Any]]]:
    summary = FileSummary("", profile.format, profile.launch_count, profile.total_ns)
    summary.content_hash = profile.content_hash
    summary.device = describe_devices(profile.devices)
    summary.unnamed_launches = profile.unnamed_launches
    linked: dict[str, dict[str, Any]] = {}
    missed: dict[tuple[str, str], dict[str, Any]] = {}
    for launch in profile.launches:
        link = link_launches(launch, folders.get(launch.name, []))
        if link.reason != NOT_TRITON:
            summary.triton_launches += launch.count
            summary.triton_ns += launch.total_ns
        if link.reason in NO_KERNEL_REASONS:
            summary.no_kernel_launches += launch.count
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
