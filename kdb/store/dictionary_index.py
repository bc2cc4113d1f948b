"""The blob store's dictionaries: its index, and the zstd contexts built on them (a part of BlobStore,
kdb/store/blobs.py: module docstring, Dictionaries; training them: kdb/store/dictionaries.py).

Index: ``objects/dictionaries/KIND-ID-SIZE-HASH`` (empty files, created atomically, never changed) maps the
dictionary id each frame header carries to the blob holding that dictionary. Dictionaries are kept for the
life of the store: gc never deletes them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import zstandard

from kdb.errors import IntegrityError
from kdb.store.files import COMPRESSION_LEVEL, is_blob_name

# Inside the store root but never a shard (shards are named by two hex digits).
DICTIONARY_DIR = "dictionaries"

# The zstd contexts built on dictionaries, per store root and dictionary hash ("" for none): a worker
# builds a BlobStore per folder, and preparing a 112 KB dictionary costs more than compressing a small
# file. The index is cached per root with its directory's inode and mtime, so a store removed and made
# again at the same path (tests, benchmarks) never sees the old one's dictionaries.
_COMPRESSORS: dict[tuple[Path, str], zstandard.ZstdCompressor] = {}
_DECOMPRESSORS: dict[tuple[Path, str], zstandard.ZstdDecompressor] = {}
_INDEX: dict[Path, tuple[tuple[int, int] | None, list[Dictionary]]] = {}


@dataclass(frozen=True)
class Dictionary:
    """One entry of the store's dictionary index: the files of KIND compressed with dictionary DICT_ID,
    whose bytes are the blob DIGEST of SIZE bytes."""

    kind: str
    dict_id: int
    size: int
    digest: str

    @property
    def entry_name(self) -> str:
        return f"{self.kind}-{self.dict_id:08x}-{self.size}-{self.digest}"

    @classmethod
    def parse(cls, name: str) -> Dictionary | None:
        parts = name.rsplit("-", 3)
        if len(parts) != 4 or not is_blob_name(parts[3]) or not parts[0]:
            return None
        try:
            return cls(parts[0], int(parts[1], 16), int(parts[2]), parts[3])
        except ValueError:
            return None


def dict_id_of(payload: bytes) -> int:
    """The dictionary a stored frame needs (0: none), from its header."""
    try:
        return zstandard.get_frame_parameters(payload).dict_id
    except zstandard.ZstdError:
        return 0


class StoredBlob(Protocol):
    @property
    def digest(self) -> str: ...
    @property
    def size(self) -> int: ...


class DictionaryBlobs(Protocol):
    """What the dictionaries need of the store that holds them (kdb/store/blobs.py: BlobStore): their blobs
    written, copied from another store, and read back."""

    @property
    def root(self) -> Path: ...
    def put_bytes(self, data: bytes) -> StoredBlob: ...
    def put_compressed(self, digest: str, size: int, payload: bytes) -> bool: ...
    def read_compressed(self, digest: str) -> bytes: ...
    def get_plain(self, digest: str, size: int) -> bytes: ...


class DictionaryIndex:
    """The dictionaries of STORE, whose blobs hold them (module docstring)."""

    def __init__(self, store: DictionaryBlobs) -> None:
        self.store = store
        self.root = store.root

    @property
    def directory(self) -> Path:
        return self.root / DICTIONARY_DIR

    def entries(self, *, reload: bool = False) -> list[Dictionary]:
        """The index, sorted by kind and id (cached per process while its directory is unchanged)."""
        try:
            st = os.stat(self.directory)
            signature: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            signature = None
        cached = _INDEX.get(self.root)
        if reload or cached is None or cached[0] != signature:
            names = os.listdir(self.directory) if signature is not None else []
            entries = sorted(
                (d for d in map(Dictionary.parse, names) if d is not None), key=lambda d: (d.kind, d.dict_id)
            )
            cached = _INDEX[self.root] = (signature, entries)
        return cached[1]

    def hashes(self) -> set[str]:
        """The blobs that hold dictionaries: kept by gc although no catalog row names them."""
        return {d.digest for d in self.entries(reload=True)}

    def for_kind(self, kind: str) -> Dictionary | None:
        """The dictionary new blobs of KIND are compressed with: the lowest id of that kind (two writers
        that trained one each at once both stay valid; later writers all pick the same one)."""
        return next((d for d in self.entries() if d.kind == kind), None)

    def add(self, kind: str, data: bytes) -> Dictionary:
        """Store a trained dictionary (a plain blob) and then its index entry, so an entry always names a
        stored dictionary; a kill between the two leaves only an unreferenced blob for gc."""
        dict_id = zstandard.ZstdCompressionDict(data).dict_id()
        put = self.store.put_bytes(data)
        entry = Dictionary(kind, dict_id, put.size, put.digest)
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.directory / entry.entry_name, "x"):
                pass
        except FileExistsError:
            pass
        self.entries(reload=True)
        return entry

    def read(self, entry: Dictionary) -> bytes:
        """The dictionary's bytes, checked against its hash and against the id its entry claims."""
        data = self.store.get_plain(entry.digest, entry.size)
        actual = zstandard.ZstdCompressionDict(data).dict_id()
        if actual != entry.dict_id:
            raise IntegrityError(f"dictionary {entry.entry_name} holds dictionary id {actual}, not {entry.dict_id}")
        return data

    def holds_id(self, dict_id: int) -> bool:
        """Whether the store's index names dictionary DICT_ID (the index this process read first: the
        frame check runs on every put, and dictionaries are never removed)."""
        cached = _INDEX.get(self.root)
        if cached is not None and any(d.dict_id == dict_id for d in cached[1]):
            return True
        return any(d.dict_id == dict_id for d in self.entries(reload=True))

    def _entry(self, dict_id: int) -> Dictionary:
        for reload in (False, True):  # another process may have added it since the index was read
            entry = next((d for d in self.entries(reload=reload) if d.dict_id == dict_id), None)
            if entry is not None:
                return entry
        raise IntegrityError(f"dictionary {dict_id} is missing from the store")

    def compressor(self, kind: str | None) -> zstandard.ZstdCompressor:
        entry = self.for_kind(kind) if kind else None
        key = (self.root, entry.digest if entry else "")
        if key not in _COMPRESSORS:
            zdict = None
            if entry is not None:
                zdict = zstandard.ZstdCompressionDict(self.read(entry))
                zdict.precompute_compress(level=COMPRESSION_LEVEL)
            _COMPRESSORS[key] = zstandard.ZstdCompressor(
                level=COMPRESSION_LEVEL, dict_data=zdict, write_checksum=True, write_content_size=True
            )
        return _COMPRESSORS[key]

    def decompressor(self, dict_id: int) -> zstandard.ZstdDecompressor:
        entry = self._entry(dict_id) if dict_id else None
        key = (self.root, entry.digest if entry else "")
        if key not in _DECOMPRESSORS:
            if entry is None:
                _DECOMPRESSORS[key] = zstandard.ZstdDecompressor()
            else:
                zdict = zstandard.ZstdCompressionDict(self.read(entry))
                _DECOMPRESSORS[key] = zstandard.ZstdDecompressor(dict_data=zdict)
        return _DECOMPRESSORS[key]

    def adopt(self, source: DictionaryIndex) -> set[int]:
        """Copy the dictionaries of SOURCE this store lacks (as blobs, checked, then their entries);
        return the ids this store uses for another dictionary (frames of SOURCE made with those must be
        recompressed, not copied)."""
        mine = {d.dict_id: d.digest for d in self.entries(reload=True)}
        clashing = set()
        for entry in source.entries(reload=True):
            if entry.dict_id in mine:
                if mine[entry.dict_id] != entry.digest:
                    clashing.add(entry.dict_id)
                continue
            self.store.put_compressed(entry.digest, entry.size, source.store.read_compressed(entry.digest))
            self.read(entry)  # the id it claims is the id it has
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.directory / entry.entry_name, "a"):
                pass
            mine[entry.dict_id] = entry.digest
        self.entries(reload=True)
        return clashing
