"""One side of a diff: a snapshot's kernel rows, read through a catalog connection the caller opened
and holds for the whole diff (so every lazy read sees the same catalog state), plus its blob store."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kdb.diff.groups import problem_constants
from kdb.errors import ParseError, UntrustedComparison
from kdb.store.blobs import BlobStore
from kdb.store.catalog import DiffQueries
from kdb.triton.identity import IDENTITY_VERSION, kernel_identity
from kdb.triton.kernel_json import parse_kernel_json
from kdb.triton.normalize import STAGE_KINDS, normalise_stage

Row = dict[str, Any]


@dataclass
class Side:
    label: str
    store: BlobStore
    tag: str
    catalog: DiffQueries
    kernels: list[Row]  # with instr_mix_digest and instr_groups: enough for an unchanged mix
    mnemonics: dict[str, dict[str, int]] = field(default_factory=dict)  # filled by load_mnemonics
    files: dict[str, list[Row]] | None = None  # filled on first use
    winners: list[Row] = field(default_factory=list)  # autotune winners (Inductor caches), with their folders
    mix_rows: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)  # filled by load_mix
    # (loop depth, mnemonic, group, count) per kernel, filled by load_mix (kernels whose loop nest is known)
    loop_rows: dict[str, list[tuple[int, str, str, int]]] = field(default_factory=dict)
    # (source, cache_key) -> (mnemonic, group, count) rows of that source's mix, filled by load_source_mix
    source_mix: dict[tuple[str, str], list[tuple[str, str, int]]] = field(default_factory=dict)
    ttir_blobs: dict[str, tuple[str, int]] | None = None  # cache_key -> (hash, size) of its TTIR, on first use

    def load_mnemonics(self, cache_keys: Iterable[str]) -> None:
        """Fetch, in one query, the mnemonic counts of the kernels whose mix digests differ."""
        missing = [k for k in cache_keys if k not in self.mnemonics]
        if missing:
            got = self.catalog.diff_mnemonic_counts(self.tag, missing)
            for key in missing:
                self.mnemonics[key] = got.get(key, {})

    def mnemonics_of(self, cache_key: str) -> dict[str, int]:
        self.load_mnemonics([cache_key])
        return self.mnemonics[cache_key]

    def load_mix(self, cache_keys: Iterable[str]) -> None:
        """Fetch, in one query, the (mnemonic, group, count) rows of some kernels (deep views)."""
        missing = [k for k in cache_keys if k not in self.mix_rows]
        if missing:
            got = self.catalog.diff_instr_mix(self.tag, missing)
            by_loop = self.catalog.diff_instr_mix_by_loop(self.tag, missing)
            for key in missing:
                self.mix_rows[key] = got.get(key, [])
                self.loop_rows[key] = by_loop.get(key, [])

    def load_source_mix(self, source: str, cache_keys: Iterable[str]) -> None:
        """Fetch, in one query, the mix one source gave of some kernels (whichever source their analysis chose):
        empty for a kernel without that source."""
        missing = [k for k in cache_keys if (source, k) not in self.source_mix]
        if missing:
            got = self.catalog.diff_instr_mix_of_source(self.tag, missing, source)
            for key in missing:
                self.source_mix[source, key] = got.get(key, [])

    def source_mix_of(self, source: str, cache_key: str) -> list[tuple[str, str, int]]:
        """(mnemonic, group, count) rows of the mix `source` gave of one kernel; empty when it has none."""
        self.load_source_mix(source, [cache_key])
        return self.source_mix[source, cache_key]

    def mix_of(self, cache_key: str) -> list[tuple[str, str, int]]:
        """(mnemonic, group, count) rows of one kernel (the deep view)."""
        self.load_mix([cache_key])
        return self.mix_rows[cache_key]

    def loop_mix_of(self, cache_key: str) -> list[tuple[int, str, str, int]]:
        """(loop depth, mnemonic, group, count) rows of one kernel; empty when its loop nest is unknown."""
        self.load_mix([cache_key])
        return self.loop_rows[cache_key]

    def load_documents(self, rows: Iterable[Row]) -> None:
        """Add the JSON documents diff_kernels leaves out to some kernel rows (deep views)."""
        rows = [k for k in rows if "co_metadata" not in k]
        if not rows:
            return
        docs = self.catalog.kernel_documents([k["folder_digest"] for k in rows])
        for k in rows:
            for col, value in docs.get(k["folder_digest"], {}).items():
                if k.get(col) is None:
                    k[col] = value

    def _folder_files(self, cache_key: str) -> list[Row]:
        if self.files is None:
            self.files = {}
            for row in self.catalog.diff_kernel_files(self.tag):
                self.files.setdefault(row["cache_key"], []).append(row)
        return self.files.get(cache_key, [])

    def stage_file(self, cache_key: str, stage: str) -> Row | None:
        for kind in STAGE_KINDS[stage]:
            for f in self._folder_files(cache_key):
                if f["kind"] == kind:
                    return f
        return None

    def stage_text(self, cache_key: str, stage: str) -> tuple[str | None, str | None]:
        """(normalised text, file kind) of one stage of one kernel, None when the folder has no such file."""
        f = self.stage_file(cache_key, stage)
        if f is None:
            return None, None
        return normalised_blob(self.store, f["hash"], f["size"], f["kind"]), f["kind"]

    def ttir_constants(self, row: Mapping[str, Any]) -> frozenset[str] | None:
        """The problem constants of a kernel's TTIR (kdb/diff/groups.py), None without one: as the ingest recorded
        them (identity_parts), else (catalogs written before) read from the stored text as it is (the splat
        constants are the same before and after normalising: on all 2,053 TTIR files of the corpus), once per
        blob for both sides of a diff (unchanged kernels share theirs)."""
        recorded = row.get("identity_problem_constants")
        if recorded is not None:
            return frozenset(recorded)
        if self.ttir_blobs is None:
            self.ttir_blobs = self.catalog.diff_stage_blobs(self.tag, "ttir")
        blob = self.ttir_blobs.get(row["cache_key"])
        return None if blob is None else blob_constants(self.store, *blob)

    def raw_text(self, cache_key: str, kind: str) -> str | None:
        for f in self._folder_files(cache_key):
            if f["kind"] == kind:
                return self.store.get(f["hash"], f["size"]).decode("utf-8", "replace")
        return None


def load_side(catalog: DiffQueries, store: BlobStore, tag: str, label: str) -> Side:
    """Read a snapshot's kernel rows (TagError when the catalog has no such tag)."""
    with without_cycle_collector():
        kernels = catalog.diff_kernels(tag)
        kernels.sort(key=lambda k: (k["name"], k["cache_key"]))  # in Python: cheaper than ORDER BY here
        side = Side(label, store, tag, catalog, kernels, winners=catalog.diff_winners(tag))
        for k in side.kernels:
            if k.get("identity") is None:
                _fill_identity(side, k)
        stale = sum(
            1 for k in side.kernels if k.get("identity") is not None and _identity_version(k) != IDENTITY_VERSION
        )
        if stale:
            # Identities of another version never match: pairing would silently find nothing.
            raise UntrustedComparison(
                f"{stale} kernels of {label} carry a kernel identity from an older kdb; run `kdb reindex {tag}` first"
            )
    return side


