"""`kdb diff A B` with the mix-digest shortcut turned off: every paired kernel's mnemonic counts are
fetched and compared, as in an upgrade where every kernel's ISA changed (the generated caches' changed
kernels differ only in comments, so their mixes are equal and the normal diff skips that work).

    python bench/diff_full_compare.py HOME TAG_A TAG_B

Prints the same summary line as `kdb diff` and the wall time, start-up included.
"""

from __future__ import annotations

import sys
import time

started = time.perf_counter()

from pathlib import Path

from kdb.diff import engine
from kdb.diff.sides import load_side
from kdb.store.catalog import Catalog
from kdb.store.home import Home


def main() -> int:
    home, tag_a, tag_b = sys.argv[1:4]
    engine._same_mix = lambda a, b: False  # the worst case: no pair is known equal by digest
    h = Home(Path(home))
    with Catalog.open(h.catalog_path, read_only=True) as catalog:
        sides = [load_side(catalog.diffs, h.store, tag, tag) for tag in (tag_a, tag_b)]
        result, _ = engine.diff_sides(*sides)
    compared = sum(1 for k in result.kernels if k.a and k.b)
    print(f"{result.summary}; mnemonic counts compared for {compared} pairs; {time.perf_counter() - started:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
