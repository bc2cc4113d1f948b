"""kdb._speedups (kdb/_speedups.c, issue #31): the compiled stage normaliser gives the pure-Python reference's
output byte for byte, on every text IR file of the corpus and on damaged copies of real files.

The extension is part of the build (`pip install -e '.[test]'` compiles it with setup.py): a test here fails,
not skips, when it is missing, as CI must run the compiled path it ships."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sampling
from hypothesis import given, settings
from hypothesis import strategies as st

from kdb.ingest.walker import classify
from kdb.triton import normalize
from kdb.triton.normalize import normalise_stage, normalise_stage_pure

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
TEXT_KINDS = ("ttir", "ttgir", "llir", "amdgcn", "ptx", "source")
# the whole corpus is ~19k distinct texts (~70 s of the Python reference): split in shards for xdist
SHARDS = 3


def _compiled():
    try:
        from kdb import _speedups
    except ImportError as e:
        pytest.fail(f"kdb._speedups is not built ({e}): pip install -e '.[test]' compiles it (needs a C compiler)")
    return _speedups.normalise_stage


def _archives() -> list[Path]:
    found = sorted((CORPUS / "snapshots").glob("*.tar.zst")) + sorted((CORPUS / "inductor").glob("*/*.tar.*"))
    assert found, "no corpus archives"
    return found


def _text_files(root: Path, kind: str) -> list[Path]:
    return sorted(p for p in root.rglob(f"*.{kind}") if p.is_file() and classify(p.name) == kind)


def _check(compiled, text: str, kind: str, where: str) -> str | None:
    """compiled == pure for this text; the compiled output (None where it hands the text back to Python)."""
    out = compiled(text, kind)
    expected = normalise_stage_pure(text, kind)
    assert normalise_stage(text, kind) == expected, where
    if out is not None:
        assert out == expected, f"{where}: the compiled normaliser differs from the reference"
    return out


def _corpus_texts(unpacked, kind: str, shard: int) -> tuple[int, dict[bytes, tuple[str, bytes]]]:
    """(files of the kind in the corpus, {sha256: (where, content)} of its distinct contents in the shard that
    this run checks: all of them in the sweep, else at least one per archive and the commit's slice)."""
    files, texts, archive_of = 0, {}, {}
    for archive in _archives():
        for path in _text_files(unpacked(archive), kind):
            data = path.read_bytes()
            digest = hashlib.sha256(data).digest()
            files += 1
            if digest[0] % SHARDS == shard and digest not in texts:
                texts[digest] = (f"{archive.parent.name}/{archive.name}: {path.name}", data)
                archive_of[digest] = archive.name
    chosen = sampling.sample(
        list(texts),
        id_of=bytes.hex,
        stratum_of=archive_of.__getitem__,
        what=f".{kind} texts, shard {shard}",
        buckets=sampling.KERNEL_BUCKETS,
    )
    return files, {d: texts[d] for d in chosen}


def _reference_digests(kind: str, shard: int, texts: dict[bytes, tuple[str, bytes]]) -> dict[str, str]:
    """{sha256 of a text: sha256 of normalise_stage_pure(text)}: ~70 s of CPU for the whole corpus, so kept in
    the test cache (tests/corpus_cache.py) under the texts and the reference's own source."""
    from corpus_cache import cached_at

    sources = [Path(normalize.__file__), Path(normalize.__file__).with_name("mlir_text.py")]
    parts = {
        "kind": kind,
        "shard": f"{shard}/{SHARDS}",
        "reference": [hashlib.sha256(p.read_bytes()).hexdigest() for p in sources],
        "texts": hashlib.sha256(b"".join(sorted(texts))).hexdigest(),
    }
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def build(tree: Path) -> None:
        tree.mkdir(parents=True)
        digests = {
            d.hex(): hashlib.sha256(normalise_stage_pure(data.decode("utf-8", "replace"), kind).encode()).hexdigest()
            for d, (_, data) in texts.items()
        }
        (tree / "digests.json").write_text(json.dumps(digests))

    return json.loads((cached_at("speedups-reference", key, parts, build) / "digests.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
@pytest.mark.parametrize("kind", TEXT_KINDS)
def test_compiled_equals_pure_on_every_corpus_file(kind, shard, unpacked_archive):
    """Every file of the kind in every corpus archive (snapshots and Inductor caches), each distinct content
    once. Real files are ASCII: the compiled path must handle every one of them itself."""
    compiled = _compiled()
    files, texts = _corpus_texts(unpacked_archive, kind, shard)
    assert files, f"no .{kind} files in the corpus"
    assert texts, f"no .{kind} file in shard {shard}"
    reference = _reference_digests(kind, shard, texts)
    for digest, (where, data) in texts.items():
        text = data.decode("utf-8", "replace")
        out = compiled(text, kind)
        assert out is not None, f"{where}: a real file went to the Python fallback"
        if hashlib.sha256(out.encode()).hexdigest() != reference[digest.hex()]:
            assert out == normalise_stage_pure(text, kind), f"{where}: the compiled normaliser differs"
            raise AssertionError(f"{where}: the cached reference digest is stale")


def _samples(unpacked) -> dict[str, list[str]]:
    """A few real files of each kind: the smallest, a middle one and the largest of two snapshots per backend."""
    out: dict[str, list[str]] = {k: [] for k in TEXT_KINDS}
    archives = [CORPUS / "snapshots" / f"{n}.tar.zst" for n in ("t3.4.0-gfx942", "t3.4.0-sm90")]
    archives += sorted((CORPUS / "inductor").glob("h100-*/gpt2_train.tar.*"))[:1]
    for archive in archives:
        root = unpacked(archive)
        for kind in TEXT_KINDS:
            files = sorted(_text_files(root, kind), key=lambda p: (p.stat().st_size, p.name))
            for p in {files[0], files[len(files) // 2], files[-1]} if files else ():
                out[kind].append(p.read_text(errors="replace"))
    for kind, texts in out.items():
        assert texts, f"no sample .{kind} file"
    return out


@pytest.fixture(scope="module")
def samples(unpacked_archive) -> dict[str, list[str]]:
    return _samples(unpacked_archive)


def _damaged(text: str) -> dict[str, str]:
    cut = len(text) * 2 // 3
    while cut < len(text) and text[cut] in "\n":
        cut += 1
    mid = text.find("\n", len(text) // 2)
    mid = len(text) // 2 if mid < 0 else mid
    return {
        "truncated mid-line": text[:cut],
        "no trailing newline": text.rstrip("\n"),
        "CRLF": text.replace("\n", "\r\n"),
        "CR only": text.replace("\n", "\r"),
        "non-ASCII inserted": text[:mid] + " é\u2028ß%ü\u00a0x\u3000!7 \u0661:" + text[mid:],
        "form feed and separators": text[:mid] + "\f\x1c\x1d\x1e\x1f\x85\v" + text[mid:],
        "NUL bytes": text[:mid] + "\x00%a\x00" + text[mid:],
        "first 200 characters": text[:200],
        "only newlines": "\n" * 5,
        "empty": "",
    }


@pytest.mark.parametrize("kind", TEXT_KINDS)
def test_compiled_equals_pure_on_damaged_real_files(kind, samples):
    compiled = _compiled()
    for n, text in enumerate(samples[kind]):
        for damage, broken in _damaged(text).items():
            out = _check(compiled, broken, kind, f"sample {n}, {damage}")
            ascii_only = broken.isascii() and not any(c in broken for c in "\r\v\f\x1c\x1d\x1e\x1f")
            # the compiled path handles exactly the text it can (ASCII without \r \v \f \x1c-\x1f), no less
            assert (out is not None) == ascii_only, f"sample {n}, {damage}"


# Pieces of every construct the normaliser rewrites, and of their edge cases, joined at random.
PIECES = [
    "loc(", "loc(#a)", "loc(#x.1$-)", 'loc("a/b.py":1:2)', "#loc", "#loc3 = ", "//", "// c", ";", '"', "/", "\\", "\\\"",
    "%", "%a", "%12", "%x#3", "%x#", "^", "^bb1", "!dbg", " !dbg !1", ", !dbg !2", ",!dbg\t!3", "!", "!7", "1", "07", "a",
    " ", "  ", "\t", "\n", "\n", "\n", "(", ")", ",", ".L", ".LBB0_1", "$L", "$L__tmp1:", "%r", "%r5", "%rd", "%rd12",
    "%hh3", "%f", "%fd2", "%p1", "%b7", "%rs4", "%rx1", ":", "12:", ".section", ".debug_info", ".text", ".data", "}",
    "source_filename", "#dbg_value", "llvm.dbg.", "#", "x", "_", ".", "-", "$", ".loc", ".file", ".cfi_x", ".ident",
    "\x00", "\x1f", "\r", "é",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join), st.sampled_from([*TEXT_KINDS, "cubin"]))
def test_compiled_equals_pure_on_constructed_text(text, kind):
    _check(_compiled(), text, kind, repr(text))


def test_unknown_kind_returns_the_text():
    text = "%a = loc(#x)\n"
    assert _compiled()(text, "hsaco") is text


def test_compiled_path_is_active_unless_turned_off():
    _compiled()
    code = "from kdb.triton import normalize; print(normalize.COMPILED)"
    env = {k: v for k, v in os.environ.items() if k != "KDB_PURE_PYTHON"}
    for pure, expected in (("", "True"), ("1", "False")):
        run = subprocess.run(
            [sys.executable, "-c", code], env={**env, "KDB_PURE_PYTHON": pure}, capture_output=True, text=True
        )
        assert run.stdout.strip() == expected, run.stderr
    turned_off = os.environ.get("KDB_PURE_PYTHON") == "1"
    assert normalize.COMPILED is not turned_off
