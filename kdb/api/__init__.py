"""kdb's Python API: what the CLI does, as values instead of printed text.

    import kdb

    with kdb.open() as db:                     # --home/$KDB_HOME, or catalog=/store= for the shared home
        db.snapshots()                          # [Snapshot(tag=…, kernel_count=…, …)]: `kdb tags`
        db.ingest("/tmp/triton_cache", "rocm6.2", labels={"ci": "nightly"}, sass=False)
        rel = db.kernels("rocm6.2")             # a DuckDB relation over the `kernels` view
        rel.filter("vgpr_spill_count > 0").order("scratch_bytes DESC").fetchall()
        rel.df()                                # pandas (.pl(): polars, .arrow(): pyarrow), if installed
        k = db.kernel("rocm6.2", "2RPA4D")      # one kernel's facts: `kdb show TAG --kernel KEY`
        d = db.diff("rocm6.1", "rocm6.2", fail_on=["new-spills", "vgpr:+10%"])
        d.kernels[0].status, d.kernels[0].reason  # ranked worst first, as the table
        d.to_json()                             # byte for byte `kdb diff rocm6.1 rocm6.2 --format json`
        d.to_markdown(); d.to_csv(); d.to_html("upgrade.html")  # `--format …`, `kdb report … --output`
        d.exit_code                             # 0, 1 (a rule fired), 2 (untrusted), 8 (unknown figure)

In Jupyter a `Diff` and a `Kernel` display as small HTML tables. Errors are kdb.errors.KdbError subclasses
(`TagError` for an unknown tag, `UsageError` for a bad rule or key), each with its CLI `exit_code`.
These names are the whole public API; every other module of kdb is internal and may change.
"""

from __future__ import annotations

from kdb.api._db import Kdb, open
from kdb.api._results import Diff, Kernel, Snapshot

__all__ = ["Diff", "Kdb", "Kernel", "Snapshot", "open"]
