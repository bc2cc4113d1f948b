"""Fuzz the NVIDIA parsers with mutations of real corpus bytes: only ParseError may escape."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from conftest import CORPUS, load_manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdb.analysis.nvidia.cubin import parse_cubin
from kdb.analysis.nvidia.ptx import parse_ptx
from kdb.errors import ParseError


def _cuda_snapshot() -> str | None:
    if not (CORPUS / "manifest.json").exists():
        return None
    names = sorted(n for n, e in load_manifest()["snapshots"].items() if e.get("backend") == "cuda")
    return names[0] if names else None


SNAPSHOT = _cuda_snapshot()
pytestmark = pytest.mark.skipif(SNAPSHOT is None, reason="corpus/manifest.json lists no CUDA snapshot")
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def seeds(unpack_snapshot) -> tuple[list[bytes], list[bytes]]:
    root: Path = unpack_snapshot(SNAPSHOT)
    cubins = sorted(root.rglob("*.cubin"), key=lambda p: p.stat().st_size)
    ptxs = sorted(root.rglob("*.ptx"), key=lambda p: p.stat().st_size)
    # The smallest few keep each example fast; they hold every section kind the big ones do.
    return [p.read_bytes() for p in cubins[:4]], [p.read_bytes() for p in ptxs[:4]]


def _mutate(data: bytes, seed_ops: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, value) edits: overwrite a byte, delete a run, or duplicate a run."""
    buf = bytearray(data)
    for kind, pos, value in seed_ops:
        if not buf:
            break
        pos %= len(buf)
        if kind == 0:
            buf[pos] = value
        elif kind == 1:
            del buf[pos : pos + value + 1]
        else:
            buf[pos:pos] = buf[pos : pos + value + 1]
    return bytes(buf)


EDITS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8)


def _only_parse_error(fn, data) -> None:
    with contextlib.suppress(ParseError):
        fn(data)


@FUZZ
@given(which=st.integers(0, 3), edits=EDITS, cut=st.one_of(st.none(), st.integers(0, 1 << 20)))
def test_parse_cubin_fuzz(seeds, which: int, edits, cut) -> None:
    cubins, _ = seeds
    data = _mutate(cubins[which % len(cubins)], edits)
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    _only_parse_error(parse_cubin, data)


@FUZZ
@given(which=st.integers(0, 3), edits=EDITS, as_bytes=st.booleans())
def test_parse_ptx_fuzz(seeds, which: int, edits, as_bytes: bool) -> None:
    _, ptxs = seeds
    data = _mutate(ptxs[which % len(ptxs)], edits)
    if as_bytes:
        _only_parse_error(parse_ptx, data)
    else:
        _only_parse_error(parse_ptx, data.decode("utf-8", errors="replace"))


@FUZZ
@given(header=st.binary(min_size=0, max_size=256))
def test_parse_cubin_fuzz_header(seeds, header: bytes) -> None:
    """Random ELF headers over a real body: the header fields pyelftools trusts most."""
    cubins, _ = seeds
    _only_parse_error(parse_cubin, header + cubins[0][len(header) :])
