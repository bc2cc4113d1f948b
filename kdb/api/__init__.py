"""kdb's Python API: what the CLI does, as values instead of printed text.

    import kdb

    with kdb.open() as db:                     # --home/$KDB_HOME, or catalog=/store= for the shared home
        db.snapshots()                          # [Snapshot(tag=…, kernel_count=…, …)]: `kdb tags`
        db.ingest("/tmp/triton_cache", "rocm6.2", labels={"ci": "nightly"}, sass=False)
        rel = db.kernels("rocm6.2")             # a DuckDB relation over the `kernels` view
        rel.filter("vgpr_spill_count > 0").order("scratch_bytes DESC").fetchall()
        rel.df()                                # pandas: pip install 'kdb[notebook]' (.pl(): polars, .arrow(): pyarrow)
        k = db.kernel("rocm6.2", "2RPA4D")      # one kernel's facts: `kdb show TAG --kernel KEY`
        d = db.diff("rocm6.1", "rocm6.2", fail_on=["new-spills", "vgpr:+10%"])
        d.kernels[0].status, d.kernels[0].reason  # ranked worst first, as the table
        d.to_json()                             # byte for byte `kdb diff rocm6.1 rocm6.2 --format json`
        d.to_markdown(); d.to_csv(); d.to_html("upgrade.html")  # `--format …`, `kdb report … --output`
        d.exit_code                             # 0, 1 (a rule fired), 2 (untrusted), 8 (unknown figure)

In Jupyter a `Diff` and a `Kernel` display as small HTML tables.

Errors: every error kdb raises on purpose is a `KdbError`, one line of text naming this API's arguments (never
the CLI's options), with the status the CLI would exit with (`exit_code`, an `ExitCode`):

    UsageError           2  a bad argument: an unknown or empty rule, a tag that breaks the tag rules, a key
                            naming no kernel or several, a home that is not a directory, a closed Kdb
    UntrustedComparison  2  a side's kernels carry an identity from an older kdb (`kdb reindex` first)
    InputError           3  ingest: the path is missing, not a directory, or holds no Triton kernel folder
    TagError             4  an unknown tag, or ingest of a tag that exists (without replace=True)
    IntegrityError       5  a stored blob is damaged or missing
    CatalogBusy          6  another kdb process held the catalog for longer than `wait`
    KdbError             7  anything else kdb could not do (the base class: catch it to catch them all)

    try:
        d = db.diff("rocm6.1", "rocm6.2", fail_on="new-spills,vgpr:+10%")
    except kdb.api.TagError as e:
        print(e, e.exit_code)

A comparison that cannot be trusted is a result, not an error (`Diff.trust_problem`, `exit_code` 2).
These names are the whole public API; every other module of kdb is internal and may change.
"""

from __future__ import annotations

import typing as _typing

from kdb.errors import (
    CatalogBusy,
    ExitCode,
    InputError,
    IntegrityError,
    KdbError,
    TagError,
    UntrustedComparison,
    UsageError,
)

if _typing.TYPE_CHECKING:
    from kdb.api._db import Kdb, open
    from kdb.api._results import Diff, Kernel, Snapshot

# Imported on first use (PEP 562): `import kdb.api`, which every CLI command pays for, reads no catalog module,
# no diff model and no ingest; the CLI imports the parts a command runs.
_LAZY = {
    "Kdb": "kdb.api._db",
    "open": "kdb.api._db",
    "Diff": "kdb.api._results",
    "Kernel": "kdb.api._results",
    "Snapshot": "kdb.api._results",
}


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CatalogBusy",
    "Diff",
    "ExitCode",
    "InputError",
    "IntegrityError",
    "Kdb",
    "KdbError",
    "Kernel",
    "Snapshot",
    "TagError",
    "UntrustedComparison",
    "UsageError",
    "open",
]
