"""Progress on stderr while the CLI ingests (rich's bar on a terminal, a line before and after otherwise).

Part of the CLI layer (only kdb/cli imports it): it prints to stderr, never to stdout."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def progress_bar():
    """A bar on stderr: the ingest's phase from the first second (walking, storing, analysing, linking,
    committing), then files and bytes as kernel folders are stored. Yields (bar, task); update the task's
    `phase` field with `set_phase`."""
    from contextlib import contextmanager

    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    @contextmanager
    def cm():
        columns = [
            SpinnerColumn(),
            TextColumn("ingest: {task.fields[phase]:<22}"),
            BarColumn(),
            TextColumn("{task.fields[files]}/{task.fields[total_files]} files"),
            TextColumn("{task.fields[rate]}"),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        ]
        import time

        start = time.monotonic()

        class RateProgress(Progress):
            def get_renderables(self):  # files/s computed here so it refreshes with the bar
                for t in self.tasks:
                    elapsed = max(time.monotonic() - start, 1e-6)
                    files = t.fields.get("files", 0)
                    t.fields["rate"] = f"{files / elapsed:.0f} files/s" if files else ""
                yield from super().get_renderables()

        with RateProgress(*columns, transient=True, console=stderr_console()) as bar:
            task = bar.add_task("ingest", total=None, files=0, total_files="?", rate="", phase="starting")
            yield bar, task

    return cm()


def set_phase(bar, task) -> Callable[[str], None]:
    """A `phase` callback for kdb.ingest.snapshot.ingest that shows the phase on the bar."""

    def phase(name: str) -> None:
        bar.update(task, phase=name)

    return phase


@contextmanager
def ingest_display() -> Iterator[tuple[Callable[[int, int, int, int], None], Callable[[str], None]]]:
    """`kdb ingest`'s bar: the (progress, phase) callbacks kdb.api's ingest hands to the ingest."""
    with progress_bar() as (bar, task):
        yield bar_progress(bar, task), set_phase(bar, task)


def bar_progress(bar, task) -> Callable[[int, int, int, int], None]:
    """A `progress` callback for kdb.ingest.snapshot.ingest that shows files and bytes stored on the bar."""

    def update(files: int, total: int, done_bytes: int, total_bytes: int) -> None:
        bar.update(task, completed=done_bytes, total=total_bytes, files=files, total_files=total)

    return update


def stderr_console():
    from rich.console import Console

    return Console(file=sys.stderr)


@contextmanager
def ingest_progress(path: Path) -> Iterator[Callable[[int, int, int, int], None] | None]:
    """Progress of ingesting a `kdb diff` directory on stderr: a bar on a terminal, else a line before and after."""
    import time

    start = time.monotonic()
    if sys.stderr.isatty():
        with progress_bar() as (bar, task):
            yield bar_progress(bar, task)
    else:
        sys.stderr.write(f"kdb: ingesting {path} into a temporary snapshot…\n")
        yield None
    sys.stderr.write(f"kdb: ingested {path} in {time.monotonic() - start:.1f} s\n")
