"""Turn one kernel folder's bytes into catalog rows: Triton JSON, and (per backend) code-object facts.

Called in worker processes during ingest and by `kdb reindex`; it never touches the store or catalog.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kdb.errors import ParseError
from kdb.parsers.triton_json import KernelMeta, parse_kernel_json, release_family


@dataclass
class FolderFile:
    rel: str
    kind: str
    data: bytes


@dataclass
class FolderAnalysis:
    kernel: dict[str, Any] | None = None  # a kernel_folders row
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # analysis table -> rows
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (path, stage, reason)

    def add(self, table: str, **row: Any) -> None:
        self.rows.setdefault(table, []).append(row)


# Tables filled from analysis (columns besides snapshot_id); `kdb reindex` rebuilds exactly these.
TABLE_COLUMNS: dict[str, list[str]] = {}
ANALYSIS_TABLES: tuple[str, ...] = tuple(TABLE_COLUMNS)


def kernel_row(cache_key: str, meta: KernelMeta) -> dict[str, Any]:
    version, source = meta.triton_version, "json"
    if version is None:
        version, source = release_family(cache_key), "folder-name"
    return {
        "cache_key": cache_key,
        "name": meta.name,
        "backend": meta.backend,
        "arch": meta.arch,
        "warp_size": meta.warp_size,
        "num_warps": meta.num_warps,
        "num_stages": meta.num_stages,
        "num_ctas": meta.num_ctas,
        "waves_per_eu": meta.waves_per_eu,
        "matrix_instr_nonkdim": meta.matrix_instr_nonkdim,
        "kpack": meta.kpack,
        "shared": meta.shared,
        "triton_version": version,
        "triton_version_source": source if version is not None else None,
        "hash": meta.hash,
        "metadata": json.dumps(meta.raw, sort_keys=True),
    }


def analyze_folder(cache_key: str, json_file: FolderFile, files: list[FolderFile]) -> FolderAnalysis:
    out = FolderAnalysis()
    try:
        meta = parse_kernel_json(json_file.data)
    except ParseError as exc:
        out.problems.append((json_file.rel, "json", str(exc)))
        # Still a kernel folder: keep a row under the file's name so the kernel is listed, facts NULL.
        stem = json_file.rel.rsplit("/", 1)[-1][: -len(".json")]
        out.kernel = {"cache_key": cache_key, "name": stem, "triton_version": release_family(cache_key),
                      "triton_version_source": "folder-name" if release_family(cache_key) else None}
        return out
    out.kernel = kernel_row(cache_key, meta)
    return out
