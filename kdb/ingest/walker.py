"""Walk a Triton cache directory: every regular file, its kind, and the kernel folders.

The directory may also be a TorchInductor cache, or any directory holding Triton caches at any depth
(Inductor nests its own under `triton/<device>/`): a kernel folder is any directory holding `NAME.json`
beside IR of NAME, and its path relative to the root is its `cache_key` (`HASH` for a plain cache,
`triton/0/HASH` inside an Inductor cache). Every other file is grouped under its first path component.

Symlinks are never followed (a link may point outside the cache, or loop); they are reported.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kdb.errors import InputError

# How deep a real cache ever nests is 2 (folder/file); anything far deeper is reported, not walked.
MAX_DEPTH = 32

# Name suffix -> kind; first match wins, so the longer suffixes come first.
KIND_BY_SUFFIX: tuple[tuple[str, str], ...] = (
    (".autotune.json", "autotune"),
    (".hsaco", "hsaco"),
    (".cubin", "cubin"),
    (".amdgcn", "amdgcn"),
    (".ptx", "ptx"),
    (".llir", "llir"),
    (".ttir", "ttir"),
    (".ttgir", "ttgir"),
    (".source", "source"),
    (".json", "json"),
    (".so", "module"),
    # TorchInductor: generated Python modules, autotune winners and benchmark timings
    (".best_config", "best_config"),
    (".kernel_perf", "kernel_perf"),
    (".py", "python"),
)
# crashed writers' temporaries: `add_kernel.json.tmp.pid_1234_5678` (≤3.1), folder `tmp.pid_1234_…` (3.2+)
TEMP_FILE_RE = re.compile(r"\.tmp\.pid_\d+")
TEMP_DIR_RE = re.compile(r"^tmp\.pid_")
IR_KINDS = frozenset({"ttir", "ttgir", "llir", "amdgcn", "ptx", "hsaco", "cubin", "source"})


def classify(name: str) -> str:
    if TEMP_FILE_RE.search(name):
        return "temporary"
    if name.startswith("__grp__") and name.endswith(".json"):
        return "group"
    for suffix, kind in KIND_BY_SUFFIX:
        if name.endswith(suffix):
            return kind
    return "other"


# Slotted, with one shared string for the cache root and one per folder: a 10k-kernel cache walks to
# 76,598 of these, held for the whole ingest (52 MB as plain dataclasses with a pathlib.Path each, 24 MB so).
@dataclass(slots=True)
class WalkedFile:
    rel: str  # POSIX path relative to the cache root
    root: str  # the cache root as given (the same string for every file of a walk)
    size: int
    kind: str
    folder: str | None  # the kernel folder holding the file, else its first path component (None at the top)
    mtime_ns: int = 0  # with size and inode: how the next ingest of the directory tells the file is unchanged
    ino: int = 0

    @property
    def abspath(self) -> str:
        return os.path.join(self.root, self.rel)


@dataclass
class WalkProblem:
    rel: str
    reason: str


@dataclass
class Walk:
    files: list[WalkedFile] = field(default_factory=list)
    problems: list[WalkProblem] = field(default_factory=list)

    def kernel_folders(self) -> dict[str, list[WalkedFile]]:
        """Folders holding one compiled kernel: a metadata JSON `NAME.json` beside some IR of NAME."""
        by_folder: dict[str, list[WalkedFile]] = {}
        for f in self.files:
            if f.folder is not None:
                by_folder.setdefault(f.folder, []).append(f)
        return {k: v for k, v in by_folder.items() if kernel_json(v) is not None}


def kernel_json(files: list[WalkedFile]) -> WalkedFile | None:
    """The metadata JSON `NAME.json` directly in the files' folder, beside IR of NAME; None if there is none."""
    stems = {f.rel.rsplit("/", 1)[-1].rsplit(".", 1)[0] for f in files if f.kind in IR_KINDS}
    for f in files:
        if f.kind == "json" and f.folder is not None and f.rel.rsplit("/", 1)[0] == f.folder:
            stem = f.rel.rsplit("/", 1)[-1][: -len(".json")]
            if stem in stems:
                return f
    return None


