"""A cache directory given to `kdb diff` becomes a snapshot in a temporary home, deleted afterwards."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kdb.ingest.snapshot import IngestRequest, ingest
from kdb.store.home import Home


@contextmanager
def temporary_snapshot(
    path: Path, wait_s: float = 600.0, progress: Callable[[int, int, int, int], None] | None = None
) -> Iterator[tuple[Home, str]]:
    """Ingest `path` into a temporary home; yield (that home, the snapshot's tag)."""
    with tempfile.TemporaryDirectory(prefix="kdb-diff-") as tmp:
        home = Home(Path(tmp))
        # The directory's own name may be no tag at all (`my cache`, `(copy)`); it is the side's label, not its tag.
        tag = "directory"
        ingest(home, IngestRequest(path, tag, lock_wait_s=wait_s), progress=progress)
        yield home, tag
