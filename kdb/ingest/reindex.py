"""`kdb reindex`: recompute the analysis of stored snapshots from their blobs."""

from __future__ import annotations

from kdb.analysis.folder import analyze_folder
from kdb.analysis.model import DEFAULT_OPTIONS, AnalysisOptions, FolderFile
from kdb.ingest.columns import CATALOG_ANALYSIS_COLUMNS, KERNEL_COLUMNS, compact_rows
from kdb.ingest.snapshot import FLUSH_CHECK_EVERY, flush, flush_if_large
from kdb.ingest.walker import WalkedFile, kernel_json
from kdb.store.blobs import BlobStore
from kdb.store.catalog import Catalog, Table
from kdb.store.home import Home
from kdb.store.staging import Staging

# Tables `kdb reindex` rebuilds for every kernel folder it analyses.
REINDEX_COLUMNS: dict[str, list[str]] = {
    "kernel_folders": KERNEL_COLUMNS,
    **CATALOG_ANALYSIS_COLUMNS,
}


def reindex(
    home: Home, tags: list[str] | None, *, lock_wait_s: float = 600.0, options: AnalysisOptions = DEFAULT_OPTIONS
) -> dict[str, int]:
    """Recompute the analysis of every kernel folder of the given snapshots (all when None) from the stored
    blobs. Rows are spilled to the staging file as an ingest's are (memory stays flat), then swapped into
    the catalog in one transaction."""
    store = home.store
    done: dict[str, int] = {}
    with home.writer(lock_wait_s), Catalog.open(home.catalog, wait_s=lock_wait_s) as catalog:
        tags = tags or [s["tag"] for s in catalog.queries.list_snapshots()]
        digests: dict[str, str] = {}  # folder digest -> cache key, each analysed once
        for tag in tags:
            folders = catalog.queries.kernel_folders_of(tag)
            digests.update((digest, key) for key, digest in folders)
            done[tag] = len(folders)
        staging = Staging(home.staging_path, catalog.staging_schema(REINDEX_COLUMNS))
        try:
            tables = {name: Table(name, columns) for name, columns in REINDEX_COLUMNS.items()}
            for analysed, (digest, cache_key) in enumerate(sorted(digests.items()), 1):
                _analyse(catalog, store, digest, cache_key, options, tables)
                if analysed % FLUSH_CHECK_EVERY == 0:
                    flush_if_large(staging, tables)
            flush(staging, tables)
            staging.close()
            catalog.writer.replace_folder_rows(sorted(digests), staging.path, list(REINDEX_COLUMNS))
        finally:
            staging.remove()
    return done


def _analyse(
    catalog: Catalog, store: BlobStore, digest: str, cache_key: str, options: AnalysisOptions, tables: dict[str, Table]
) -> None:
    files = [
        FolderFile(f"{cache_key}/{r['name']}", r["kind"], store.get(r["hash"], r["size"]))
        for r in catalog.queries.folder_files(digest)
    ]
    walked = [WalkedFile(f.rel, "", len(f.data), f.kind, cache_key) for f in files]
    json_file = kernel_json(walked)
    if json_file is None:
        return
    result = analyze_folder(cache_key, digest, next(f for f in files if f.rel == json_file.rel), files, options)
    if result.kernel is not None:
        tables["kernel_folders"].add(**result.kernel)
    for table, rows in compact_rows(result.rows).items():
        for row in rows:
            tables[table].add(**row)
