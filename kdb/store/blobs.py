"""Content-addressed blob store: every file once, keyed by the SHA-256 of its raw bytes, zstd-compressed.

Layout: ``objects/ab/cdef…`` (the first two hex digits name a shard directory), as git and DVC do.
256 shards keep each directory near 4,000 entries at a million blobs and 40,000 at ten million,
sizes ext4/xfs index well, while a one-file-per-blob layout keeps writes atomic with a plain rename
and lets ``gc`` delete a blob without rewriting packs.

Rules: hash the raw bytes; write to a temporary name in the same shard, then hard-link to the
final name (a link fails if the name exists, so a blob is never overwritten, even by a concurrent
writer); zstd frames carry a content checksum and the content size; reads are capped at the size
recorded in the catalog and re-hashed before any byte is returned.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import zstandard

from kdb.errors import IntegrityError
from kdb.store.home import CollectedMeanwhile

HASH_NAME = "sha256"
HASH_HEX_LEN = 64
TEMP_PREFIX = ".tmp-"
# Blobs are compressed one by one, without the cross-file context `tar | zstd -3` enjoys. Measured on
# a 300-kernel cache (bench/): level 3 gave 14.3 MB against the archive's 12.5 MB, level 9 12.0 MB for
# 1.2 s of CPU instead of 0.2 s, a few percent of an ingest dominated by parsing.
COMPRESSION_LEVEL = 9
# Files above this are hashed and compressed in streaming passes instead of being held in memory.
STREAM_THRESHOLD = 64 * 1024 * 1024
CHUNK = 1024 * 1024
# Orphan blobs have no catalog size to cap decompression; none of a Triton cache's files comes close.
ORPHAN_MAX_BYTES = 1 << 30


def hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_blob_name(name: str) -> bool:
    return len(name) == HASH_HEX_LEN and all(c in "0123456789abcdef" for c in name)


@dataclass(frozen=True)
class PutResult:
    digest: str
    size: int
    stored_size: int
    new: bool


@dataclass(frozen=True)
class BlobCheck:
    digest: str
    problem: str | None  # None when the blob is intact


@dataclass(frozen=True)
class BlobStore:
    """The store under `root`; equal (and hashing equal) to any other BlobStore of the same root."""

    root: Path

    def path_for(self, digest: str) -> Path:
        return self.root / digest[:2] / digest[2:]

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def has(self, digest: str) -> bool:
        return self.path_for(digest).exists()

    def stored_size(self, digest: str) -> int:
        return self.path_for(digest).stat().st_size

    # -- writing ---------------------------------------------------------------------------------
    def put_bytes(self, data: bytes, digest: str | None = None) -> PutResult:
        digest = digest or hash_bytes(data)
        final = self.path_for(digest)
        if self._reuse(final):
            return PutResult(digest, len(data), final.stat().st_size, new=False)
        compressor = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_checksum=True, write_content_size=True)
        payload = compressor.compress(data)
        new = self._install(final, lambda fh: fh.write(payload))
        return PutResult(digest, len(data), len(payload) if new else final.stat().st_size, new=new)

    def put_file(self, path: Path, size: int) -> PutResult:
        """Store a large file in two streaming passes (hash, then compress) without holding it in memory."""
        digest_obj = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                digest_obj.update(chunk)
        digest = digest_obj.hexdigest()
        final = self.path_for(digest)
        if self._reuse(final):
            return PutResult(digest, size, final.stat().st_size, new=False)

        def write(out) -> None:
            compressor = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_checksum=True)
            with path.open("rb") as src, compressor.stream_writer(out, size=size, closefd=False) as writer:
                while chunk := src.read(CHUNK):
                    writer.write(chunk)

        new = self._install(final, write)
        # The file may have changed between the passes; the stored blob must still match its name.
        check = self.check(digest, size)
        if check.problem:
            self.path_for(digest).unlink(missing_ok=True)
            raise IntegrityError(f"{path.name} changed while it was being stored")
        return PutResult(digest, size, final.stat().st_size, new=new)

    def put_compressed(self, digest: str, size: int, payload: bytes) -> bool:
        """Install a blob as another store holds it (zstd frame), after checking that it decompresses to
        `size` bytes hashing to `digest`; never trust the source. False when this store has it already."""
        final = self.path_for(digest)
        if self._reuse(final):
            return False
        data = self._decompress(digest, payload, size)
        if len(data) != size or hash_bytes(data) != digest:
            raise IntegrityError(f"blob {digest} is corrupted (content does not match its hash)")
        return self._install(final, lambda fh: fh.write(payload))

    def read_compressed(self, digest: str) -> bytes:
        """The stored frame of a blob, as it is on disk (checked by the store that receives it)."""
        try:
            return self.path_for(digest).read_bytes()
        except FileNotFoundError:
            raise IntegrityError(f"blob {digest} is missing from the store") from None

    @staticmethod
    def _reuse(final: Path) -> bool:
        """True when the blob is stored already; its mtime is refreshed, which keeps a shared home's gc
        (kdb/store/maintenance.py: grace period) from deleting it before the ingest that reuses it commits."""
        try:
            os.utime(final)
            return True
        except FileNotFoundError:
            return False
        except OSError:
            return final.exists()  # a store this process may not write to: reuse without touching

    def refresh(self, digests: list[str]) -> None:
        """Touch these blobs, which a commit is about to name for the first time (shared home); raise
        CollectedMeanwhile when one is gone (a concurrent gc deleted it: the ingest is run again)."""
        for digest in digests:
            try:
                os.utime(self.path_for(digest))
            except FileNotFoundError:
                raise CollectedMeanwhile(f"blob {digest} was deleted by a concurrent gc before the commit") from None

    def _install(self, final: Path, write) -> bool:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=final.parent)
        try:
            # No fsync per blob (it was 40% of ingest time): the page cache survives a killed process,
            # and the ingest calls durable() once before the catalog commit that first names the blobs.
            with os.fdopen(fd, "wb") as fh:
                write(fh)
            try:
                os.link(tmp_name, final)
                return True
            except FileExistsError:
                return False  # a concurrent writer stored the same content first
        finally:
            os.unlink(tmp_name)

    def durable(self) -> None:
        """Flush every written blob to disk; called once before a catalog commit that references them."""
        os.sync()

    # -- reading ---------------------------------------------------------------------------------
    def get(self, digest: str, size: int) -> bytes:
        """Return the blob's bytes, refusing anything that does not hash to its name."""
        path = self.path_for(digest)
        try:
            payload = path.read_bytes()
        except FileNotFoundError:
            raise IntegrityError(f"blob {digest} is missing from the store") from None
        data = self._decompress(digest, payload, size)
        if len(data) != size or hash_bytes(data) != digest:
            raise IntegrityError(f"blob {digest} is corrupted (content does not match its hash)")
        return data

    def _decompress(self, digest: str, payload: bytes, size: int) -> bytes:
        try:
            # A damaged frame header could claim any size; never allocate more than the catalog's
            # record of the file (streams without a recorded size are capped the same way).
            # kdb always records the content size in the frame, so a frame without one is damaged too.
            claimed = zstandard.get_frame_parameters(payload).content_size
            if claimed != size:
                raise IntegrityError(f"blob {digest} is corrupted (frame claims {claimed} bytes, catalog says {size})")
            return zstandard.ZstdDecompressor().decompress(payload, max_output_size=size + 1)
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
            if not shard.is_dir():
                continue
            for entry in sorted(shard.iterdir()):
                yield shard.name + entry.name, entry

    @staticmethod
    def remove(path: Path) -> int:
        """Delete one store file (a blob or a leftover temporary); return the bytes freed."""
        try:
            size = path.stat().st_size
            path.unlink()
            return size
        except FileNotFoundError:
            return 0


def check_orphan(name: str, path: Path) -> str | None:
    """Problem with a store file no catalog row names (None when it holds the content its name says)."""
    payload = path.read_bytes()
    try:
        claimed = zstandard.get_frame_parameters(payload).content_size
        if claimed == zstandard.CONTENTSIZE_UNKNOWN or claimed > ORPHAN_MAX_BYTES:
            return f"blob {name} is corrupted (bad frame header)"
        data = zstandard.ZstdDecompressor().decompress(payload, max_output_size=claimed + 1)
    except zstandard.ZstdError as exc:
        return f"blob {name} is corrupted ({exc})"
    actual = hash_bytes(data)
    if actual != name:
        return f"blob {name} holds the content of {actual} (renamed or corrupted)"
    return None
