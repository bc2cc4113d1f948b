"""What every role of the catalog (kdb/store/catalog/__init__.py: the writer, the queries, ...) needs of the one
connection the Catalog owns, named once: each role is a small object over that connection, so a consumer is
handed the role it uses, not the whole catalog."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kdb.store.catalog.connection import CatalogConnection, Table

T = TypeVar("T")


class CatalogRole:
    """One role over the catalog's connection: its DuckDB connection (`con`), and the connection's statement
    helpers and snapshot lookups."""

    def __init__(self, connection: CatalogConnection) -> None:
        self.connection = connection
        self.con = connection.con

    def write(self, body: Callable[[], T]) -> T:
        return self.connection.write(body)

    def insert(self, table: Table) -> None:
        self.connection.insert(table)

    def snapshot_id(self, tag: str) -> int | None:
        return self.connection.snapshot_id(tag)

    def require_snapshot(self, tag: str) -> int:
        return self.connection.require_snapshot(tag)

    def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
        return self.connection._one(sql, params)

    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return self.connection._dicts(sql, params)

    def _column_types(self, table: str) -> dict[str, str]:
        return self.connection._column_types(table)

    def _snapshot_tables(self) -> list[str]:
        return self.connection._snapshot_tables()

    def _folder_tables(self) -> list[str]:
        return self.connection._folder_tables()
