"""Where kdb's Triton cache manager keeps what it captured, before and after the catalog records it.

The layout belongs to the store (kdb/capture writes it; `kdb gc` and `kdb verify`, kdb/store/maintenance.py,
look after it with the blobs, so the store never imports the capture).

Under the home's `capture/` (a shared home: `STORE/capture/`, so that any node can finish a commit):

    spool/<tag>/<key>/<file>   files Triton put, each written whole (temp file, then rename), not yet recorded
    commit/<tag>/<key>/<file>  the folders one commit is recording (one committer per tag at a time)
    index/<k[:2]>/<key>.json   recorded folders: file name -> blob digest and size, and the folder's digest
    adopt/<tag>.log            folders a process was served from the index: they join its tag's snapshot
    locks/<tag>.lock           the committer's lock (flock)
    owned/<tag>                the tag's snapshot is a capture's, as its last commit found (see SpoolLayout.owned)
    writing/<tag>/<key>/<pid>-<id>.lock
                               a compile in progress: its writer holds a lock (flock) on this file from its first
                               kernel file until its group file is in the spool; the OS releases it when the
                               writer dies, so a spooled folder with no group file and no held lock was left by a
                               writer that died mid-compile (`kdb gc` removes it)
    tmp/                       temporaries of the renames above (same file system)

Nothing here reads the catalog or decompresses a blob: kdb/capture/cache.py does, through kdb.store (`kdb gc`
and `kdb verify` pass what they need of the catalog in).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kdb.errors import IntegrityError, UsageError
from kdb.store.folders import folder_digest
from kdb.store.tags import check_tag as check_any_tag

if TYPE_CHECKING:
    from kdb.store.home import Home

# Triton's folder names: the key's base32 (3.3+), base64 (3.2) or hex (≤3.1) digest; file names: the
# kernel's name with a suffix, `__grp__NAME.json`, `cuda_utils.so`. Nothing with a path separator.
NAME_RE = re.compile(r"^[A-Za-z0-9_+=.-][A-Za-z0-9_+=.-]{0,254}$")
GROUP_PREFIX = "__grp__"
# Files of a compile's group: a folder holding one of these is a kernel folder, recorded once its group is
# written. A folder of only other files (launcher modules `*.so`, `*.autotune.json`) is whole at each put.
KERNEL_SUFFIXES = (".ttir", ".ttgir", ".llir", ".ptx", ".cubin", ".amdgcn", ".hsaco", ".source", ".json")


def check_tag(tag: str) -> str:
    """A capture tag names folders under spool/ and commit/: the one rule set of every tag (kdb/store/tags.py)."""
    return check_any_tag(tag, "KDB_CAPTURE_TAG")


def check_name(name: str, what: str = "file name") -> str:
    if not NAME_RE.match(name) or name in (".", ".."):
        raise UsageError(f"Triton asked for {what} {name!r}: not a cache file name kdb stores")
    return name


def is_kernel_file(name: str) -> bool:
    return not name.endswith(".autotune.json") and name.endswith(KERNEL_SUFFIXES)


class SpoolLayout:
    """The capture folders of one home and one tag."""

    def __init__(self, root: Path, tag: str) -> None:
        self.root = root
        self.tag = check_tag(tag)

    @property
    def spool(self) -> Path:
        return self.root / "spool" / self.tag

    @property
    def commit(self) -> Path:
        return self.root / "commit" / self.tag

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def lock(self) -> Path:
        return self.root / "locks" / f"{self.tag}.lock"

    @property
    def adopt_log(self) -> Path:
        return self.root / "adopt" / f"{self.tag}.log"

    @property
    def writing(self) -> Path:
        return self.root / "writing" / self.tag

    @property
    def owned(self) -> Path:
        """Present once a commit found the tag's snapshot to be a capture's (or made it): a process starting a
        capture of the tag then need not open the catalog to know (every commit checks again)."""
        return self.root / "owned" / self.tag

    def index_path(self, key: str) -> Path:
        return self.root / "index" / key[:2] / f"{key}.json"

    # -- writing -----------------------------------------------------------------------------------
    def install(self, source: Path, key: str, name: str) -> None:
        """Put a finished file into the spool under its final name: linked (or copied, across file systems)
        to a temporary first, then renamed, so that no reader and no commit ever sees part of it. A commit
        may move the folder away meanwhile: then the folder is made again."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        temp = self.tmp / f"{os.getpid()}-{uuid.uuid4().hex}"
        try:
            os.link(source, temp)
        except OSError:
            shutil.copyfile(source, temp)
        try:
            for _ in range(5):
                folder = self.spool / key
                folder.mkdir(parents=True, exist_ok=True)
                try:
                    os.replace(temp, folder / name)
                    return
                except FileNotFoundError:  # the folder was taken by a commit between mkdir and rename
                    continue
            raise OSError(f"spool folder {key} kept disappearing")
        finally:
            temp.unlink(missing_ok=True)

    def write_index(self, key: str, folder_digest: str, files: dict[str, tuple[str, int]]) -> None:
        path = self.index_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        temp = self.tmp / f"{os.getpid()}-{uuid.uuid4().hex}.json"
        body = {"folder_digest": folder_digest, "files": {n: [h, s] for n, (h, s) in sorted(files.items())}}
        temp.write_text(json.dumps(body, sort_keys=True))
        os.replace(temp, path)

    def note_adopted(self, key: str, folder_digest: str) -> None:
        """One line, appended whole (O_APPEND writes this short are not interleaved)."""
        self.adopt_log.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.adopt_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{key} {folder_digest}\n".encode())
        finally:
            os.close(fd)

    # -- a compile in progress -----------------------------------------------------------------------
    def start_writing(self, key: str) -> tuple[int, Path]:
        """Say, before its first file enters the spool, that this process is writing the folder `key`: a lock
        file of its own under writing/<tag>/<key>/, held (flock) until `done_writing`. The OS releases the lock
        when the process dies however it dies (SIGKILL, `os._exit`), which is how `kdb gc` and `kdb capture
        status` tell a folder still being written from one whose writer died mid-compile."""
        folder = self.writing / check_name(key, "cache key")
        for _ in range(5):
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{os.getpid()}-{uuid.uuid4().hex}.lock"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileNotFoundError:  # `kdb gc` removed the empty folder between mkdir and open
                continue
            fcntl.flock(fd, fcntl.LOCK_EX)  # a gc probing it holds it for an instant: wait for that
            if _same_file(fd, path):
                return fd, path
            os.close(fd)  # a gc took the file for a dead writer's between open and flock: take another
        raise OSError(f"cannot mark capture folder {key} as being written under {folder}")

    @staticmethod
    def done_writing(fd: int, path: Path) -> None:
        """The folder's group file is in the spool (or the writer gives up at exit): the lock goes."""
        path.unlink(missing_ok=True)
        os.close(fd)  # releases the lock
        with contextlib.suppress(OSError):  # another writer of the same key, or already gone
            path.parent.rmdir()

    def unfinished(self) -> tuple[list[str], dict[str, list[int]]]:
        """Spooled kernel folders without their group file: (those whose writer is alive, {key: ids of the
        processes that were writing it and died}) — an empty id list when no writer ever said it was writing
        (a folder spooled by a kdb without writer locks)."""
        alive: list[str] = []
        died: dict[str, list[int]] = {}
        if not self.spool.is_dir():
            return alive, died
        for folder in sorted(self.spool.iterdir()):
            names = _names(folder)
            if not names or is_whole(names):
                continue
            held, dead = self._writers(folder.name)
            if held:
                alive.append(folder.name)
            else:
                died[folder.name] = sorted({pid for p in dead if (pid := _pid_of(p)) is not None})
        return alive, died

    def _writers(self, key: str) -> tuple[list[Path], list[Path]]:
        """The lock files of `key`'s writers: (held by a live process, left by dead ones)."""
        held: list[Path] = []
        dead: list[Path] = []
        folder = self.writing / key
        for path in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
            (held if _is_held(path) else dead).append(path)
        return held, dead

    def remove_died(self) -> list[str]:
        """Remove the spooled folders whose writer died mid-compile (and the dead writers' lock files); return
        their keys. A folder is moved aside before it is removed and looked at again: a writer that started on
        the same key meanwhile gets back the files it put there."""
        removed: list[str] = []
        _, died = self.unfinished()
        for key in died:
            aside = self.tmp / f"died-{os.getpid()}-{uuid.uuid4().hex}"
            self.tmp.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(self.spool / key, aside)
            except FileNotFoundError:
                continue
            held, _ = self._writers(key)
            if held:  # a new compile of the same key began between the look and the move: its files go back
                for path in sorted(aside.iterdir()):
                    target = self.spool / key / path.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with contextlib.suppress(FileExistsError):
                        os.link(path, target)
            else:
                removed.append(key)
            shutil.rmtree(aside, ignore_errors=True)
        self.remove_dead_writer_files()
        return removed

    def remove_dead_writer_files(self) -> int:
        """Lock files no live process holds (their writers died, or ended after their folder was whole)."""
        count = 0
        if not self.writing.is_dir():
            return 0
        for folder in sorted(self.writing.iterdir()):
            for path in sorted(folder.glob("*.lock")):
                count += _remove_unheld(path)
            with contextlib.suppress(OSError):  # a writer's folder
                folder.rmdir()
        return count

    # -- reading -----------------------------------------------------------------------------------
    def read_index(self, key: str) -> dict | None:
        """The index entry of a recorded folder; None when there is none. DamagedIndexEntry when the entry cannot
        be what was written: unreadable, or files that do not hash to its folder digest (an entry naming another
        folder's blob would hand Triton another kernel's code object)."""
        return read_index_entry(self.index_path(key), key)

    def whole_folders(self) -> Iterator[Path]:
        """Spooled folders whose compile finished: a kernel folder once its group file is there, any other
        folder (launcher modules, autotune results) at once."""
        if not self.spool.is_dir():
            return
        for folder in sorted(self.spool.iterdir()):
            if is_whole(_names(folder)):
                yield folder

    def waiting(self) -> set[str]:
        """Cache keys whose compile finished and that no commit recorded yet: whole in the spool, or left in the
        commit folder by a commit that could not finish (catalog busy, process killed)."""
        interrupted = {p.name for p in self.commit.iterdir()} if self.commit.is_dir() else set()
        return {p.name for p in self.whole_folders()} | interrupted

    def take_adopted(self) -> list[tuple[str, str]]:
        """The adoption log's entries, moved to a `.taking` file that the commit removes when it succeeded (a
        commit that failed leaves it, and the next one takes it with whatever was logged since)."""
        taken = self.adopt_log.with_suffix(".taking")
        text = taken.read_text() if taken.exists() else ""
        if self.adopt_log.exists():
            fresh = self.adopt_log.with_suffix(f".{os.getpid()}")
            os.replace(self.adopt_log, fresh)  # a line appended meanwhile goes to a new log
            text += fresh.read_text()
            temp = self.adopt_log.with_suffix(f".{os.getpid()}.tmp")
            temp.write_text(text)
            os.replace(temp, taken)
            fresh.unlink()
        pairs: dict[str, str] = {}
        for line in text.splitlines():
            key, _, digest = line.partition(" ")
            if key and digest:
                pairs.setdefault(key, digest)
        return sorted(pairs.items())

    def adopted_done(self) -> None:
        self.adopt_log.with_suffix(".taking").unlink(missing_ok=True)

    def adopted_waiting(self) -> set[str]:
        """Cache keys served from the index and logged to join the tag's snapshot, not recorded yet."""
        keys: set[str] = set()
        for path in (self.adopt_log.with_suffix(".taking"), self.adopt_log):
            try:
                text = path.read_text()
            except FileNotFoundError:
                continue
            keys |= {line.partition(" ")[0] for line in text.splitlines() if " " in line}
        return keys


