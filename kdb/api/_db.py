"""`kdb.open()` and the object it returns: a kdb home (local or shared) seen from Python."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from kdb.api._commands import IngestCall
from kdb.api._commands import ingest as run_ingest
from kdb.api._core import api_errors, diff_page, kernel_details, rule_texts
from kdb.api._results import Diff, Kernel, Snapshot
from kdb.api._session import Session
from kdb.api._sides import open_side
from kdb.errors import UsageError
from kdb.store.catalog import Catalog
from kdb.store.home import Home, resolve_home, resolve_shared

if TYPE_CHECKING:
    from kdb.diff.sides import Side
    from kdb.ingest.snapshot import IngestSummary
    from kdb.store.catalog.frames import Relation

DEFAULT_WAIT_S = 600.0  # as the CLI's --wait


@api_errors
def open(
    home: str | os.PathLike[str] | None = None,
    *,
    catalog: str | None = None,
    store: str | os.PathLike[str] | None = None,
    wait: float = DEFAULT_WAIT_S,
) -> Kdb:
    """Open a kdb home as the CLI would: `catalog` + `store` (else $KDB_CATALOG + $KDB_STORE) name a shared
    home; otherwise `home`, else $KDB_HOME, else the user data directory. `wait`: seconds to wait for another
    kdb process holding the catalog (the CLI's --wait). Nothing is created until the first ingest."""
    shared = resolve_shared(catalog, store)
    return Kdb(Home.shared(*shared) if shared else Home(resolve_home(home)), wait_s=wait)


class Kdb:
    """A kdb home. Every method opens the catalog for its own work and closes it again, so the object holds
    nothing open between calls (an ingest in another process never waits for it); `close()` and the
    context manager only end its use.

    >>> import kdb
    >>> with kdb.open("/tmp/kdb-home") as db:                        # doctest: +SKIP
    ...     db.ingest("/tmp/triton_cache", "rocm6.2")
    ...     db.kernels("rocm6.2").filter("vgpr_spill_count > 0").df()  # pandas: kdb[notebook]
    ...     d = db.diff("rocm6.1", "rocm6.2", fail_on=["new-spills"])
    ...     d.exit_code, d.summary, d.kernels[0].reason
    """

    def __init__(self, home: Home, *, wait_s: float = DEFAULT_WAIT_S) -> None:
        self._home = home
        self._wait_s = wait_s
        self._closed = False

    @property
    def home(self) -> Path:
        """The home's directory (a shared home: its store path)."""
        return self._home.root

    @property
    def is_shared(self) -> bool:
        return self._home.is_shared

    def __repr__(self) -> str:
        return f"<kdb {self._home.describe()}{' (closed)' if self._closed else ''}>"

    # -- lifetime --------------------------------------------------------------------------------------
    def close(self) -> None:
        """End the use of this object (later calls raise UsageError). Relations from `kernels()` stay valid."""
        self._closed = True

    def __enter__(self) -> Kdb:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> Home:
        if self._closed:
            raise UsageError("this kdb home was closed: open it again with kdb.open()")
        return self._home

    def _reader(self) -> Catalog:
        home = self._check_open()
        return Catalog.open(home.catalog, read_only=True, wait_s=self._wait_s)

    def _record_captures(self, *tags: str) -> Home:
        """Before a read of `tags` (none: every tag): record what captures left waiting for them, as every CLI
        command that reads a tag does; what cannot be recorded (the catalog busy) is a RuntimeWarning saying
        how many folders wait and how to record them."""
        import warnings

        from kdb.capture.cache import RECORD_BEFORE_READ_WAIT_S, record_waiting

        home = self._check_open()
        for notice in record_waiting(home, list(tags) or None, min(self._wait_s, RECORD_BEFORE_READ_WAIT_S)):
            warnings.warn(notice, RuntimeWarning, stacklevel=3)
        return home

    # -- reading ---------------------------------------------------------------------------------------
    @api_errors
    def snapshots(self) -> list[Snapshot]:
        """Every snapshot, oldest first (what `kdb tags --format json` lists); empty on a new home."""
        if not self._record_captures().has_catalog():
            return []
        with self._reader() as catalog:
            return [Snapshot(**row) for row in catalog.queries.list_snapshots()]

    @api_errors
    def kernels(self, tag: str) -> Relation:
        """The `kernels` view's rows of snapshot `tag` (schema/README.md lists the columns), by name and cache
        key, as a DuckDB relation: `.fetchall()`, `.filter("occupancy < 4")`, `.df()` (pandas and numpy: the
        `kdb[notebook]` extra), `.pl()` (polars), `.arrow()` (pyarrow), with whichever library is installed. The
        rows are copied at the call into an in-memory database: the relation holds the catalog open never, and
        outlives this object."""
        from kdb.store.catalog.frames import kernels_relation

        home = self._record_captures(tag)
        where = home.location if home.location is not None else home.catalog_path
        return kernels_relation(where, tag, wait_s=self._wait_s)

    @api_errors
    def kernel(self, tag: str, key: str) -> Kernel:
        """One kernel of snapshot `tag`, named by its name or a unique cache-key prefix (the key `kdb diff`
        prints): what `kdb show TAG --kernel KEY --format json` shows. UsageError when `key` names no kernel
        or several (a glob: use `kernels(tag)`)."""
        self._record_captures(tag)
        with self._reader() as catalog:
            details = kernel_details(catalog, tag, key)
        if len(details) > 1:
            names = ", ".join(sorted({f"{d['name']} ({d['cache_key'][:8]})" for d in details})[:5])
            raise UsageError(f"{key!r} names {len(details)} kernels in {tag!r} ({names}…): give a cache-key prefix")
        return Kernel.from_detail(tag, details[0])

    # -- ingesting -------------------------------------------------------------------------------------
    @api_errors
    def ingest(
        self,
        path: str | os.PathLike[str],
        tag: str,
        *,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        replace: bool = False,
        workers: int | None = None,
        sass: bool = True,
    ) -> IngestSummary:
        """`kdb ingest PATH --tag TAG`: snapshot a cache directory; `labels` as {key: value} or ["key=value"];
        `workers` processes (default: all cores); `sass=False` is `--no-sass`. Returns the summary
        `kdb ingest --format json` prints (`problems` counts files recorded as problems: the CLI's exit 1)."""
        home = self._check_open()
        call = IngestCall(Path(path), tag, labels, replace=replace, workers=workers, sass=sass)
        return run_ingest(Session(home, home, None, self._wait_s), call)

    # -- comparing -------------------------------------------------------------------------------------
    @api_errors
    def diff(
        self,
        a: str,
        b: str,
        *,
        fail_on: str | Iterable[str] = (),
        across_targets: bool = False,
        min_match: float = 0.5,
        allow_unknown: bool = False,
    ) -> Diff:
        """`kdb diff A B` of two snapshot tags: `fail_on` takes the CLI's --fail-on rules, a list of them or one
        string ("new-spills", ["new-spills", "vgpr:+10%"], "new-spills,vgpr:+10%"); an untrusted comparison is
        returned (`Diff.trust_problem`, `exit_code` 2), not raised. UsageError for a bad rule, TagError for an
        unknown tag."""
        from kdb.api._compare import grouped
        from kdb.diff.engine import diff_sides
        from kdb.diff.model import DiffOptions
        from kdb.diff.rules import check_min_match, parse_rules

        home = self._record_captures(a, b)
        rules = parse_rules(rule_texts(fail_on))
        min_match = float(min_match)  # as the CLI's option: `min_match: 0` in the JSON would read `0.0` there
        check_min_match(min_match)
        with self._sides(home, a, b) as (sa, sb):
            options = DiffOptions(
                across_targets=across_targets, rules=tuple(rules), min_match=min_match, allow_unknown=allow_unknown
            )
            result, _ = diff_sides(sa, sb, options)
            result = grouped(result, sa, sb)  # the CLI's autotune groups

        @api_errors
        def page(limit: int) -> str:
            with self._sides(home, a, b) as (pa, pb):  # works after close(), as relations do
                return diff_page(pa, pb, across_targets=across_targets, limit=limit)

        return Diff(result, page)

    @contextmanager
    def _sides(self, home: Home, a: str, b: str) -> Iterator[tuple[Side, Side]]:
        """The diff sides of tags `a` and `b` (never a directory: the API takes tags), each over its own
        read-only catalog held open until the block ends."""
        session = Session(home, home, None, self._wait_s)
        with ExitStack() as stack:
            sa, sb = (stack.enter_context(open_side(session, tag, directories=False)) for tag in (a, b))
            yield sa, sb
