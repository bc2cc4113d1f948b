"""SQL a user typed (`kdb sql`, `kdb shell`): it may read the catalog and nothing else.

Two walls, each enough alone for what it covers:
- the connection: its own, opened read-only with external access off (no host file, no network, no
  ATTACH), extension auto-install and auto-load off and the configuration locked, all in the connect
  config so they hold before any user text is parsed. A shared catalog is attached by kdb first (its
  extensions loaded, its data path the one directory still readable), then locked the same way;
- the statements: DuckDB's own parser splits the text and types every statement; only reads run
  (SELECT/WITH/VALUES/FROM-first, DESCRIBE, SHOW, SUMMARIZE, read-only PRAGMAs, which DuckDB turns into
  SELECTs, and EXPLAIN of those), and no function that reaches past the catalog (the PostgreSQL and
  DuckLake extensions' functions of a shared catalog, SQL run from a string). Anything else is refused,
  by name, before any statement runs.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import duckdb

from kdb.errors import SqlRefused, UsageError
from kdb.store.catalog import lake
from kdb.store.catalog.connection import CatalogConnection, connect_file, literal
from kdb.store.home import SharedLocation

# Set at connect time: in force before any user text, and unchangeable after (lock_configuration).
GUARD_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}
# Functions a SELECT may not call: the shared catalog's extensions open their own connections (to any
# PostgreSQL server) and run DuckLake maintenance (deleting files); the others run SQL hidden in a string,
# out of the classifier's sight.
REFUSED_FUNCTION_PREFIXES = ("postgres_", "ducklake_")
REFUSED_FUNCTIONS = frozenset({"query", "query_table", "json_execute_serialized_sql", "checkpoint", "force_checkpoint"})
SAVE_HINT = "use `kdb sql … --format csv > FILE` to save a result"
READ_ONLY_HINT = "kdb sql only reads the catalog"
WORD = re.compile(r"\w+|\S")


def _refused(what: str, hint: str = "") -> SqlRefused:
    return SqlRefused(f"refused {what}: {READ_ONLY_HINT}{f' ({hint})' if hint else ''}")


def _denied(exc: duckdb.Error) -> SqlRefused:
    """What external access off stopped (a host file, a directory, an extension), as one line."""
    text = str(exc).splitlines()[0].removeprefix("Permission Error: ")
    return SqlRefused(f"refused: {text} ({READ_ONLY_HINT}: no host files, no network)")


def _tokens(text: str) -> list[tuple[int, str]]:
    """(offset, first word or character) of each token DuckDB's tokenizer finds (comments are not tokens)."""
    out = []
    for pos, _ in duckdb.tokenize(text):
        word = WORD.match(text, pos)
        out.append((pos, word.group(0) if word else ""))
    return out


def _statement_name(statement: duckdb.Statement) -> str:
    """The statement as a user would name it: its first keyword (`USE`, `CHECKPOINT`, `INSTALL`), else its type."""
    words = [w.upper() for _, w in _tokens(statement.query)[:2]] if statement.query.strip() else []
    if words and words[0] == "FORCE" and len(words) > 1:
        return f"FORCE {words[1]}"
    if words and words[0].isalpha() and words[0] != "WITH":
        return words[0]
    return statement.type.name.replace("_", " ")


def _explained(text: str) -> str:
    """The statement an EXPLAIN [ANALYZE] [(options)] text explains."""
    tokens = _tokens(text)
    i = 1  # past EXPLAIN
    while i < len(tokens):
        word = tokens[i][1].upper()
        if word in ("ANALYZE", "ANALYSE"):
            i += 1
        elif word == "(":
            depth = 0
            while i < len(tokens):
                depth += {"(": 1, ")": -1}.get(tokens[i][1], 0)
                i += 1
                if depth == 0:
                    break
        else:
            return text[tokens[i][0] :]
    return ""


def _functions(node: Any) -> Iterator[str]:
    """Every function name in a serialised statement (json_serialize_sql): scalar, aggregate, window, table."""
    if isinstance(node, dict):
        name = node.get("function_name")
        if isinstance(name, str):
            yield name.lower()
        for value in node.values():
            yield from _functions(value)
    elif isinstance(node, list):
        for value in node:
            yield from _functions(value)


def _check_select(con: duckdb.DuckDBPyConnection, text: str) -> None:
    if not text.strip():  # DuckDB made it up (the query of a PIVOT without IN): nothing to check it against
        raise _refused("a generated query", "a PIVOT names its columns: PIVOT … ON col IN (values)")
    row = con.execute("SELECT json_serialize_sql(?)", [text]).fetchone()
    tree = json.loads(row[0]) if row else {"error": True}
    if tree.get("error"):
        raise _refused("a statement DuckDB cannot serialise for checking")
    for name in _functions(tree):
        if name.startswith(REFUSED_FUNCTION_PREFIXES) or name in REFUSED_FUNCTIONS:
            raise _refused(f"function {name}()")


