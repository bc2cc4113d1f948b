"""Unpack a corpus snapshot (a deterministic .tar.zst of a real Triton cache) into a directory.

python corpus/unpack.py t3.4.0-gfx942 /tmp/cache-t3.4.0
"""

from __future__ import annotations

import argparse
import json
import tarfile
from pathlib import Path

import zstandard

CORPUS = Path(__file__).resolve().parent


def unpack_archive(archive: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    with (
        archive.open("rb") as fh,
        zstandard.ZstdDecompressor().stream_reader(fh) as reader,
        tarfile.open(fileobj=reader, mode="r|") as tar,
    ):
        tar.extractall(dest, filter="data")
    return dest


def unpack_snapshot(name: str, dest: Path) -> Path:
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    if name not in manifest["snapshots"]:
        raise SystemExit(f"unknown snapshot {name!r}; known: {', '.join(sorted(manifest['snapshots']))}")
    return unpack_archive(CORPUS / manifest["snapshots"][name]["archive"], dest)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("snapshot")
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    print(unpack_snapshot(args.snapshot, args.dest))
