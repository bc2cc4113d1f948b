"""Before an ingest stores anything: train the dictionaries the store lacks for the kinds it will store."""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from kdb.ingest.walker import WalkedFile
from kdb.store import dictionaries
from kdb.store.blobs import STREAM_THRESHOLD, BlobStore
from kdb.store.dictionary_index import Dictionary

# Files that are not content: crashed writers' leftovers.
UNTRAINED_KINDS = frozenset({"temporary"})


def train_missing(store: BlobStore, files: list[WalkedFile], workers: int) -> list[Dictionary]:
    """Train and store a dictionary for each kind among FILES that the store has none for (the first
    ingest into a store trains them; later ones reuse them). Returns the dictionaries added."""
    by_kind: dict[str, list[WalkedFile]] = defaultdict(list)
    for f in files:
        if f.kind not in UNTRAINED_KINDS and f.size <= STREAM_THRESHOLD:
            by_kind[f.kind].append(f)
    wanted = {
        kind: group
        for kind, group in sorted(by_kind.items())
        if len(group) >= dictionaries.MIN_FILES and store.dictionaries.for_kind(kind) is None
    }
    if not wanted:
        return []

    def train_kind(kind: str) -> tuple[str, bytes | None]:
        group = sorted(wanted[kind], key=lambda f: f.rel)
        step = max(1, len(group) // dictionaries.SAMPLE_FILES)
        samples: list[bytes] = []
        budget = dictionaries.SAMPLE_BYTES
        for f in group[::step][: dictionaries.SAMPLE_FILES]:
            try:
                with open(f.abspath, "rb") as fh:
                    samples.append(fh.read(min(dictionaries.SAMPLE_PREFIX_BYTES, budget)))
            except OSError:
                continue  # the store phase reports unreadable files
            budget -= len(samples[-1])
            if budget <= 0:
                break
        return kind, dictionaries.train(samples, sum(f.size for f in group))

    # zstd trains without the GIL: one kind per core (each training's memory is bounded by SAMPLE_BYTES)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, 2))) as pool:
        trained = list(pool.map(train_kind, wanted))
    return [store.dictionaries.add(kind, data) for kind, data in trained if data is not None]
