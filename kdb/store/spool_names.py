"""The names under a capture's spool (kdb/store/spool.py): which tags, cache keys and file names kdb accepts from
Triton, and when a spooled folder is whole."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from kdb.errors import UsageError
from kdb.store.tags import check_tag as check_any_tag

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


def folder_names(folder: Path) -> list[str]:
    try:
        return [p.name for p in folder.iterdir()]
    except (NotADirectoryError, FileNotFoundError):
        return []


def is_whole(names: Iterable[str]) -> bool:
    """A spooled folder is whole once Triton finished it: a kernel folder when its group file is there, a
    folder of other files (launcher modules, autotune results) at once; an empty one never."""
    names = list(names)
    return bool(names) and (any(n.startswith(GROUP_PREFIX) for n in names) or not any(map(is_kernel_file, names)))
