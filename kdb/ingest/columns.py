"""Columns of every catalog table an ingest stages, defined once (tests/test_catalog_contract.py checks
them against the schema)."""

from __future__ import annotations

from typing import Any

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
# migration 012: the analysis's per-instruction-kind rows are stored as one row of lists per folder and
# source (the old tables are views over these). analysis row table -> (list table, key columns,
# [(row column, list column)]).
LIST_TABLES: dict[str, tuple[str, list[str], list[tuple[str, str]]]] = {
    "instr_mix_counts": (
        "instr_mix_lists",
        ["folder_digest", "source"],
        [("mnemonic", "mnemonics"), ("grp", "grps"), ("count", "counts")],
    ),
    "source_line_counts": (
        "source_line_lists",
        ["folder_digest", "source"],
        [("file", "files"), ("line", "lines"), ("grp", "grps"), ("count", "counts")],
    ),
    "instr_mix_loop_counts": (
        "instr_mix_loop_lists",
        ["folder_digest", "source"],
        [("loop_depth", "loop_depths"), ("mnemonic", "mnemonics"), ("grp", "grps"), ("count", "counts")],
    ),
}
# The analysis tables as the catalog stores them.
CATALOG_ANALYSIS_COLUMNS: dict[str, list[str]] = {}
for _table, _columns in TABLE_COLUMNS.items():
    if _table in LIST_TABLES:
        _name, _keys, _lists = LIST_TABLES[_table]
        CATALOG_ANALYSIS_COLUMNS[_name] = _keys + [plural for _, plural in _lists]
    else:
        CATALOG_ANALYSIS_COLUMNS[_table] = _columns


def compact_rows(rows: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """An analysis's rows as the catalog stores them: the rows of each LIST_TABLES table become one row per
    key (folder and source), its lists in the rows' order; every other table's rows are kept as they are."""
    out: dict[str, list[dict[str, Any]]] = {}
    for table, table_rows in rows.items():
        if table not in LIST_TABLES:
            out[table] = table_rows
            continue
        name, keys, lists = LIST_TABLES[table]
        grouped: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in table_rows:
            key = tuple(row[k] for k in keys)
            target = grouped.get(key)
            if target is None:
                target = grouped[key] = {**dict(zip(keys, key, strict=True)), **{plural: [] for _, plural in lists}}
            for column, plural in lists:
                target[plural].append(row[column])
        out[name] = list(grouped.values())
    return out


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
    **CATALOG_ANALYSIS_COLUMNS,
}
