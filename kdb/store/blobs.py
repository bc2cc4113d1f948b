"""Content-addressed blob store: every file once, keyed by the SHA-256 of its raw bytes, zstd-compressed.

Layout: ``objects/ab/cdef…`` (the first two hex digits name a shard directory), as git and DVC do.
256 shards keep each directory near 4,000 entries at a million blobs and 40,000 at ten million,
sizes ext4/xfs index well, while a one-file-per-blob layout keeps writes atomic with a plain rename
and lets ``gc`` delete a blob without rewriting packs.

Rules: hash the raw bytes; write to a temporary name in the same shard, then hard-link to the
final name (a link fails if the name exists, so an intact blob is never overwritten, even by a concurrent
writer); zstd frames carry a content checksum and the content size; reads are capped at the size
recorded in the catalog and re-hashed before any byte is returned. Files are created with mode 0666
less the umask, as Triton creates its cache files (0644 under umask 022): every user of a shared store
reads every blob.

Repair: a put of bytes whose blob is stored already checks the stored file first (the frame check;
`full_check`: decompressed and compared), and replaces a damaged one: kdb/store/repair.py, BlobStore.repair.

Dictionaries: one file compressed alone misses what `tar | zstd` finds between files (every kernel's
JSON, LLIR or asm repeats the same headers and idioms). A zstd dictionary trained per file kind
(kdb/store/dictionaries.py) is itself a blob, compressed without one; the store's index (BlobStore.dictionaries,
kdb/store/dictionary_index.py)
``objects/dictionaries/KIND-ID-SIZE-HASH`` (empty files, created atomically, never changed) maps the
dictionary id each frame header carries to that blob. A blob's digest still names its raw bytes, so
every check re-hashes through the dictionary: a damaged dictionary shows as damaged blobs. Dictionaries
are kept for the life of the store (a few per kind, at most 112 KB each): gc never deletes them.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from kdb.errors import CollectedMeanwhile, IntegrityError
from kdb.store.dictionary_index import DICTIONARY_DIR, DictionaryIndex
from kdb.store.files import CHUNK, create_temp, refresh_mtime
from kdb.store.files import COMPRESSION_LEVEL as COMPRESSION_LEVEL
from kdb.store.files import HASH_HEX_LEN as HASH_HEX_LEN
from kdb.store.files import TEMP_PREFIX as TEMP_PREFIX
from kdb.store.files import create_file as create_file
from kdb.store.files import is_blob_name as is_blob_name
from kdb.store.repair import MISSING, BlobRepair, TempFailedCheck

HASH_NAME = "sha256"
# Files above this are hashed and compressed in streaming passes (kdb/store/files.py: CHUNK) instead of being
# held in memory.
STREAM_THRESHOLD = 64 * 1024 * 1024
# Orphan blobs have no catalog size to cap decompression; none of a Triton cache's files comes close.
ORPHAN_MAX_BYTES = 1 << 30


def _load_syncfs() -> Any:
    """libc's syncfs, or None where there is none."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


_syncfs = _load_syncfs()


def hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class PutResult:
    digest: str
    size: int
    stored_size: int
    new: bool
    repaired: bool = False  # a damaged stored blob was replaced by these bytes


@dataclass(frozen=True)
class BlobCheck:
    digest: str
    problem: str | None  # None when the blob is intact


