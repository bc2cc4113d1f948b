"""Shared fixtures: the real corpus of Triton caches, unpacked on demand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
sys.path.insert(0, str(CORPUS))

from unpack import unpack_archive  # noqa: E402  (corpus/unpack.py, also used by the quick start)

sys.path.insert(0, str(ROOT / "bench"))
import pairing_matrix  # noqa: E402  (bench/pairing_matrix.py: corpus snapshots with their build records)


def load_manifest() -> dict:
    return json.loads((CORPUS / "manifest.json").read_text())


def snapshot_names() -> list[str]:
    return sorted(load_manifest()["snapshots"])


def compiled_kernels(root: Path, binary_suffix: str) -> list[Path]:
    """Code objects (`.hsaco` / `.cubin`) of an unpacked snapshot that sit beside their kernel's JSON, sorted."""
    found = sorted(p for p in root.rglob(f"*{binary_suffix}") if (p.parent / f"{p.stem}.json").exists())
    assert found, f"{root}: no {binary_suffix} kernels"
    return found


@pytest.fixture(scope="session")
def corpus_manifest() -> dict:
    return load_manifest()


@pytest.fixture(scope="session")
def unpack_snapshot(tmp_path_factory: pytest.TempPathFactory):
    """Return a function NAME -> Path of a fresh-per-session, read-only-by-convention unpacked cache."""
    manifest = load_manifest()
    cache: dict[str, Path] = {}

    def unpack(name: str) -> Path:
        if name not in cache:
            entry = manifest["snapshots"][name]
            dest = tmp_path_factory.mktemp(f"cache-{name}")
            cache[name] = unpack_archive(CORPUS / entry["archive"], dest)
        return cache[name]

    return unpack


@pytest.fixture(scope="session")
def corpus_snapshots() -> list[pairing_matrix.Snapshot]:
    """Every snapshot of the corpus with its build record: the kernel suite and the recompiled Inductor kernels."""
    return pairing_matrix.suite_snapshots() + pairing_matrix.inductor_snapshots()


@pytest.fixture(scope="session")
def corpus_home(tmp_path_factory: pytest.TempPathFactory, unpack_snapshot, corpus_snapshots) -> Path:
    """One kdb home holding every snapshot of the corpus, each tagged by its name (ingested once per session)."""
    from kdb.ingest.snapshot import ingest
    from kdb.store.home import Home

    home = tmp_path_factory.mktemp("corpus-home")
    suite = set(load_manifest()["snapshots"])
    for snap in corpus_snapshots:
        cache = (
            unpack_snapshot(snap.tag)
            if snap.tag in suite
            else unpack_archive(snap.archive, tmp_path_factory.mktemp(f"cache-{snap.tag}"))
        )
        ingest(Home(home), cache, snap.tag)
    return home


PAIR = ("t3.3.1-gfx942", "t3.4.0-gfx942")


@pytest.fixture(scope="session")
def pair_home(corpus_home: Path) -> Path:
    """A kdb home holding the two snapshots of PAIR (a Triton 3.3.1 -> 3.4.0 upgrade on gfx942): the shared one."""
    return corpus_home
