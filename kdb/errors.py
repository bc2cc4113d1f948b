"""One exception tree for kdb; the CLI maps each class to a message and an exit code, once."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit statuses are a public contract (documented in README.md)."""

    OK = 0
    # `kdb diff`: a --fail-on rule fired. `kdb ingest`: completed, but some files were recorded as problems.
    FINDINGS = 1
    # Wrong usage, or a comparison that cannot be trusted.
    USAGE = 2
    # The input path is missing, not a directory, or holds no Triton kernel folders.
    BAD_INPUT = 3
    # A tag that does not exist, or exists already without --replace.
    TAG = 4
    # Store or catalog integrity problem found by `kdb verify`, or a corrupted blob refused.
    INTEGRITY = 5
    # Another kdb process holds the catalog.
    BUSY = 6
    # Anything else kdb could not do (I/O errors, a full disk).
    FAILURE = 7
    # `kdb diff`: no --fail-on rule fired, but one met a figure kdb could not compute (an unknown GPU, a
    # code object it could not read): the gate cannot pass on it. `--allow-unknown` turns this into 0.
    UNKNOWN = 8


class KdbError(Exception):
    """Base of every error kdb raises on purpose. Its message is one line, shown to the user."""

    exit_code: ExitCode = ExitCode.FAILURE


class UsageError(KdbError):
    exit_code = ExitCode.USAGE


class SqlRefused(UsageError):
    """A statement `kdb sql` will not run (anything but a read of the catalog); nothing was run."""


class InputError(KdbError):
    exit_code = ExitCode.BAD_INPUT


class TagError(KdbError):
    exit_code = ExitCode.TAG


class NotAppendable(TagError):
    """An append (kdb's Triton cache manager) met a snapshot made another way (`kdb ingest`): nothing joined it."""


class ToolchainError(KdbError):
    """A Triton release kdb has no interpreter for, or one it cannot make or run (`kdb toolchain`)."""

    exit_code = ExitCode.USAGE


class IntegrityError(KdbError):
    exit_code = ExitCode.INTEGRITY


class CatalogBusy(KdbError):
    exit_code = ExitCode.BUSY


class UntrustedComparison(KdbError):
    exit_code = ExitCode.USAGE


class CollectedMeanwhile(KdbError):
    """Shared home: blobs or folders an ingest relied on were garbage-collected by a concurrent `kdb gc`
    before it committed; nothing was recorded and the ingest is run again."""


class ParseError(KdbError):
    """Raised by parsers (pure functions of bytes) for input they cannot read. Ingest records it as a problem."""