@dataclass(frozen=True)
class BlobStore:
    """The store under `root`; equal (and hashing equal) to any other BlobStore of the same root. Its parts:
    `dictionaries` (the index and the zstd contexts, kdb/store/dictionary_index.py) and `repair` (the check of a
    blob a put would reuse, and the replacement of a damaged one, kdb/store/repair.py)."""

    root: Path
    dictionaries: DictionaryIndex = field(init=False, repr=False, compare=False)
    repair: BlobRepair = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dictionaries", DictionaryIndex(self))
        object.__setattr__(self, "repair", BlobRepair(self, self.dictionaries))

    def path_for(self, digest: str) -> Path:
        return self.root / digest[:2] / digest[2:]

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def has(self, digest: str) -> bool:
        return self.path_for(digest).exists()

    def stored_size(self, digest: str) -> int:
        return self.path_for(digest).stat().st_size

    # -- writing ---------------------------------------------------------------------------------
    def put_bytes(
        self, data: bytes, digest: str | None = None, kind: str | None = None, *, full_check: bool = False
    ) -> PutResult:
        """Store DATA (compressed with the store's dictionary for KIND when it has one). A stored blob of
        the same digest is kept when it passes the frame check (FULL_CHECK: when it decompresses to DATA),
        else replaced (kdb/store/repair.py)."""
        digest = digest or hash_bytes(data)
        final = self.path_for(digest)
        problem, stored = self.repair.inspect(final, len(data), data if full_check else None, touch=True)
        if problem is None:
            return PutResult(digest, len(data), stored, new=False)
        payload = self.dictionaries.compressor(kind).compress(data)
        write = lambda fh: fh.write(payload)  # noqa: E731
        if problem == MISSING:
            new = self._install(final, write)
            return PutResult(digest, len(data), len(payload) if new else final.stat().st_size, new=new)
        self.repair.replace(final, digest, len(data), write, problem)
        return PutResult(digest, len(data), len(payload), new=False, repaired=True)

    def put_file(self, path: Path, size: int, *, full_check: bool = False) -> PutResult:
        """Store a large file in two streaming passes (hash, then compress) without holding it in memory."""
        digest_obj = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                digest_obj.update(chunk)
        digest = digest_obj.hexdigest()
        final = self.path_for(digest)
        problem, stored = self.repair.inspect(final, size, None)
        if problem is None and full_check:
            problem = self.repair.stream_problem(final, digest, size)
        if problem is None:
            refresh_mtime(final)
            return PutResult(digest, size, stored, new=False)

        def write(out) -> None:
            compressor = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_checksum=True)
            with path.open("rb") as src, compressor.stream_writer(out, size=size, closefd=False) as writer:
                while chunk := src.read(CHUNK):
                    writer.write(chunk)

        # The file may change between the passes: the written blob is checked against its name before it
        # is installed (raising IntegrityError, the file named), never after.
        try:
            if problem == MISSING:
                new = self._install(final, write, check=(digest, size))
            else:
                self.repair.replace(final, digest, size, write, problem)
                new = False
        except TempFailedCheck:
            raise IntegrityError(f"{path.name} changed while it was being stored") from None
        return PutResult(digest, size, final.stat().st_size, new=new, repaired=problem != MISSING)

    def put_compressed(self, digest: str, size: int, payload: bytes) -> bool:
        """Install a blob as another store holds it (zstd frame), after checking that it decompresses to
        `size` bytes hashing to `digest`; never trust the source. False when this store has it already
        (intact by the frame check; a damaged one is replaced). A frame made with a dictionary needs that
        dictionary here first (adopt_dictionaries)."""
        final = self.path_for(digest)
        problem, _ = self.repair.inspect(final, size, None, touch=True)
        if problem is None:
            return False
        data = self.decompress(digest, payload, size)
        if len(data) != size or hash_bytes(data) != digest:
            raise IntegrityError(f"blob {digest} is corrupted (content does not match its hash)")
        write = lambda fh: fh.write(payload)  # noqa: E731
        if problem == MISSING:
            return self._install(final, write)
        self.repair.replace(final, digest, size, write, problem)
        return True

    def read_compressed(self, digest: str) -> bytes:
        """The stored frame of a blob, as it is on disk (checked by the store that receives it)."""
        try:
            return self.path_for(digest).read_bytes()
        except FileNotFoundError:
            raise IntegrityError(f"blob {digest} is missing from the store") from None

    def refresh(self, digests: list[str]) -> None:
        """Touch these blobs, which a commit is about to name for the first time (shared home); raise
        CollectedMeanwhile when one is gone (a concurrent gc deleted it: the ingest is run again)."""
        for digest in digests:
            try:
                os.utime(self.path_for(digest))
            except FileNotFoundError:
                raise CollectedMeanwhile(f"blob {digest} was deleted by a concurrent gc before the commit") from None

    def _install(self, final: Path, write: Callable[[Any], Any], check: tuple[str, int] | None = None) -> bool:
        """Write a new blob at FINAL unless one is there; False when a concurrent writer stored it first.
        CHECK (digest, size): the temporary file is checked against them before it is linked."""
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = create_temp(final.parent)
        try:
            # No fsync per blob (it was 40% of ingest time): the page cache survives a killed process,
            # and the ingest calls durable() once before the catalog commit that first names the blobs.
            with os.fdopen(fd, "wb") as fh:
                write(fh)
            if check is not None:
                self.repair.check_temp(tmp, *check)
            try:
                os.link(tmp, final)
                return True
            except FileExistsError:
                return False  # a concurrent writer stored the same content first
        finally:
            tmp.unlink(missing_ok=True)

    def durable(self) -> None:
        """Flush every written blob to disk; called once before a catalog commit that references them.

        syncfs(2) flushes the store's file system only; sync(2) also waited for every other file system's
        dirty pages (0.34 s of a 3 s first ingest of the gfx942 mlp cache). Where there is no syncfs
        (not Linux), sync."""
        fd = os.open(self.root, os.O_RDONLY)
        try:
            if _syncfs is None or _syncfs(fd) != 0:
                os.sync()
        finally:
            os.close(fd)

    # -- reading ---------------------------------------------------------------------------------
    def get(self, digest: str, size: int) -> bytes:
        """Return the blob's bytes, refusing anything that does not hash to its name."""
        return self._read(digest, size, plain=False)

    def get_plain(self, digest: str, size: int) -> bytes:
        """get() of a blob stored without a dictionary, as dictionaries themselves are."""
        return self._read(digest, size, plain=True)

    def _read(self, digest: str, size: int, *, plain: bool) -> bytes:
        """get(); PLAIN: the frame must be one made without a dictionary, as dictionaries themselves are."""
        path = self.path_for(digest)
        try:
            payload = path.read_bytes()
        except FileNotFoundError:
            raise IntegrityError(f"blob {digest} is missing from the store") from None
        data = self.decompress(digest, payload, size, plain=plain)
        if len(data) != size or hash_bytes(data) != digest:
            raise IntegrityError(f"blob {digest} is corrupted (content does not match its hash)")
        return data

    def decompress(self, digest: str, payload: bytes, size: int, *, plain: bool = False) -> bytes:
        try:
            # A damaged frame header could claim any size; never allocate more than the catalog's
            # record of the file (streams without a recorded size are capped the same way).
            # kdb always records the content size in the frame, so a frame without one is damaged too.
            frame = zstandard.get_frame_parameters(payload)
            if frame.content_size != size:
                raise IntegrityError(
                    f"blob {digest} is corrupted (frame claims {frame.content_size} bytes, catalog says {size})"
                )
            if frame.dict_id and plain:
                raise IntegrityError(
                    f"blob {digest} is corrupted (a dictionary's frame names dictionary {frame.dict_id})"
                )
            try:
                decompressor = self.dictionaries.decompressor(frame.dict_id)
            except IntegrityError as exc:
                raise IntegrityError(f"blob {digest} cannot be read: {exc}") from None
            return decompressor.decompress(payload, max_output_size=size + 1)
        except zstandard.ZstdError as exc:
            raise IntegrityError(f"blob {digest} is corrupted ({exc})") from None

    def check(self, digest: str, size: int) -> BlobCheck:
        try:
            self.get(digest, size)
        except IntegrityError as exc:
            return BlobCheck(digest, str(exc))
        return BlobCheck(digest, None)

    # -- listing and deleting --------------------------------------------------------------------
    def iter_blobs(self) -> Iterator[tuple[str, Path]]:
        """Every file under the store, as (name it claims, path); temporaries included with their own name."""
        if not self.root.exists():
            return
        for shard in sorted(self.root.iterdir()):
            if not shard.is_dir() or shard.name == DICTIONARY_DIR:
                continue
            for entry in sorted(shard.iterdir()):
                yield shard.name + entry.name, entry

    def check_orphan(self, name: str, path: Path) -> str | None:
        """Problem with a store file no catalog row names (None when it holds the content its name says)."""
        payload = path.read_bytes()
        try:
            claimed = zstandard.get_frame_parameters(payload).content_size
        except zstandard.ZstdError as exc:
            return f"blob {name} is corrupted ({exc})"
        if claimed == zstandard.CONTENTSIZE_UNKNOWN or claimed > ORPHAN_MAX_BYTES:
            return f"blob {name} is corrupted (bad frame header)"
        try:  # no catalog size to cap it: the frame's own claim, bounded above
            data = self.decompress(name, payload, claimed)
        except IntegrityError as exc:
            return str(exc)
        actual = hash_bytes(data)
        if actual != name:
            return f"blob {name} holds the content of {actual} (renamed or corrupted)"
        return None

    @staticmethod
    def remove(path: Path) -> int:
        """Delete one store file (a blob or a leftover temporary); return the bytes freed."""
        try:
            size = path.stat().st_size
            path.unlink()
            return size
        except FileNotFoundError:
            return 0
