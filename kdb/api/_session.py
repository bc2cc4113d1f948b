"""Where the CLI's commands act: the home (local or shared), the wait for a busy catalog, and how to tell the user
something on the way (a notice, the progress of ingesting a directory). The CLI fills one `Session` from its
global options and hands it to every command function of kdb.api; printing stays with the CLI, which passes the
two callbacks in."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kdb.errors import UsageError
from kdb.store.home import Home, resolve_home, resolve_shared

if TYPE_CHECKING:
    from kdb.store.catalog import Catalog

# (files done, files, bytes done, bytes) as kernel folders are stored (kdb.ingest.snapshot.ingest's `progress`)
Progress = Callable[[int, int, int, int], None]
# the progress shown while a cache directory given to `kdb diff`/`kdb report` is ingested into a temporary home
DirectoryProgress = Callable[[Path], AbstractContextManager[Progress | None]]


def _no_notice(text: str) -> None:
    """Without a CLI nobody is told; the Python API warns on its own (kdb/api/_db.py)."""


@contextmanager
def _no_progress(path: Path) -> Iterator[Progress | None]:
    yield None


@dataclass(frozen=True)
class Session:
    """The global options of one `kdb` run, resolved: `home` is where commands act (the shared home when one is
    given, else the local one); push and pull move snapshots between `local_home` and `shared_home`."""

    home: Home
    local_home: Home
    shared_home: Home | None
    wait_s: float
    notice: Callable[[str], None] = _no_notice
    directory_progress: DirectoryProgress = _no_progress

    @classmethod
    def resolve(
        cls,
        home: Path | None,
        catalog: str | None,
        store: str | None,
        wait_s: float,
        hooks: tuple[Callable[[str], None], DirectoryProgress] = (_no_notice, _no_progress),
    ) -> Session:
        """`--home`, `--catalog`, `--store` (each else its environment variable) and `--wait`; `hooks` are the
        notice and directory-progress callbacks."""
        shared = resolve_shared(catalog, store)
        local_home = Home(resolve_home(home))
        shared_home = Home.shared(*shared) if shared else None
        notice, progress = hooks
        return cls(shared_home or local_home, local_home, shared_home, wait_s, notice, progress)

    def reader(self) -> Catalog:
        """The home's catalog, read-only, waiting `wait_s` for a writer (duckdb is imported here, when a command
        first opens a catalog)."""
        from kdb.store.catalog import Catalog

        return Catalog.open(self.home.catalog, read_only=True, wait_s=self.wait_s)

    def record_captures(self, *tags: str, home: Home | None = None) -> None:
        """Before a command reads `tags` (none given: every tag) of `home` (default: the home commands act on):
        record what captures left waiting for them, or give one notice a tag saying how many folders wait and
        how to record them (kdb/capture/cache.py)."""
        from kdb.capture.cache import RECORD_BEFORE_READ_WAIT_S, record_waiting

        wait = min(self.wait_s, RECORD_BEFORE_READ_WAIT_S)
        for notice in record_waiting(home or self.home, list(tags) or None, wait):
            self.notice(notice)

    def require_shared(self) -> Home:
        if self.shared_home is None:
            raise UsageError(
                "push and pull move snapshots between the local home (--home) and a shared one: "
                "give --catalog and --store (or KDB_CATALOG and KDB_STORE)"
            )
        return self.shared_home