_VERSION_MARK = f'"identity_version": {IDENTITY_VERSION}'


def _identity_version(k: Row) -> int | None:
    raw = k.get("identity_options")
    if isinstance(raw, str) and _VERSION_MARK in raw:
        return IDENTITY_VERSION
    doc = (
        row_document(k, "identity_options")
        if raw is not None
        else (row_document(k, "identity_parts") or {}).get("options")
    )
    return doc.get("identity_version") if isinstance(doc, dict) else None


def row_document(k: Row, col: str) -> Any:
    """A JSON column of a kernel row, decoded on first use (most pairs never need their documents). The options
    document is decoded once per distinct text and shared (read, never changed): an op's configs, and a kernel
    unchanged between the two sides, carry the same one."""
    value = k.get(col)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            k[col] = value = _shared_document(value) if col == "identity_options" else json.loads(value)
    return value


@functools.lru_cache(maxsize=1 << 16)
def _shared_document(text: str) -> Any:
    return json.loads(text)


def _fill_identity(side: Side, k: Row) -> None:
    """Catalogs ingested before identities were recorded: rebuild the identity from the stored TTIR."""
    ttir = side.raw_text(k["cache_key"], "ttir")
    meta_doc = row_document(k, "triton_metadata")
    if ttir is None or not isinstance(meta_doc, dict):
        return
    try:
        ident = kernel_identity(ttir, parse_kernel_json(json.dumps(meta_doc).encode()))
    except ParseError:
        return
    if ident:
        k["identity"] = ident["identity"]
        k["identity_any_target"] = ident["identity_any_target"]
        k["identity_parts"] = ident["parts"]


@functools.lru_cache(maxsize=4096)
def normalised_blob(store: BlobStore, digest: str, size: int, kind: str) -> str:
    """Normalising is the expensive part of a diff; a blob shared by many kernels is normalised once."""
    return normalise_stage(store.get(digest, size).decode("utf-8", "replace"), kind)


@functools.lru_cache(maxsize=1 << 16)
def blob_constants(store: BlobStore, digest: str, size: int) -> frozenset[str] | None:
    """problem_constants of a stored TTIR (a few splat constants: cheap to keep for a whole diff)."""
    return problem_constants(store.get(digest, size).decode("utf-8", "replace"))


@contextlib.contextmanager
def without_cycle_collector() -> Iterator[None]:
    """Loading and comparing two snapshots allocates millions of small objects (rows, metric tables)
    and frees almost none until the diff ends, so Python's cycle collector rescans them over and over
    for nothing: ~0.25 s of a ~1.1 s comparison of two 10k-kernel snapshots. Nothing there builds
    reference cycles worth collecting early. (Not around the ingest of a directory argument: that
    runs as long as its cache is large.)"""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