def walk_cache(root: Path) -> Walk:
    if not root.exists():
        raise InputError(f"{root}: no such directory")
    if not root.is_dir():
        raise InputError(f"{root}: not a directory")
    walk = Walk()
    try:
        _walk(root, os.fspath(root), "", 0, walk)
    except PermissionError:
        raise InputError(f"{root}: permission denied") from None
    _assign_folders(walk)
    _mark_partial_and_temporary(walk)
    walk.files.sort(key=lambda f: f.rel)
    walk.problems.sort(key=lambda p: p.rel)
    return walk


def _walk(directory: Path, root: str, prefix: str, depth: int, walk: Walk) -> None:
    with os.scandir(directory) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        try:
            name = entry.name
            name.encode("utf-8")
        except UnicodeEncodeError:
            walk.problems.append(
                WalkProblem(
                    prefix + os.fsencode(entry.name).decode("utf-8", "replace"), "file name is not valid UTF-8; skipped"
                )
            )
            continue
        rel = prefix + name
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError as exc:
            walk.problems.append(WalkProblem(rel, f"cannot stat: {exc.strerror}"))
            continue
        if stat.S_ISLNK(st.st_mode):
            walk.problems.append(WalkProblem(rel, "symbolic link not followed"))
        elif stat.S_ISDIR(st.st_mode):
            if depth + 1 >= MAX_DEPTH:
                walk.problems.append(WalkProblem(rel, f"nested deeper than {MAX_DEPTH} levels; skipped"))
                continue
            try:
                _walk(Path(entry.path), root, rel + "/", depth + 1, walk)
            except OSError as exc:
                walk.problems.append(WalkProblem(rel, f"cannot read directory: {exc.strerror}"))
        elif stat.S_ISREG(st.st_mode):
            folder = rel.split("/", 1)[0] if "/" in rel else None
            walk.files.append(WalkedFile(rel, root, st.st_size, classify(name), folder, st.st_mtime_ns, st.st_ino))
        else:
            walk.problems.append(WalkProblem(rel, "not a regular file; skipped"))


def _parent(rel: str) -> str | None:
    return rel.rsplit("/", 1)[0] if "/" in rel else None


def _assign_folders(walk: Walk) -> None:
    """Each file's folder: the nearest enclosing kernel folder (at any depth), else its first component."""
    by_dir: dict[str, list[WalkedFile]] = {}
    for f in walk.files:
        parent = _parent(f.rel)
        if parent is not None:
            by_dir.setdefault(parent, []).append(f)
    kernel_dirs = set()
    for directory, files in by_dir.items():
        for f in files:
            f.folder = directory  # as kernel_json reads it, for this check only
        if kernel_json(files) is not None and not TEMP_DIR_RE.match(directory.rsplit("/", 1)[-1]):
            kernel_dirs.add(directory)
    shared: dict[str, str] = {}  # one string per folder, not one per file (76,598 files: 8 MB at 10k kernels)
    for f in walk.files:
        folder = f.rel.split("/", 1)[0] if "/" in f.rel else None
        parent = _parent(f.rel)
        while parent is not None:
            if parent in kernel_dirs:
                folder = parent
                break
            parent = _parent(parent)
        f.folder = None if folder is None else shared.setdefault(folder, folder)


def _mark_partial_and_temporary(walk: Walk) -> None:
    by_folder: dict[str, list[WalkedFile]] = {}
    for f in walk.files:
        if f.folder is not None:
            by_folder.setdefault(f.folder, []).append(f)
    for f in walk.files:  # a crashed writer's folder nested in an Inductor cache (`triton/0/tmp.pid_…/`)
        if any(TEMP_DIR_RE.match(part) for part in f.rel.split("/")[1:-1]):
            f.kind = "temporary"
    for folder, files in by_folder.items():
        if TEMP_DIR_RE.match(folder):
            for f in files:
                f.kind = "temporary"
        elif kernel_json(files) is None and any(f.kind in IR_KINDS for f in files):
            # a compile that died after writing some IR but before its metadata JSON
            for f in files:
                if f.kind in IR_KINDS:
                    f.kind = "partial"
