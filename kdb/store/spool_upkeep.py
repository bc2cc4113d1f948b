"""What `kdb gc`, `kdb verify` and `kdb capture status` ask of the whole capture folder (kdb/store/spool.py)."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from kdb.errors import UsageError
from kdb.store.lock import pid_alive, pid_of
from kdb.store.spool import SpoolLayout, served_folder, served_problem
from kdb.store.spool_index import DamagedIndexEntry, index_entries, read_index_entry
from kdb.store.spool_names import check_tag


def capture_tags(root: Path) -> list[str]:
    """Tags with anything spooled, being recorded, being written or adopted under `root`."""
    tags: set[str] = set()
    for part in ("spool", "commit", "writing"):
        folder = root / part
        tags |= {p.name for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()
    adopt = root / "adopt"
    for path in adopt.iterdir() if adopt.is_dir() else []:
        if path.suffix in (".log", ".taking"):
            tags.add(path.stem)
    out = []
    for tag in sorted(tags):
        try:
            out.append(check_tag(tag))
        except UsageError:  # not a folder kdb made
            continue
    return out


@dataclass
class SpoolGc:
    died_folders: list[str] = field(default_factory=list)  # "tag/key": left by writers that died mid-compile
    index_entries: int = 0  # damaged, or naming blobs no snapshot references any more
    # dead writers' lock files, dead processes' temporaries and own folders, served folders no kept index entry
    # names (its entry removed, or replaced by a later commit) or whose files changed since they were recorded
    leftovers: int = 0


def collect_spool(root: Path, keep: set[str], *, local: bool, grace_s: float) -> SpoolGc:
    """`kdb gc`'s part under capture/: folders whose writer died mid-compile, index entries that are damaged
    or name a blob gc deletes (on a shared home only those untouched for `grace_s`: another host may be writing
    one whose blobs its commit just stored), the lock files of dead writers and, on a local home, what dead
    processes of this host left in tmp/ and proc/."""
    result = SpoolGc()
    if not root.is_dir():
        return result
    for tag in capture_tags(root):
        layout = SpoolLayout(root, tag)
        result.died_folders += [f"{tag}/{key}" for key in layout.remove_died()]
    cutoff = time.time() - grace_s
    named: set[str] = set()  # the served folders the kept index entries name
    for key, path in index_entries(root):
        try:
            entry = read_index_entry(path, key)
        except DamagedIndexEntry:
            entry = None
        if entry is not None and all(h in keep for h, _ in entry["files"].values()):
            served = served_folder(root, key, entry["folder_digest"])
            if served.is_dir() and served_problem(served, entry) is not None:
                shutil.rmtree(served, ignore_errors=True)  # changed since it was recorded: served from blobs
                result.leftovers += 1
            named.add(served.name)
            continue
        try:
            if not local and path.stat().st_mtime > cutoff:
                continue
        except FileNotFoundError:
            continue
        path.unlink(missing_ok=True)
        result.index_entries += 1
    for folder in sorted((root / "served").iterdir()) if (root / "served").is_dir() else []:
        try:
            if folder.name in named or (not local and folder.stat().st_mtime > cutoff):
                continue
        except FileNotFoundError:
            continue
        shutil.rmtree(folder, ignore_errors=True)  # its entry removed above, or replaced by a later commit
        result.leftovers += 1
    if local:
        for path in sorted((root / "tmp").iterdir()) if (root / "tmp").is_dir() else []:
            pid = pid_of(Path(path.name.removeprefix("died-")))
            if pid is not None and not pid_alive(pid):
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
                result.leftovers += 1
        result.leftovers += remove_dead_process_folders(root / "proc")
    return result


def remove_dead_process_folders(proc: Path) -> int:
    """Own folders of processes that ended without their exit hooks (killed, or compile workers ended by their
    pool): `kdb-capture-<pid>-…`, removed once no process of that id runs on this host."""
    count = 0
    for folder in sorted(proc.glob("kdb-capture-*-*")) if proc.is_dir() else []:
        head = folder.name.split("-")[2]
        if head.isdigit() and not pid_alive(int(head)):
            shutil.rmtree(folder, ignore_errors=True)
            count += 1
    return count


# (cache key, folder digest) -> (tags of the snapshots holding that folder, {file name: (blob digest, size)})
Recorded = dict[tuple[str, str], tuple[set[str], dict[str, tuple[str, int]]]]


@dataclass
class SpoolCheck:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_spool(root: Path, recorded: Recorded) -> SpoolCheck:
    """`kdb verify`'s part under capture/. Problems: index entries that are damaged or disagree with the folder
    the catalog recorded (each named with the snapshots holding that cache key). Notes: what waits to be
    recorded, folders whose writer died mid-compile, entries of folders no snapshot holds any more."""
    check = SpoolCheck()
    if not root.is_dir():
        return check
    tags_of_key: dict[str, set[str]] = {}
    for (key, _), (tags, _) in recorded.items():
        tags_of_key.setdefault(key, set()).update(tags)

    def holders(key: str) -> str:
        tags = sorted(tags_of_key.get(key, ()))
        return f"cache key {key} of snapshots {', '.join(tags)}" if tags else f"no snapshot holds cache key {key}"

    stale = 0
    for key, path in index_entries(root):
        try:
            entry = read_index_entry(path, key)
        except DamagedIndexEntry as exc:
            check.problems.append(f"{exc} ({holders(key)}; kdb serves none of its files, `kdb gc` removes it)")
            continue
        if entry is None:
            continue
        found = recorded.get((key, entry["folder_digest"]))
        if found is None:
            stale += 1
            continue
        files = {name: (h, s) for name, (h, s) in entry["files"].items()}
        if files != found[1]:
            check.problems.append(
                f"capture index entry {key} is damaged (its files differ from the recorded folder "
                f"{entry['folder_digest'][:12]}…) ({holders(key)}; `kdb gc` removes it)"
            )
            continue
        served = served_folder(root, key, entry["folder_digest"])
        problem = served_problem(served, entry) if served.is_dir() else None
        if problem is not None:
            check.problems.append(
                f"capture served file {problem} ({holders(key)}; kdb serves it from the blob store, "
                "`kdb gc` removes the served folder)"
            )
    if stale:
        check.notes.append(
            f"{stale} capture index entries name folders no snapshot holds any more (`kdb gc` removes them)"
        )
    for tag in capture_tags(root):
        layout = SpoolLayout(root, tag)
        waiting = layout.waiting() | layout.adopted_waiting()
        if waiting:
            check.notes.append(
                f"capture {tag}: {len(waiting)} folders wait to be recorded (`kdb capture commit --tag {tag}`, or any "
                "command that reads the tag, records them)"
            )
        for key, pids in layout.unfinished()[1].items():
            check.notes.append(f"capture {tag}: folder {key} {died_phrase(pids)}; `kdb gc` removes it")
    return check


def died_phrase(pids: list[int]) -> str:
    who = f"process {', '.join(map(str, pids))}" if pids else "a process"
    return f"was left unfinished: its writer ({who}) died mid-compile"
