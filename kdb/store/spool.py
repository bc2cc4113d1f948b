"""Where kdb's Triton cache manager keeps what it captured, before and after the catalog records it.

The layout belongs to the store (kdb/capture writes it; `kdb gc` and `kdb verify`, kdb/store/maintenance.py,
look after it with the blobs, so the store never imports the capture).

Under the home's `capture/` (a shared home: `STORE/capture/`, so that any node can finish a commit):

    spool/<tag>/<key>/<file>   files Triton put, each written whole (temp file, then rename), not yet recorded
    commit/<tag>/<key>/<file>  the folders one commit is recording (one committer per tag at a time)
    index/<k[:2]>/<key>.json   recorded folders: file name -> blob digest and size, and the folder's digest
    served/<key>.<d[:16]>/<file>
                               a recorded folder's plain files (the spooled files themselves, renamed here by the
                               commit: no new bytes), named by the folder digest its index entry gives: a hit
                               returns these paths (checked against the entry), no blob is decompressed
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
and `kdb verify` pass what they need of the catalog in: kdb/store/spool_upkeep.py). The names it accepts:
kdb/store/spool_names.py; the index entries: kdb/store/spool_index.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kdb.store.lock import is_held, pid_of, remove_unheld, same_file
from kdb.store.spool_index import read_index_entry
from kdb.store.spool_names import GROUP_PREFIX as GROUP_PREFIX
from kdb.store.spool_names import check_name, folder_names, is_whole
from kdb.store.spool_names import check_tag as check_tag
from kdb.store.spool_names import is_kernel_file as is_kernel_file

if TYPE_CHECKING:
    from kdb.store.home import Home


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

    def served_path(self, key: str, folder_digest: str) -> Path:
        return served_folder(self.root, key, folder_digest)

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

    def write_index(self, key: str, folder_digest: str, files: dict[str, tuple[str, int]], stamps: dict) -> None:
        """`stamps`: the served folder's files' (inode, mtime in ns) as it was made (`served_stamps`)."""
        path = self.index_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        temp = self.tmp / f"{os.getpid()}-{uuid.uuid4().hex}.json"
        body = {"folder_digest": folder_digest, "files": {n: [h, s] for n, (h, s) in sorted(files.items())}}
        body["stamps"] = stamps
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
            if same_file(fd, path):
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
            names = folder_names(folder)
            if not names or is_whole(names):
                continue
            held, dead = self._writers(folder.name)
            if held:
                alive.append(folder.name)
            else:
                died[folder.name] = sorted({pid for p in dead if (pid := pid_of(p)) is not None})
        return alive, died

    def _writers(self, key: str) -> tuple[list[Path], list[Path]]:
        """The lock files of `key`'s writers: (held by a live process, left by dead ones)."""
        held: list[Path] = []
        dead: list[Path] = []
        folder = self.writing / key
        for path in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
            (held if is_held(path) else dead).append(path)
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
                count += remove_unheld(path)
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
            if is_whole(folder_names(folder)):
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


CAPTURE_DIR = "capture"


def serve(layout: SpoolLayout, folder: Path, key: str, entry: dict) -> bool:
    """Make `folder` (a recorded folder's spooled files) the served copy of its index entry: renamed into
    served/ (no copy). A served copy already there stays unless it no longer matches the entry (then the new
    one replaces it). False when `folder` was not used (the caller removes it)."""
    target = layout.served_path(key, entry["folder_digest"])
    if served_problem(target, entry) is None:
        return False
    if served_problem(folder, entry) is not None:  # not the recorded bytes (cannot be, but never served)
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    layout.tmp.mkdir(parents=True, exist_ok=True)
    aside = layout.tmp / f"served-{os.getpid()}-{uuid.uuid4().hex}"
    with contextlib.suppress(FileNotFoundError):
        os.replace(target, aside)  # a damaged copy: moved away first (a directory is not replaced by rename)
    try:
        os.replace(folder, target)
    except OSError:  # another commit served the same folder meanwhile
        return False
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return True


def served_folder(root: Path, key: str, folder_digest: str) -> Path:
    return root / "served" / f"{key}.{folder_digest[:16]}"


def served_stamps(folder: Path, names: Iterable[str]) -> dict[str, list[int]]:
    """Each file's [inode, mtime in ns]: what the index entry records of its served folder once it is made (a file
    rewritten or truncated since has another; a file whose stamp matches is not hashed again, see below)."""
    out = {}
    for name in names:
        with contextlib.suppress(OSError):
            st = (folder / name).stat()
            out[name] = [st.st_ino, st.st_mtime_ns]
    return out


def served_problem(folder: Path, entry: dict, *, digests: bool = True) -> str | None:
    """Why the served copy `folder` cannot be served for the index entry `entry`, or None: a file missing, or
    of another size, or not hashing to the entry's blob digest — hashed when `digests`, or when its inode and
    mtime are not those the entry's stamps recorded (changed since the commit made it, or no stamp)."""
    import hashlib

    stamps = entry.get("stamps") or {}
    for name, (digest, size) in entry["files"].items():
        path = os.path.join(folder, name)  # (not pathlib: this runs at a capture's first hit of each cache key)
        try:
            st = os.stat(path)
            if st.st_size != size:
                return f"{folder.name}/{name} is {st.st_size} bytes, not {size}"
            hashed = digests or stamps.get(name) != [st.st_ino, st.st_mtime_ns]
            if hashed and hashlib.sha256(Path(path).read_bytes()).hexdigest() != digest:
                return f"{folder.name}/{name} does not hash to {digest[:12]}…"
        except OSError:
            return f"{folder.name}/{name} is missing"
    return None


def capture_root(home: Home) -> Path:
    return home.root / CAPTURE_DIR  # a shared home's root is its store
