"""Where kdb keeps things: the home directory, the writer lock, the content-addressed blob store (owns
zstandard), the DuckDB catalog (kdb.store.catalog and the ingest's staging file: own duckdb and every SQL
string outside schema/), and maintenance over both (rm, gc, verify, export, cat).

May import: kdb.errors (and the schema files). Nothing else of kdb.
"""
