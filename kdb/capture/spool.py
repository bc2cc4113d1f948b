"""Where kdb's Triton cache manager keeps what it captured, before and after the catalog records it.

Under the home's `capture/` (a shared home: `STORE/capture/`, so that any node can finish a commit):

    spool/<tag>/<key>/<file>   files Triton put, each written whole (temp file, then rename), not yet recorded
    commit/<tag>/<key>/<file>  the folders one commit is recording (one committer per tag at a time)
    index/<k[:2]>/<key>.json   recorded folders: file name -> blob digest and size, and the folder's digest
    adopt/<tag>.log            folders a process was served from the index: they join its tag's snapshot
    locks/<tag>.lock           the committer's lock (flock)
    tmp/                       temporaries of the renames above (same file system)

Nothing here reads the catalog or decompresses a blob: kdb/capture/cache.py does, through kdb.store.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from kdb.errors import UsageError

# A capture tag names folders: kept to a portable file name (dates, releases, job names).
TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
# Triton's folder names: the key's base32 (3.3+), base64 (3.2) or hex (≤3.1) digest; file names: the
# kernel's name with a suffix, `__grp__NAME.json`, `cuda_utils.so`. Nothing with a path separator.
NAME_RE = re.compile(r"^[A-Za-z0-9_+=.-][A-Za-z0-9_+=.-]{0,254}$")
GROUP_PREFIX = "__grp__"
# Files of a compile's group: a folder holding one of these is a kernel folder, recorded once its group is
# written. A folder of only other files (launcher modules `*.so`, `*.autotune.json`) is whole at each put.
KERNEL_SUFFIXES = (".ttir", ".ttgir", ".llir", ".ptx", ".cubin", ".amdgcn", ".hsaco", ".source", ".json")


def check_tag(tag: str) -> str:
    if not TAG_RE.match(tag):
        raise UsageError(f"KDB_CAPTURE_TAG={tag!r}: use letters, digits and . _ + - (it names folders)")
    return tag


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

    # -- reading -----------------------------------------------------------------------------------
    def read_index(self, key: str) -> dict | None:
        try:
            body = json.loads(self.index_path(key).read_text())
        except FileNotFoundError:
            return None
        if not isinstance(body, dict) or not isinstance(body.get("files"), dict):
            return None
        return body

    def whole_folders(self) -> Iterator[Path]:
        """Spooled folders whose compile finished: a kernel folder once its group file is there, any other
        folder (launcher modules, autotune results) at once."""
        if not self.spool.is_dir():
            return
        for folder in sorted(self.spool.iterdir()):
            names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
            if not names:
                continue
            if any(n.startswith(GROUP_PREFIX) for n in names) or not any(is_kernel_file(n) for n in names):
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