def _check(con: duckdb.DuckDBPyConnection, statement: duckdb.Statement, depth: int = 0) -> None:
    kind = statement.type
    if kind == duckdb.StatementType.SELECT:  # also DESCRIBE, SHOW, SUMMARIZE and the read-only PRAGMAs
        _check_select(con, statement.query)
        return
    if kind == duckdb.StatementType.EXPLAIN and depth == 0:
        inner = _parse(con, _explained(statement.query))
        if len(inner) != 1:
            raise _refused("EXPLAIN of anything but one query")
        try:
            _check(con, inner[0], depth + 1)
        except SqlRefused as exc:
            raise SqlRefused(f"EXPLAIN: {exc}") from None
        return
    if not statement.query.strip():  # DuckDB made it up: a PIVOT without IN creates an ENUM type first
        raise _refused(f"{statement.type.name} statement", "a PIVOT names its columns: PIVOT … ON col IN (values)")
    hint = SAVE_HINT if kind in (duckdb.StatementType.COPY, duckdb.StatementType.EXPORT) else ""
    raise _refused(f"{_statement_name(statement)} statement", hint)


def _parse(con: duckdb.DuckDBPyConnection, sql: str) -> list[duckdb.Statement]:
    try:
        return list(con.extract_statements(sql))
    except duckdb.PermissionException as exc:  # IMPORT DATABASE reads files while parsing
        raise _denied(exc) from None
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {str(exc).splitlines()[0]}") from None


def checked_statements(con: duckdb.DuckDBPyConnection, sql: str) -> list[duckdb.Statement]:
    """The statements of `sql`, each one a read; SqlRefused (naming the first that is not) otherwise."""
    statements = _parse(con, sql)
    if not statements:
        raise UsageError("no SQL statement given")
    for statement in statements:
        _check(con, statement)
    return statements


class UserSql:
    """A guarded connection to the catalog for SQL a user wrote (see the module docstring)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    @classmethod
    @contextmanager
    def open(cls, where: Path | SharedLocation, *, wait_s: float = 10.0) -> Iterator[UserSql]:
        """The catalog at `where`; a local home without one yet answers from an empty catalog of the same schema."""
        if isinstance(where, SharedLocation):
            con = _connect_shared(where)
            try:
                CatalogConnection(con, where.url, True, shared=True)._check_migrated()
                yield cls(con)
            finally:
                con.close()
            return
        with ExitStack() as stack:
            path = where
            if not path.exists():
                path = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kdb-empty-"))) / "catalog.duckdb"
                CatalogConnection._create(path)
            con = connect_file(path, read_only=True, wait_s=wait_s, config=GUARD_CONFIG)
            try:
                CatalogConnection(con, where, True)._check_migrated()
                yield cls(con)
            finally:
                con.close()

    def run(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run every statement of `sql` (all checked first) and return the last one's columns and rows."""
        statements = checked_statements(self.con, sql)
        columns: list[str] = []
        rows: list[tuple[Any, ...]] = []
        for statement in statements:
            try:
                cur = self.con.execute(statement)
                columns = [d[0] for d in cur.description] if cur.description else []
                rows = cur.fetchall() if cur.description else []
            except duckdb.PermissionException as exc:
                raise _denied(exc) from None
            except duckdb.Error as exc:
                raise UsageError(f"SQL error: {str(exc).splitlines()[0]}") from None
        return columns, rows


def _connect_shared(where: SharedLocation) -> duckdb.DuckDBPyConnection:
    """The shared catalog attached read-only by kdb, then external access off (its Parquet files' directory
    the one exception) and the configuration locked, before any user text."""
    con = lake.connect_lake(where.url, where.data_path, read_only=True)
    try:
        con.execute(f"SET allowed_directories = [{literal(_directory(where.data_path))}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def _directory(path: Path) -> str:
    return str(path).rstrip("/") + "/"


# The DuckDB shell (`kdb shell`): the same settings, then its safe mode, which also refuses the dot
# commands that write files or run programs (.output, .once, .shell, .system, .open, .read, .import, .log)
# and locks the configuration. The user's ~/.duckdbrc is not read: it would run before the lock.
SHELL_GUARD = (
    "SET autoinstall_known_extensions = false; SET autoload_known_extensions = false; "
    "SET enable_external_access = false;"
)


def shell_args(catalog: Path) -> list[str]:
    """Arguments for the `duckdb` shell (after the program name) that open the local catalog guarded.
    There are none for a shared catalog: the one way to let DuckDB read its Parquet files with external
    access off (allowed_directories) lets COPY overwrite them too, and its PostgreSQL extension's functions
    connect to any server; `kdb sql` refuses those statements, the shell cannot."""
    return ["-no-init", "-readonly", "-cmd", SHELL_GUARD, "-cmd", ".safe_mode", str(catalog)]
