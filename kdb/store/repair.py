"""Checking a stored blob before it is reused, and replacing a damaged one (BlobStore.repair, kdb/store/blobs.py).

Repair: a put of bytes whose blob is stored already checks the stored file first, and replaces a
damaged one (temporary file, checked against the digest, renamed over it). The check on every put is
the frame check (frame_problem): the file must be one whole zstd frame of the put's size with its
checksum, made with a dictionary the store holds, ending where its last block ends. It reads a few
header bytes per 128 KB block, not the blob, and finds what a disk or a user does to a file (truncated,
emptied, extended, replaced by another file, a damaged header), not a byte flipped inside a block
(kdb/store/frames.py). `full_check` (`kdb ingest --rehash`) decompresses the stored blob and compares it
with the put's bytes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import zstandard

from kdb.errors import IntegrityError
from kdb.store import frames
from kdb.store.dictionary_index import DictionaryIndex, dict_id_of
from kdb.store.files import CHUNK, create_temp, refresh_mtime

# What frame_problem and the full check say of a blob that is not there.
MISSING = "missing"


class TempFailedCheck(IntegrityError):
    """A blob just written does not hold the content of its name (its source changed while it was read)."""


class BlobFrames(Protocol):
    """What the repair needs of the store it is part of (kdb/store/blobs.py: BlobStore): where a blob lives, and a
    stored frame decompressed and checked."""

    def path_for(self, digest: str) -> Path: ...
    def decompress(self, digest: str, payload: bytes, size: int, *, plain: bool = False) -> bytes: ...


class BlobRepair:
    """The checks a put makes of the blob it would reuse, and the replacement of a damaged one (module
    docstring): a part of STORE, whose paths and reading it uses, and of its DICTIONARIES."""

    def __init__(self, store: BlobFrames, dictionaries: DictionaryIndex) -> None:
        self.store = store
        self.dictionaries = dictionaries

    def frame_problem(self, digest: str, size: int) -> str | None:
        """Why the stored blob cannot be a frame of SIZE bytes (MISSING when absent), None when it can:
        the check every put makes of a blob it would reuse (module docstring: Repair)."""
        return self.inspect(self.store.path_for(digest), size, None)[0]

    def holds(self, digest: str, size: int) -> bool:
        """True when the store holds blob DIGEST of SIZE bytes, intact by the frame check (its mtime then
        refreshed, see kdb/store/files.py: refresh_mtime); False when it is missing or damaged: a copy of good bytes replaces it."""
        return self.inspect(self.store.path_for(digest), size, None, touch=True)[0] is None

    def inspect(self, final: Path, size: int, content: bytes | None, *, touch: bool = False) -> tuple[str | None, int]:
        """(problem or None, stored bytes) of the file at FINAL as the blob of SIZE bytes: the frame check,
        then, given CONTENT (the bytes the caller holds, which hash to the blob's name), a full one:
        decompressed (zstd checks its checksum) and compared with CONTENT. TOUCH: an intact blob's mtime
        is refreshed (refresh_mtime)."""
        try:
            fd = os.open(final, os.O_RDONLY)
        except FileNotFoundError:
            return MISSING, 0
        try:
            length = os.fstat(fd).st_size
            problem = frames.frame_problem(
                lambda offset, count: os.pread(fd, count, offset), length, size, self.dictionaries.holds_id
            )
            if problem is None and content is not None:
                payload = os.pread(fd, length, 0)
                try:
                    stored = self.store.decompress(final.parent.name + final.name, payload, size)
                except IntegrityError as exc:
                    return str(exc), length
                if stored != content:
                    problem = "its content is not the content its name says"
            if problem is None and touch:
                refresh_mtime(fd)
            return problem, length
        finally:
            os.close(fd)

    def stream_problem(self, final: Path, digest: str, size: int) -> str | None:
        """The full check of a large blob (put_file): decompressed in a stream and re-hashed."""
        try:
            with final.open("rb") as fh:
                dict_id = dict_id_of(fh.read(frames.FRAME_HEADER_MAX))
                fh.seek(0)
                hasher, count = hashlib.sha256(), 0
                with self.dictionaries.decompressor(dict_id).stream_reader(fh, read_across_frames=False) as reader:
                    while chunk := reader.read(CHUNK):
                        hasher.update(chunk)
                        count += len(chunk)
                        if count > size:
                            break
        except (zstandard.ZstdError, IntegrityError) as exc:
            return str(exc)
        if count != size or hasher.hexdigest() != digest:
            return "its content is not the content its name says"
        return None

    def replace(self, final: Path, digest: str, size: int, write: Callable[[Any], Any], problem: str) -> None:
        """Replace the damaged blob at FINAL: the new bytes go to a temporary file, which must decompress to
        SIZE bytes hashing to DIGEST, then are renamed over it (readers see the old file or the new one)."""
        fd, tmp = create_temp(final.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                write(fh)
            self.check_temp(tmp, digest, size)
            try:
                os.replace(tmp, final)
            except OSError as exc:
                raise IntegrityError(
                    f"blob {digest} is damaged ({problem}) and cannot be replaced: {exc.strerror or exc}"
                ) from None
        finally:
            tmp.unlink(missing_ok=True)

    def check_temp(self, tmp: Path, digest: str, size: int) -> None:
        """Raise TempFailedCheck unless the temporary file TMP decompresses to SIZE bytes hashing to DIGEST."""
        problem = self.stream_problem(tmp, digest, size)
        if problem is not None:
            raise TempFailedCheck(f"blob {digest}: the bytes written do not hold its content ({problem})")
