"""What zstd dictionaries trained per file kind would save on a real cache (issue 16, deliverable 3, measured only).

    python bench/dict_savings.py DIR [DIR ...]

Per cache: every file compressed alone at level 9 (what the blob store does today), then again with a
dictionary trained on that cache's files of its kind (JSON, TTIR, TTGIR, LLIR, asm, PTX, binaries,
Python, other; 112 KB each, dictionaries counted in the total), against `tar -cf - DIR | zstd -3`.
Unique files only (the store keeps one blob per content).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import zstandard

KINDS = {
    ".json": "json",
    ".ttir": "ttir",
    ".ttgir": "ttgir",
    ".llir": "llir",
    ".amdgcn": "asm",
    ".ptx": "ptx",
    ".cubin": "binary",
    ".hsaco": "binary",
    ".py": "python",
}
MB = 1024 * 1024
DICT_BYTES = 112 * 1024


def measure(root: Path) -> None:
    by_kind: dict[str, list[bytes]] = {}
    seen = set()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            h = hashlib.sha256(data).digest()
            if h in seen:
                continue
            seen.add(h)
            by_kind.setdefault(KINDS.get(p.suffix, "other"), []).append(data)
    tar = subprocess.run(
        f"tar -cf - -C {root.parent} {root.name} | zstd -3 -q -c | wc -c", shell=True, capture_output=True, text=True
    )
    archive = int(tar.stdout)
    plain_total = dict_total = 0
    rows = []
    started = time.perf_counter()
    for kind, files in sorted(by_kind.items()):
        plain = sum(len(zstandard.ZstdCompressor(level=9).compress(d)) for d in files)
        dict_size = 0
        with_dict = plain
        if len(files) >= 8 and sum(map(len, files)) > 4 * DICT_BYTES:
            try:
                zd = zstandard.train_dictionary(DICT_BYTES, files)
                cctx = zstandard.ZstdCompressor(level=9, dict_data=zd)
                with_dict = sum(len(cctx.compress(d)) for d in files)
                dict_size = len(zd.as_bytes())
            except zstandard.ZstdError:
                pass
        plain_total += plain
        dict_total += min(plain, with_dict + dict_size)
        raw = sum(map(len, files))
        rows.append(
            f"  {kind:8} {len(files):6} files {raw / MB:8.1f} MB -> plain {plain / MB:6.2f} MB, dict {(with_dict + dict_size) / MB:6.2f} MB"
        )
    print(f"{root}: {len(seen)} unique files; tar | zstd -3 {archive / MB:.2f} MB")
    print("\n".join(rows))
    print(
        f"  total: per-file level 9 {plain_total / MB:.2f} MB ({plain_total / archive:.2f}× the archive), "
        f"with per-kind dictionaries {dict_total / MB:.2f} MB ({dict_total / archive:.2f}×); "
        f"{time.perf_counter() - started:.1f} s to train and compress"
    )


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        measure(Path(arg))
