"""Hostile input to the AMD parsers: truncations, byte flips and random bytes seeded from real corpus files.
Only kdb.errors.ParseError may escape."""

from __future__ import annotations

import contextlib
import functools

import pytest
from conftest import CORPUS, load_manifest
from corpus_cache import unpacked
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdb.analysis.amd.amdgcn import parse_amdgcn
from kdb.analysis.amd.hsaco import parse_hsaco
from kdb.errors import ParseError
from kdb.triton.ttgir import parse_ttgir


def _hip_archives() -> list[str]:
    if not (CORPUS / "manifest.json").exists():
        return []
    return [e["archive"] for _, e in sorted(load_manifest()["snapshots"].items()) if e.get("backend") == "hip"]


@functools.cache
def seeds() -> dict[str, list[bytes]]:
    """The smallest .hsaco/.amdgcn/.ttgir of each AMD snapshot (v4 and v5 code objects, both IR prefixes),
    read when the first test runs (not at collection) from the shared unpacked corpus."""
    found: dict[str, list[bytes]] = {"hsaco": [], "amdgcn": [], "ttgir": []}
    for archive in _hip_archives():
        root = unpacked(CORPUS / archive)
        for suffix, kept in found.items():
            files = sorted(root.rglob(f"*.{suffix}"), key=lambda p: (p.stat().st_size, str(p)))
            if files:
                kept.append(files[0].read_bytes())
    return found


needs_seeds = pytest.mark.skipif(not _hip_archives(), reason="corpus/manifest.json with AMD snapshots not built")
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def mutated(draw: st.DrawFn, kind: str) -> bytes:
    seed = draw(st.sampled_from(seeds()[kind]))
    how = draw(st.sampled_from(["truncate", "flip", "splice", "random"]))
    if how == "random":
        return draw(st.binary(max_size=4096))
    if how == "truncate":
        return seed[: draw(st.integers(0, len(seed)))]
    data = bytearray(seed)
    if how == "flip":
        for _ in range(draw(st.integers(1, 8))):
            position = draw(st.integers(0, len(data) - 1))
            data[position] = draw(st.integers(0, 255))
        return bytes(data)
    # splice: overwrite a window with random bytes (hits length fields and counts together)
    start = draw(st.integers(0, len(data) - 1))
    patch = draw(st.binary(min_size=1, max_size=64))
    data[start : start + len(patch)] = patch
    return bytes(data[: len(seed)])


def _only_parse_error(call, *args) -> None:
    with contextlib.suppress(ParseError):
        call(*args)


@needs_seeds
@FUZZ
@given(data=mutated("hsaco"))
def test_parse_hsaco_fuzz(data: bytes) -> None:
    _only_parse_error(parse_hsaco, data)


@needs_seeds
@FUZZ
@given(data=mutated("amdgcn"))
def test_parse_amdgcn_fuzz(data: bytes) -> None:
    _only_parse_error(parse_amdgcn, data.decode("utf-8", errors="replace"))


@needs_seeds
@FUZZ
@given(data=mutated("ttgir"))
def test_parse_ttgir_fuzz(data: bytes) -> None:
    _only_parse_error(parse_ttgir, data.decode("utf-8", errors="replace"))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(text=st.text(max_size=2000))
def test_text_parsers_on_arbitrary_text(text: str) -> None:
    _only_parse_error(parse_amdgcn, text)
    _only_parse_error(parse_ttgir, text)


@needs_seeds
def test_real_seeds_parse() -> None:
    assert len(seeds()["hsaco"]) == len(_hip_archives())
    for data in seeds()["hsaco"]:
        assert parse_hsaco(data).kernels
    for data in seeds()["amdgcn"]:
        assert parse_amdgcn(data.decode()).kernels
    for data in seeds()["ttgir"]:
        assert parse_ttgir(data.decode())["num_warps"]


def test_huge_numbers_are_not_a_crash() -> None:
    digits = "9" * 5000  # int() refuses more than 4300 digits
    asm = (
        f'.type k,@function\nk:\n.file {digits} "a" "b"\n.loc 1 {digits} 0\n'
        f".amdhsa_next_free_vgpr {digits}\ns_nop 0 ; {digits}-byte Folded Spill\n; -- End function\n"
        f"; Kernel info:\n; Occupancy: {digits}\n"
    )
    _only_parse_error(parse_amdgcn, asm)
    _only_parse_error(parse_ttgir, f'module attributes {{"ttg.num-warps" = {digits} : i32}} {{\n}}')