# -- folders and the locks of their writers ------------------------------------------------------------


def _names(folder: Path) -> list[str]:
    try:
        return [p.name for p in folder.iterdir()]
    except (NotADirectoryError, FileNotFoundError):
        return []


def is_whole(names: Iterable[str]) -> bool:
    """A spooled folder is whole once Triton finished it: a kernel folder when its group file is there, a
    folder of other files (launcher modules, autotune results) at once; an empty one never."""
    names = list(names)
    return bool(names) and (any(n.startswith(GROUP_PREFIX) for n in names) or not any(map(is_kernel_file, names)))


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _is_held(path: Path) -> bool:
    """Whether a live process holds the lock on `path` (the OS drops a dead process's locks)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _remove_unheld(path: Path) -> int:
    """Remove a lock file no process holds, holding its lock meanwhile (a writer that opened it just now sees
    that its path is gone and takes another): 1 when removed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return 0
    try:
        path.unlink(missing_ok=True)
        return 1
    finally:
        os.close(fd)


def _pid_of(path: Path) -> int | None:
    head = path.name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def pid_alive(pid: int) -> bool:
    """Whether a process of this id runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


# -- the index ---------------------------------------------------------------------------------------------


class DamagedIndexEntry(IntegrityError):
    """An index entry that cannot be what a commit wrote: kdb serves none of its files (Triton compiles)."""


def read_index_entry(path: Path, key: str) -> dict | None:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        raise DamagedIndexEntry(f"capture index entry {key} is damaged (not readable JSON)") from None
    problem = index_entry_problem(key, body)
    if problem is not None:
        raise DamagedIndexEntry(f"capture index entry {key} is damaged ({problem})")
    return body


def index_entry_problem(key: str, body: object) -> str | None:
    """Why an index entry cannot be served, or None: its files must hash, with its cache key, to its folder
    digest, which is how the catalog names the folder (kdb/store/folders.py)."""
    if not isinstance(body, dict) or not isinstance(body.get("files"), dict):
        return "no file list"
    digest = body.get("folder_digest")
    files = body["files"]
    if not isinstance(digest, str) or not files:
        return "no folder digest" if not isinstance(digest, str) else "no file"
    for name, value in files.items():
        if not (NAME_RE.match(name) and isinstance(value, list) and len(value) == 2):
            return f"file {name!r} is not a name with a digest and a size"
        if not (isinstance(value[0], str) and isinstance(value[1], int) and value[1] >= 0):
            return f"file {name!r} is not a name with a digest and a size"
    if folder_digest(key, [(name, value[0]) for name, value in files.items()]) != digest:
        return f"its files do not hash to its folder digest {digest[:12]}…: they are another folder's"
    return None


def index_entries(root: Path) -> Iterator[tuple[str, Path]]:
    """(cache key, path) of every index entry."""
    index = root / "index"
    for path in sorted(index.glob("*/*.json")) if index.is_dir() else []:
        yield path.stem, path


# -- the whole capture folder: what `kdb gc`, `kdb verify` and `kdb capture status` ask --------------------


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
    leftovers: int = 0  # dead writers' lock files, dead processes' temporaries and own folders


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
    for key, path in index_entries(root):
        try:
            entry = read_index_entry(path, key)
        except DamagedIndexEntry:
            entry = None
        if entry is not None and all(h in keep for h, _ in entry["files"].values()):
            continue
        try:
            if not local and path.stat().st_mtime > cutoff:
                continue
        except FileNotFoundError:
            continue
        path.unlink(missing_ok=True)
        result.index_entries += 1
    if local:
        for path in sorted((root / "tmp").iterdir()) if (root / "tmp").is_dir() else []:
            pid = _pid_of(Path(path.name.removeprefix("died-")))
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


CAPTURE_DIR = "capture"


def capture_root(home: Home) -> Path:
    return home.root / CAPTURE_DIR  # a shared home's root is its store
