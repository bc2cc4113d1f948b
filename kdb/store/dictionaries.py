"""zstd dictionaries for the blob store, one per file kind (see kdb/store/blobs.py for how they are kept).

Measured on the real caches of the corpus (bench/dict_savings.py; 2-core machine): per-file level 9
without a dictionary stored 1.46 / 4.95 / 11.7 MB of the gfx942 gpt2, gfx942 mlp and H100 mlp caches
whose `tar | zstd -3` archives are 0.65 / 3.30 / 11.0 MB; with a dictionary per kind as trained below,
dictionaries counted, 0.66 / 2.58 / 7.87 MB (kdb ingest --no-sass, session 6).
"""

from __future__ import annotations

import secrets
from typing import Any

import zstandard

from kdb.store.blobs import COMPRESSION_LEVEL

# Training reads at most this many files of a kind (spread over the cache), each cut to this many bytes,
# and at most SAMPLE_BYTES in all: COVER holds ~10 bytes per sample byte (suffix array, d-mer table), and
# 256 whole files a kind made a 10k-kernel ingest's parent ~48 MB larger (max RSS 484 vs 436 MB); the
# prefixes also trained better dictionaries (H100 mlp blobs 8.5 vs 7.9 MB).
SAMPLE_FILES = 256
SAMPLE_PREFIX_BYTES = 32 * 1024
SAMPLE_BYTES = 4 * 1024 * 1024
# Fewer files of a kind than this: too little to learn from, and too little to gain.
MIN_FILES = 16
# About 1% of the kind's bytes, within these bounds: 112 KB (zstd's default) on a large cache, a few KB
# on a small one, where a 112 KB dictionary would cost more than it saves (gfx942 gpt2, whole-file
# samples: 1.10 MB with 112 KB dictionaries against 0.69 MB with ~1% ones).
MIN_DICT_BYTES = 4 * 1024
MAX_DICT_BYTES = 112 * 1024
# COVER with a fixed segment size and d-mer: zstd's default parameter search took 5-20 s a cache for
# under 1% smaller output (H100 mlp: 8.52 MB after 20 s of training, 8.57 MB after 1.6 s).
COVER_K = 1024
COVER_D = 8
# Whether a dictionary pays is estimated on at most this many of its samples (spread over them): compressing all
# of them twice at level 9 took longer than training (0.14 s against 0.11 s for the amdgcn of gfx942 mlp).
CHECK_SAMPLES = 32
# Dictionary ids 0-32767 are reserved by the zstd format; ids are drawn at random below 2**31.
FIRST_PRIVATE_ID = 32768


def dictionary_size(kind_bytes: int) -> int:
    return max(MIN_DICT_BYTES, min(MAX_DICT_BYTES, kind_bytes // 100))


def train(samples: list[bytes], kind_bytes: int) -> bytes | None:
    """A dictionary for files like SAMPLES (KIND_BYTES: the size of every file of the kind to be stored),
    or None when there is too little to learn from or it would not save more than twice its own size."""
    size = dictionary_size(kind_bytes)
    sample_bytes = sum(map(len, samples))
    if len(samples) < MIN_FILES or sample_bytes < 4 * size:
        return None
    try:
        trained = zstandard.train_dictionary(
            size,
            list[Any](samples),  # the stubs ask for a list of buffers
            k=COVER_K,
            d=COVER_D,
            level=COMPRESSION_LEVEL,
            dict_id=FIRST_PRIVATE_ID + secrets.randbelow(2**31 - FIRST_PRIVATE_ID),
        )
    except zstandard.ZstdError:
        return None  # e.g. samples too uniform or too few distinct segments: store without one
    plain = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL)
    with_dict = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, dict_data=trained)
    checked = samples[:: -(-len(samples) // CHECK_SAMPLES)]
    saved = sum(len(plain.compress(s)) - len(with_dict.compress(s)) for s in checked)
    data = trained.as_bytes()
    return data if saved * kind_bytes / sum(map(len, checked)) > 2 * len(data) else None
