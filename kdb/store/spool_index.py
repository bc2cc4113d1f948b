"""The capture's index (kdb/store/spool.py: index/<k[:2]>/<key>.json): what a recorded folder holds, and whether an
entry can be served."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from kdb.errors import IntegrityError
from kdb.store.folders import folder_digest
from kdb.store.spool_names import NAME_RE


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
