"""`kdb diff`: load two snapshots from the catalog (sides), pair their kernels (matching), compare them
(engine; mix_sources: instruction figures of one source on both sides) into the typed model (model), judge them
in one place (rules: verdicts, severity, --fail-on, trust), and render the model (render: table, markdown, csv, json). Owns deepdiff.

May import: kdb.errors, kdb.store, kdb.triton, kdb.render. Never kdb.ingest (a directory argument is
ingested by the CLI before the engine sees it) or the CLI.
"""
