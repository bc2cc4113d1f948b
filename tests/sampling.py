"""Which corpus items an oracle check looks at: all of them in the sweep, a stratified sample otherwise.

The sweep (`python bench/sweep.py`, $KDB_SWEEP=1) holds every kernel, pair and release of the corpus to its
external oracle and records the result under bench/results/ (tests/test_sweep_record.py fails when that
record covers source that has changed since). The README's test command runs the same checks, the same
assertions, on a sample:

- every stratum at least once: a test is parametrized per snapshot (release x target), and within one the
  stratum is the kernel family (the build record's config family, else the kernel's name with Inductor's
  numbering cut off), so every release x target x family of the corpus is checked on every run; which
  member stands for its stratum rotates with the commit;
- plus a rotating slice: the items whose bucket (a hash of the item's id, mod ROTATING_BUCKETS, or
  KERNEL_BUCKETS for kernels) is the commit's bucket. Every item sits in exactly one bucket, so successive commits check everything.

The seed is $KDB_SAMPLE_SEED, else the checkout's HEAD commit. Every call says what it chose in the log
$KDB_SAMPLE_LOG names (the sweep sums it: how many items each check saw of how many).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Callable, Hashable, Sequence
from functools import cache
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
SWEEP_ENV = "KDB_SWEEP"
SEED_ENV = "KDB_SAMPLE_SEED"
LOG_ENV = "KDB_SAMPLE_LOG"
ROTATING_BUCKETS = 8
# A snapshot's ~45 kernels fall in ~11 families: one of each, and a thin slice (about one kernel) besides.
KERNEL_BUCKETS = 32

T = TypeVar("T")


def sweeping() -> bool:
    """True in the sweep: every check sees every item."""
    return os.environ.get(SWEEP_ENV) == "1"


@cache
def seed() -> str:
    explicit = os.environ.get(SEED_ENV)
    if explicit:
        return explicit
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30)
        head = proc.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = ""
    return head or "no-commit"


def _digest(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\0".join(parts).encode()).digest()[:8], "big")


def bucket_of(item_id: str, buckets: int = ROTATING_BUCKETS) -> int:
    return _digest("bucket", item_id) % buckets


def commit_bucket(buckets: int = ROTATING_BUCKETS) -> int:
    return _digest("commit", seed()) % buckets


def sample(
    items: Sequence[T],
    *,
    id_of: Callable[[T], str],
    stratum_of: Callable[[T], Hashable],
    what: str,
    buckets: int = ROTATING_BUCKETS,
) -> list[T]:
    """`items` in their order: all of them in the sweep; else one per stratum (rotating with the seed) and
    the items of the commit's bucket."""
    if sweeping():
        chosen = list(items)
    else:
        groups: dict[Hashable, list[T]] = {}
        for item in items:
            groups.setdefault(stratum_of(item), []).append(item)
        keep = {id_of(min(group, key=lambda it: _digest(seed(), id_of(it)))) for group in groups.values()}
        bucket = commit_bucket(buckets)
        keep |= {id_of(it) for it in items if bucket_of(id_of(it), buckets) == bucket}
        chosen = [it for it in items if id_of(it) in keep]
    _log(what, len(items), len(chosen))
    return chosen


INDUCTOR_NAME_RE = re.compile(r"^(triton_(?:poi|red|per|tem|for|spl)|triton)_.*$")


@cache
def _config_families() -> dict[str, str]:
    """cache key (the folder's name) -> kernel family (the first part of the config that made it), from every
    build record of the corpus."""
    families: dict[str, str] = {}
    for path in sorted((ROOT / "corpus" / "records").glob("*.json")):
        for record in json.loads(path.read_text()):
            if record.get("cache_key") and record.get("config"):
                families[record["cache_key"]] = record["config"].split("/")[0]
    return families


def family(folder_name: str, kernel_name: str) -> str:
    """The kernel family of a corpus kernel folder: its config's family, else its name (Inductor's
    `triton_poi_fused_add_0` -> `triton_poi`)."""
    known = _config_families().get(folder_name)
    if known:
        return known
    match = INDUCTOR_NAME_RE.match(kernel_name)
    return match.group(1) if match else kernel_name


def kernels(
    items: Sequence[T],
    snapshot: str,
    *,
    folder: Callable[[T], Path],
    name: Callable[[T], str],
    trait: Callable[[T], Hashable] | None = None,
) -> list[T]:
    """The sample of one snapshot's kernels an oracle check runs on: every family of the snapshot, and where
    a check's assertions need kernels of a kind (`trait`: spills to local memory, say), every family x trait."""
    return sample(
        items,
        id_of=lambda k: f"{snapshot}/{folder(k).name}/{name(k)}",
        stratum_of=lambda k: (family(folder(k).name, name(k)), trait(k) if trait else None),
        what=f"kernels of {snapshot}",
        buckets=KERNEL_BUCKETS,
    )


def catalog_rows(rows: Sequence[dict], snapshot: str) -> list[dict]:
    """The sample of one snapshot's `kernels` rows (cache_key, name) a catalog check runs on: every family."""
    return sample(
        rows,
        id_of=lambda r: f"{snapshot}/{r['cache_key']}/{r['name']}",
        stratum_of=lambda r: family(r["cache_key"], r["name"]),
        what=f"catalog rows of {snapshot}",
    )


def _log(what: str, total: int, chosen: int) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    line = json.dumps({"test": test, "what": what, "total": total, "checked": chosen}) + "\n"
    with open(path, "a") as fh:  # one short write per line: lines of parallel workers do not interleave
        fh.write(line)


def covering(
    items: Sequence[T],
    *,
    members: Callable[[T], Sequence[str]],
    id_of: Callable[[T], str],
    what: str,
    buckets: int = ROTATING_BUCKETS,
) -> list[T]:
    """Items (pairs of snapshots, say) such that every member of any item is in at least one chosen item, and
    the commit's bucket (of `buckets`: more buckets, a thinner slice of a long list): the order in which items
    are tried rotates with the seed, so which pair stands for a snapshot changes from commit to commit. All of
    them in the sweep."""
    if sweeping():
        chosen = list(items)
    else:
        keep: set[str] = set()
        covered: set[str] = set()
        for item in sorted(items, key=lambda it: _digest(seed(), id_of(it))):
            if not set(members(item)) <= covered:
                keep.add(id_of(item))
                covered.update(members(item))
        bucket = commit_bucket(buckets)
        keep |= {id_of(it) for it in items if bucket_of(id_of(it), buckets) == bucket}
        chosen = [it for it in items if id_of(it) in keep]
    _log(what, len(items), len(chosen))
    return chosen
