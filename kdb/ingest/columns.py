"""Columns of every catalog table an ingest stages, defined once (tests/test_catalog_contract.py checks
them against the schema)."""

from __future__ import annotations

from kdb.analysis.folder import TABLE_COLUMNS

BLOB_COLUMNS = ["hash", "size", "stored_size"]
FOLDER_COLUMNS = ["folder_digest", "cache_key", "file_count", "bytes"]
FOLDER_FILE_COLUMNS = ["folder_digest", "name", "hash", "size", "kind"]
FOLDER_SET_COLUMNS = ["cache_key", "folder_digest"]  # the set digest is computed when the snapshot is written
TOP_FILE_COLUMNS = ["snapshot_id", "path", "hash", "size", "kind"]
KERNEL_COLUMNS = [
    "folder_digest",
    "cache_key",
    "name",
    "backend",
    "arch",
    "warp_size",
    "num_warps",
    "num_stages",
    "num_ctas",
    "waves_per_eu",
    "matrix_instr_nonkdim",
    "kpack",
    "shared",
    "triton_version",
    "triton_version_source",
    "hash",
    "metadata",
    "metadata_digest",
]
PROBLEM_COLUMNS = ["snapshot_id", "path", "cache_key", "stage", "reason"]
# migration 005: TorchInductor modules, kernel -> module links, autotune results (kdb/ingest/inductor.py)
INDUCTOR_MODULE_COLUMNS = [
    "snapshot_id",
    "path",
    "kernel_name",
    "heuristic",
    "def_line",
    "size_hints",
    "triton_meta",
    "inductor_meta",
    "configs",
    "kernel_perf_ms",
]
KERNEL_MODULE_COLUMNS = ["snapshot_id", "cache_key", "module_path", "kernel_name", "link", "detail"]
AUTOTUNE_COLUMNS = [
    "snapshot_id",
    "source",
    "path",
    "entry",
    "kernel_name",
    "module_path",
    "key",
    "config",
    "time_ms",
    "timings",
    "tuning_ms",
    "is_best",
    "found_by_coordesc",
    "triton_cache_hash",
    "cache_key",
    "link",
    "link_detail",
]
# migration 007: the ingested directory's file metadata (the host and directory are the snapshot's)
FILE_STAT_COLUMNS = ["path", "size", "mtime_ns", "ino", "hash"]
# Rows an ingest stages (kdb/store/staging.py) before one transaction moves them into the catalog.
STAGED_COLUMNS: dict[str, list[str]] = {
    "blobs": BLOB_COLUMNS,
    "folders": FOLDER_COLUMNS,
    "folder_files": FOLDER_FILE_COLUMNS,
    "folder_sets": FOLDER_SET_COLUMNS,
    "top_files": TOP_FILE_COLUMNS,
    "kernel_folders": KERNEL_COLUMNS,
    "file_problems": PROBLEM_COLUMNS,
    "inductor_modules": INDUCTOR_MODULE_COLUMNS,
    "kernel_modules": KERNEL_MODULE_COLUMNS,
    "autotune_results": AUTOTUNE_COLUMNS,
    "file_stats": FILE_STAT_COLUMNS,
    **TABLE_COLUMNS,
}
