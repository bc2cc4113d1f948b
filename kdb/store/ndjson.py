"""Rows as newline-delimited JSON, the form the ingest's staging file loads through DuckDB's JSON reader.

Without duckdb on purpose: ingest workers encode their analysis rows with it, and importing duckdb cost
each worker process ~0.25 s and tens of MB of memory (measured: 16 workers' tree grew by ~0.3 GB PSS).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

encode = json.JSONEncoder(allow_nan=False, ensure_ascii=True, separators=(",", ":")).encode


def ndjson_rows(columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> bytes | None:
    """Rows as the newline-delimited JSON the staging loads read (a key a row lacks is null); None when a
    value has no JSON form (NaN)."""
    try:
        return "".join(encode({c: r.get(c) for c in columns}) + "\n" for r in rows).encode("ascii")
    except (ValueError, UnicodeEncodeError):
        return None
