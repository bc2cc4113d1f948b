"""The shape of a stored zstd frame, checked from its headers alone (RFC 8878, 3.1.1).

A frame is a header of at most 18 bytes, then blocks each behind a 3-byte header (bit 0: last block; bits 1-2:
raw, RLE, compressed, reserved; bits 3-23: size), then the 4-byte content checksum kdb always writes. A block
holds at most 128 KB.
"""

from __future__ import annotations

from collections.abc import Callable

import zstandard

FRAME_HEADER_MAX = 18
BLOCK_HEADER = 3
CHECKSUM_BYTES = 4
MAX_BLOCK = 128 * 1024
RLE_BLOCK, COMPRESSED_BLOCK, RESERVED_BLOCK = 1, 2, 3


def frame_problem(
    read_at: Callable[[int, int], bytes], length: int, size: int, holds_dictionary: Callable[[int], bool]
) -> str | None:
    """Why a file of LENGTH bytes, read through READ_AT(offset, count), cannot be one whole zstd frame of SIZE
    bytes as kdb writes it; None when it can. HOLDS_DICTIONARY(id) says whether the store holds a dictionary.

    Detects what a disk or a user does to a file: no frame header (an emptied file, another file in its place);
    a header claiming another content size, without a checksum, or naming a dictionary the store lacks; a
    reserved block kind or a block over 128 KB (a damaged block header); a block running past the end of the
    file (truncated); raw and RLE blocks decoding to more than SIZE; a file not ending where the checksum after
    the last block ends (truncated inside it, or extended). It reads the frame header and each block's header,
    never a block: a byte changed inside a block or in the checksum, or another whole frame of SIZE bytes in the
    file's place, is not seen (decompressing and re-hashing finds those)."""
    head = read_at(0, FRAME_HEADER_MAX + BLOCK_HEADER)
    try:
        frame = zstandard.get_frame_parameters(head)
        offset = zstandard.frame_header_size(head)
    except zstandard.ZstdError:
        return f"{length} bytes without a zstd frame header"
    if frame.content_size != size:
        return f"its frame claims {frame.content_size} bytes, not {size}"
    if not frame.has_checksum:
        return "its frame has no checksum (kdb writes one into every frame)"
    if frame.dict_id and not holds_dictionary(frame.dict_id):
        return f"its frame names dictionary {frame.dict_id}, which the store does not hold"
    plain = 0  # the bytes raw and RLE blocks decode to (a compressed block does not say)
    while True:
        in_head = offset + BLOCK_HEADER <= len(head)
        block = head[offset : offset + BLOCK_HEADER] if in_head else read_at(offset, BLOCK_HEADER)
        if len(block) < BLOCK_HEADER:
            return f"truncated: {length} bytes, a block header expected at byte {offset}"
        value = int.from_bytes(block, "little")
        last, kind, block_size = value & 1, (value >> 1) & 3, value >> 3
        if kind == RESERVED_BLOCK or block_size > MAX_BLOCK:
            return f"a damaged block header at byte {offset}"
        plain += block_size if kind != COMPRESSED_BLOCK else 0
        offset += BLOCK_HEADER + (1 if kind == RLE_BLOCK else block_size)
        if offset > length:
            return f"truncated: {length} bytes, a block ends at byte {offset}"
        if last:
            break
    if plain > size:
        return f"its blocks hold more than the {size} bytes its frame claims"
    if offset + CHECKSUM_BYTES != length:
        return f"{length} bytes where its frame ends at byte {offset + CHECKSUM_BYTES}"
    return None
