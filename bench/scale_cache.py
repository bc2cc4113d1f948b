"""Build a large, well-formed Triton cache from the real corpus, for benchmarking kdb at scale.

    python bench/scale_cache.py --kernels 10000 --out bench/.data/cache-a
    python bench/scale_cache.py --kernels 10000 --out bench/.data/cache-b --from bench/.data/cache-a --change-fraction 0.05

Every output kernel folder is a copy of a real corpus kernel folder (all snapshots in
corpus/snapshots/, round-robin), perturbed so that each copy is a distinct kernel:

* folder name: a fresh cache key in the source's style (52-char base32 for Triton 3.3+, 64-char hex before);
* kernel JSON: ``hash`` replaced by a fresh SHA-256 hex; ``__grp__*.json``: old folder name replaced;
* text IR (ttir, ttgir, llir, amdgcn, ptx, source): one comment line carrying a unique integer. In the
  TTIR the comment is inserted before ``tt.return`` and reads ``arith.constant N : i32``, so every copy
  also gets a distinct kdb identity (``kdb diff`` can pair copies one to one);
* binaries (hsaco, cubin, .so) and anything else: copied byte for byte (real ELF, never modified).
  Copies of the same source kernel therefore share their binary blobs (see bench/README.md).

``--from DIR --change-fraction F`` copies DIR and "recompiles" round(F*N) of its kernels: they get a new
folder name and JSON hash and one more comment line in every text file (identity unchanged), the rest
are byte-identical copies.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import json
import random
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "corpus"
DEFAULT_CORPUS_CACHE = REPO / "bench" / ".data" / "corpus-src"

COMMENT = {".ttir": "//", ".ttgir": "//", ".llir": ";", ".amdgcn": ";", ".ptx": "//", ".source": "#"}


def unpack_corpus(dest: Path) -> Path:
    """Unpack every corpus/snapshots/*.tar.zst once into dest/NAME."""
    sys.path.insert(0, str(CORPUS))
    from unpack import unpack_archive  # noqa: E402

    for archive in sorted((CORPUS / "snapshots").glob("*.tar.zst")):
        name = archive.name[: -len(".tar.zst")]
        target = dest / name
        if (target / ".complete").exists():
            continue
        shutil.rmtree(target, ignore_errors=True)
        unpack_archive(archive, target)
        (target / ".complete").touch()
    return dest


def kernel_folders(corpus_cache: Path, sources: str = "*") -> list[Path]:
    """Real kernel folders (NAME.json beside NAME.ttir) of the corpus snapshots whose name matches `sources`."""
    out = []
    for snap in sorted(p for p in corpus_cache.iterdir() if p.is_dir() and fnmatch.fnmatchcase(p.name, sources)):
        for folder in sorted(p for p in snap.iterdir() if p.is_dir()):
            names = {p.name for p in folder.iterdir()}
            if any(n.endswith(".ttir") and n[:-5] + ".json" in names for n in names):
                out.append(folder)
    if not out:
        raise SystemExit(f"no kernel folders under {corpus_cache}")
    return out


def new_key(rng: random.Random, like: str) -> str:
    raw = rng.getrandbits(256).to_bytes(32, "big")
    if len(like) == 64 and all(c in "0123456789abcdef" for c in like):
        return raw.hex()
    return base64.b32encode(raw).decode().rstrip("=")  # 52 chars, Triton 3.3+ style


def _write_text(dst: Path, text: str) -> None:
    dst.write_text(text, encoding="utf-8", newline="")


def _tag_text(suffix: str, text: str, marker: str, uniq: int) -> str:
    c = COMMENT[suffix]
    if suffix == ".ttir" and marker == "kdb-bench":
        line = f"    {c} {marker} arith.constant {uniq} : i32\n"
        idx = text.find("tt.return")
        if idx >= 0:
            start = text.rfind("\n", 0, idx) + 1
            return text[:start] + line + text[start:]
    sep = "" if text.endswith("\n") or not text else "\n"
    return f"{text}{sep}{c} {marker} {uniq}\n"


def copy_kernel(
    src: Path, dst_root: Path, key: str, uniq: int, marker: str = "kdb-bench", json_hash: str | None = None
) -> None:
    dst = dst_root / key
    dst.mkdir(parents=True)
    old_key = src.name
    for f in sorted(src.iterdir()):
        if not f.is_file():
            continue
        out = dst / f.name
        suffix = f.suffix
        if f.name.startswith("__grp__") and suffix == ".json":
            _write_text(out, f.read_text(encoding="utf-8").replace(old_key, key))
        elif suffix == ".json" and not f.name.endswith(".autotune.json"):
            text = f.read_text(encoding="utf-8")
            try:
                doc = json.loads(text)
            except ValueError:
                shutil.copyfile(f, out)
                continue
            if isinstance(doc, dict) and "hash" in doc and json_hash:
                doc["hash"] = json_hash
                text = json.dumps(doc)
            _write_text(out, text)
        elif suffix in COMMENT:
            _write_text(out, _tag_text(suffix, f.read_text(encoding="utf-8", errors="surrogateescape"), marker, uniq))
        else:
            shutil.copyfile(f, out)


def build(n: int, out: Path, seed: int, corpus_cache: Path, source_glob: str = "*") -> int:
    sources = kernel_folders(unpack_corpus(corpus_cache), source_glob)
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise SystemExit(f"{out} is not empty")
    for i in range(n):
        src = sources[i % len(sources)]
        key = new_key(rng, src.name)
        copy_kernel(
            src, out, key, 1_000_000 + seed * 10_000_000 + i, json_hash=rng.getrandbits(256).to_bytes(32, "big").hex()
        )
    return n


def derive(src_dir: Path, out: Path, fraction: float, seed: int) -> int:
    """Copy src_dir to out, re-keying and editing round(fraction * kernels) kernel folders."""
    folders = sorted(p for p in src_dir.iterdir() if p.is_dir())
    rng = random.Random(seed + 7919)
    changed = set(rng.sample(range(len(folders)), round(fraction * len(folders))))
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise SystemExit(f"{out} is not empty")
    for i, folder in enumerate(folders):
        if i in changed:
            key = new_key(rng, folder.name)
            copy_kernel(
                folder,
                out,
                key,
                i,
                marker="kdb-bench-changed",
                json_hash=rng.getrandbits(256).to_bytes(32, "big").hex(),
            )
        else:
            shutil.copytree(folder, out / folder.name)
    for f in src_dir.iterdir():
        if f.is_file():
            shutil.copyfile(f, out / f.name)
    return len(changed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", type=int, default=2000, help="kernel folders to create (ignored with --from)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from", dest="src", type=Path, help="derive OUT from this cache instead of the corpus")
    p.add_argument("--change-fraction", type=float, default=0.05)
    p.add_argument(
        "--sources",
        default="*",
        help="corpus snapshots to copy, a glob on their names: '*gfx*' for an AMD-only cache, '*sm*' NVIDIA",
    )
    p.add_argument(
        "--corpus-cache",
        type=Path,
        default=DEFAULT_CORPUS_CACHE,
        help="where the corpus archives are unpacked once (default bench/.data/corpus-src)",
    )
    args = p.parse_args(argv)
    if args.src:
        n = derive(args.src, args.out, args.change_fraction, args.seed)
        print(f"{args.out}: copy of {args.src} with {n} kernels changed")
    else:
        build(args.kernels, args.out, args.seed, args.corpus_cache, args.sources)
        print(f"{args.out}: {args.kernels} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
