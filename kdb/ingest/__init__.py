"""Ingest: walk a cache directory, store its files, analyse its kernel folders in worker processes, and
record one snapshot in the catalog; `kdb reindex`; and the temporary snapshot of a directory given to
`kdb diff`.

May import: kdb.errors, kdb.store, kdb.analysis, kdb.triton. Never kdb.diff or the CLI.
"""
