"""Issue 24: `kdb sql` and `kdb shell` only read the catalog. Hostile statements are refused (one line, exit 2)
and change nothing: the catalog stays byte-identical, no file appears, no network connection is tried
(strace watches every system call of the real CLI); legitimate queries answer right in every format;
every package kdb imports is declared, and `pip install .` into an empty venv runs every command."""

from __future__ import annotations

import ast
import csv
import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import jsonschema
import pytest
from deepdiff import DeepDiff
from helpers import Result, duckdb_shell, kdb
from pgserver import PgServer, find_bin_dir

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = "t3.1.0-gfx90a"
FORMATS = ("table", "csv", "json", "markdown")
# Every syscall that creates, changes or removes a name in the file system (strace's %file class also
# holds the read-only ones: stat, access, readlink, open for reading).
MUTATING_CALLS = re.compile(
    r"^\d+\s+(?:<\.\.\.\s+)?(mkdir|mkdirat|rename|renameat|renameat2|unlink|unlinkat|rmdir|link|linkat|symlink|"
    r"symlinkat|truncate|creat|mknod|mknodat|chmod|fchmodat|chown|lchown|fchownat|utimes|utimensat|setxattr|"
    r"lsetxattr|removexattr|lremovexattr)\("
)
OPEN_CALL = re.compile(r"^\d+\s+(?:open|openat|openat2)\((?:AT_FDCWD|\d+), \"([^\"]*)\", ([A-Z_|]+)")
WRITE_FLAGS = re.compile(r"\bO_(WRONLY|RDWR|CREAT|TRUNC|APPEND)\b")
INET = re.compile(r"AF_INET6?\b")


@pytest.fixture(scope="module")
def home(unpack_snapshot, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home holding one real snapshot, tagged `a`."""
    root = tmp_path_factory.mktemp("sql-home")
    proc = _cli(root, "ingest", str(unpack_snapshot(SNAPSHOT)), "--tag", "a", "-q")
    assert proc.returncode == 0, proc.stderr
    return root


def _env() -> dict[str, str]:
    # no bytecode written by the interpreter itself: every file write in a trace is kdb's or DuckDB's
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"}


def _cli(home: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "kdb", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
        cwd=home,
    )


def _strace() -> str:
    exe = shutil.which("strace")
    assert exe, "strace is needed to watch for file writes and connections (.ci/run installs it)"
    return exe


def traced(log: Path) -> tuple[str, ...]:
    """Run under strace: every process and thread, every file and network system call, into `log`."""
    return (_strace(), "-f", "-qq", "-e", "trace=%file,%network,creat", "-o", str(log))


def trace_findings(text: str) -> list[str]:
    """Lines of a trace that write the file system (outside /dev) or touch an internet socket."""
    found = []
    for line in text.splitlines():
        opened = OPEN_CALL.match(line)
        writes = opened is not None and WRITE_FLAGS.search(opened.group(2)) and not opened.group(1).startswith("/dev/")
        # the DuckDB shell calls unlink("") after each statement (no name, nothing removed)
        mutates = MUTATING_CALLS.match(line) and not re.search(r'unlink\(""\)\s+= -1 ENOENT', line)
        if INET.search(line) or mutates or writes:
            found.append(line)
    return found


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hostile_statements(catalog: Path, targets: Path) -> list[str]:
    t = str(targets)
    c = str(catalog)
    return [
        # file writes
        f"COPY (SELECT 1) TO '{t}/x.csv'",
        f"COPY kernels TO '{c}'",
        f"COPY kernels TO '{t}/k.parquet' (FORMAT parquet)",
        f"COPY (SELECT * FROM kernels) TO '{t}/k.json' (FORMAT json)",
        f"EXPORT DATABASE '{t}/exported'",
        f"EXPORT DATABASE '{t}/exported_parquet' (FORMAT parquet)",
        f"COPY kernels FROM '{t}/in.csv'",
        # other databases
        f"ATTACH '{c}' AS rw (READ_WRITE)",
        f"ATTACH '{t}/new.duckdb' AS fresh",
        f"ATTACH '{t}/made.duckdb' AS made; CREATE TABLE made.t AS SELECT 1",
        "ATTACH ':memory:' AS mem",
        "ATTACH 'https://example.com/remote.duckdb' AS remote",
        "DETACH catalog",
        "USE system",
        # writes to the catalog (or any database)
        "CREATE TABLE t (a INTEGER)",
        "CREATE TEMP TABLE t AS SELECT * FROM kernels",
        "CREATE VIEW v AS SELECT 1",
        "CREATE MACRO m(x) AS x + 1",
        "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 'v')",
        "INSERT INTO kernels SELECT * FROM kernels",
        "WITH k AS (SELECT * FROM kernels) INSERT INTO kernels SELECT * FROM k",
        "UPDATE kernels SET tag = 'b'",
        "DELETE FROM kernels",
        "TRUNCATE kernels",
        "DROP TABLE kernels",
        "ALTER TABLE kernels RENAME TO gone",
        "COMMENT ON TABLE kernels IS 'x'",
        # extensions
        "INSTALL httpfs",
        "FORCE INSTALL httpfs FROM 'http://127.0.0.1:9/repo'",
        "LOAD httpfs",
        f"LOAD '{t}/evil.duckdb_extension'",
        "UPDATE EXTENSIONS",
        # settings and upkeep
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "RESET enable_external_access",
        "SET custom_extension_repository = 'http://127.0.0.1:9/repo'",
        "SET VARIABLE x = 1",
        "PRAGMA enable_profiling",
        f"PRAGMA profiling_output = '{t}/profile.json'",
        "PRAGMA memory_limit = '1GB'",
        "CHECKPOINT",
        "FORCE CHECKPOINT",
        "VACUUM",
        "BEGIN TRANSACTION",
        "PREPARE p AS DELETE FROM kernels",
        # host files and the network, through table functions
        "CALL read_text('/etc/hostname')",
        "SELECT content FROM read_text('/etc/hostname')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_parquet('/usr/lib/x.parquet')",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM read_blob('/etc/hostname')",
        "SELECT * FROM read_json('/etc/os-release')",
        "FROM '/etc/passwd'",
        "SELECT * FROM sniff_csv('/etc/passwd')",
        "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')",
        "SELECT * FROM read_parquet('https://example.com/x.parquet')",
        "IMPORT DATABASE '/etc'",
        "SELECT * FROM query('SELECT * FROM read_text(''/etc/hostname'')')",
        # hidden: several statements, comments, odd casing, EXPLAIN ANALYZE, generated statements
        "SELECT 1; DROP TABLE kernels",
        f"SELECT 1 AS a; COPY kernels TO '{t}/m.csv'",
        "-- a comment\nDROP TABLE kernels",
        f"/* x */ CoPy (SELECT 1) To '{t}/c.csv'",
        "/* SELECT */ dElEtE FROM kernels",
        f"SELECT 1 /* ; */ ; aTtAcH '{t}/z.duckdb' AS z",
        f"EXPLAIN ANALYZE COPY kernels TO '{t}/e.csv'",
        "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
        f"EXPLAIN /* c */ AnAlYzE /* d */ COPY kernels TO '{t}/e2.csv'",
        "PIVOT kernels ON arch",
        "SELECT * FROM checkpoint()",
    ]


def _check_refusals(home: Path, targets: Path, run_one) -> None:
    """Run every hostile statement through `run_one(sql) -> (exit code, stdout, stderr)`: each refused with
    one line and exit 2; afterwards the catalog byte-identical, the home as it was, the targets' folder empty."""
    catalog = home / "catalog.duckdb"
    statements = hostile_statements(catalog, targets)
    assert len(statements) >= 40
    before_hash, before_home = _sha256(catalog), _listing(home)
    refused: list[str] = []
    for sql in statements:
        code, out, err = run_one(sql)
        lines = err.splitlines()
        assert code == 2, (sql, code, err)
        assert len(lines) == 1 and lines[0].startswith("kdb: error: "), (sql, err)
        assert "Traceback" not in err and out == "", (sql, out)
        refused.append(lines[0])
    assert _sha256(catalog) == before_hash
    assert _listing(home) == before_home
    assert list(targets.iterdir()) == []
    # each names what it refused: the statement, the function, or what external access off stopped
    assert all(re.search(r"refused|SQL error", line) for line in refused), refused
    assert sum("refused" in line for line in refused) >= 60, refused
    assert "refused COPY statement" in refused[0] and "--format csv > FILE" in refused[0]
    assert "refused DROP statement" in refused[statements.index("-- a comment\nDROP TABLE kernels")]
    hidden = f"SELECT 1 /* ; */ ; aTtAcH '{targets}/z.duckdb' AS z"
    assert "refused ATTACH statement" in refused[statements.index(hidden)]
    assert "refused USE statement" in refused[statements.index("USE system")]
    assert "file system operations are disabled" in refused[statements.index("SELECT * FROM glob('/etc/*')")]


@pytest.mark.slow  # ~9 s of CPU (bench/test_suite.py)
def test_hostile_statements_are_refused_and_change_nothing(home: Path, tmp_path: Path, capsys):
    """The fast tier: the CLI in this process (`kdb.cli.run`, what `kdb` runs)."""
    targets = tmp_path / "targets"
    targets.mkdir()

    def run_one(sql: str) -> tuple[int, str, str]:
        # `--` so that a statement starting with a comment (`-- …`) is not read as an option
        r = kdb(capsys, home, "sql", "--format", "csv", "--", sql)
        return r.code, r.out, r.err

    _check_refusals(home, targets, run_one)


@pytest.mark.strace  # (so: slow) a process per statement
@pytest.mark.strace
def test_hostile_statements_through_the_real_cli_write_nothing_and_connect_nowhere(home: Path, tmp_path: Path):
    """Each statement in its own `python -m kdb sql` process under strace: besides the refusals, no file
    created, written, renamed or removed anywhere, and no internet socket touched (DuckDB's extensions are
    C++: only the system calls tell)."""
    targets = tmp_path / "targets"
    targets.mkdir()
    logs: list[Path] = []

    def run_one(sql: str) -> tuple[int, str, str]:
        log = tmp_path / f"trace-{len(logs)}.log"
        logs.append(log)
        proc = _cli(home, "sql", "--format", "csv", "--", sql, prefix=traced(log))
        text = log.read_text()
        assert "catalog.duckdb" in text, "the trace holds the kdb process"
        assert trace_findings(text) == [], sql
        return proc.returncode, proc.stdout, proc.stderr

    _check_refusals(home, targets, run_one)
    assert len(logs) >= 40


@pytest.mark.strace
@pytest.mark.strace
def test_the_trace_check_sees_writes_and_connections(tmp_path: Path):
    """The checker above can fail: a process that creates a file and one that connects are both caught."""
    log = tmp_path / "write.log"
    code = f"open({str(tmp_path / 'made.txt')!r}, 'w').write('x')"
    subprocess.run([*traced(log), sys.executable, "-c", code], check=True, env=_env())
    assert any("made.txt" in line for line in trace_findings(log.read_text()))
    log = tmp_path / "connect.log"
    code = "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\nexcept OSError:\n    pass"
    subprocess.run([*traced(log), sys.executable, "-c", code], check=True, env=_env())
    assert any("connect(" in line for line in trace_findings(log.read_text()))
    log = tmp_path / "mkdir.log"
    subprocess.run([*traced(log), "mkdir", str(tmp_path / "d")], check=True, env=_env())
    assert any("mkdir" in line for line in trace_findings(log.read_text()))


@pytest.mark.slow  # outside the inner loop: 4 s on 2 cores (bench/test_suite.py)
def test_user_sql_connection_is_locked(home: Path, capsys):
    """The settings hold on the connection user SQL runs on, and only the catalog is attached."""
    r = kdb(
        capsys,
        home,
        "sql",
        "SELECT current_setting('enable_external_access') AS ext, current_setting('lock_configuration') AS locked, "
        "current_setting('autoinstall_known_extensions') AS autoinstall, "
        "current_setting('autoload_known_extensions') AS autoload, "
        "(SELECT list(database_name ORDER BY database_name) FROM duckdb_databases() WHERE NOT internal) AS dbs, "
        "(SELECT bool_and(readonly) FROM duckdb_databases() WHERE NOT internal) AS ro",
        "--format",
        "json",
    )
    assert r.code == 0, r.err
    assert r.json() == [
        {"ext": False, "locked": True, "autoinstall": False, "autoload": False, "dbs": ["catalog"], "ro": True}
    ]


# -- legitimate queries, every format ---------------------------------------------------------------------


def _rows(out: str, fmt: str) -> list[dict[str, str]]:
    """The rows of kdb's output in `fmt`, as text cells by column name (JSON: its values)."""
    if fmt == "json":
        return json.loads(out)
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(out)))
    if fmt == "markdown":
        lines = out.splitlines()
        assert lines[1].startswith("|---")

        def cells(line: str) -> list[str]:
            return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]

        names = cells(lines[0])
        return [dict(zip(names, cells(line), strict=True)) for line in lines[2:]]
    # table: columns apart by two spaces or more, the header first, no note when every row is shown
    lines = [line for line in out.splitlines() if line.strip()]
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=  ))\S", lines[0])]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [lines[0][a:b].strip() for a, b in bounds]
    return [dict(zip(names, [line[a:b].strip() for a, b in bounds], strict=True)) for line in lines[1:]]


def _query(capsys, home: Path, sql: str, fmt: str) -> list[dict]:
    columns = os.environ.pop("COLUMNS", None)  # a table fitted to a width would elide the cells read back here
    try:
        r: Result = kdb(capsys, home, "sql", "--format", fmt, "--max-rows", "0", "--", sql)
    finally:
        if columns is not None:
            os.environ["COLUMNS"] = columns
    assert r.code == 0 and r.err == "", (sql, fmt, r.err)
    return _rows(r.out, fmt)


def _oracle(home: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
@pytest.mark.parametrize("fmt", FORMATS)
def test_legitimate_queries_answer_right(home: Path, capsys, fmt: str):
    text = fmt != "json"  # every format but JSON shows cells as text
    # timestamps with and without time zone, and now()
    [row] = _query(
        capsys,
        home,
        "SELECT TIMESTAMP '2024-05-06 07:08:09' AS t, TIMESTAMPTZ '2024-05-06 07:08:09+02' AS tz, now() AS n",
        fmt,
    )
    assert _instant(row["t"]) == datetime(2024, 5, 6, 7, 8, 9) and _instant(row["t"]).tzinfo is None
    assert _instant(row["tz"]) == datetime(2024, 5, 6, 5, 8, 9, tzinfo=UTC)
    assert abs(_instant(row["n"]) - datetime.now(UTC)) < timedelta(minutes=5)
    # lists, structs, maps
    [row] = _query(capsys, home, "SELECT [1, 2, 3] AS l, {'a': 1, 'b': 'x'} AS s, MAP {'k': 1, 'j': 2} AS m", fmt)
    assert row == (
        {"l": "1, 2, 3", "s": "a=1, b=x", "m": "k=1, j=2"}
        if text
        else {"l": [1, 2, 3], "s": {"a": 1, "b": "x"}, "m": {"k": 1, "j": 2}}
    )
    # JSON functions and regular expressions
    [row] = _query(
        capsys,
        home,
        """SELECT json_extract_string('{"a": {"b": "v"}}', '$.a.b') AS v, json_array_length('[1, 2, 3]') AS n, """
        "regexp_extract('gfx942', '[0-9]+') AS digits, regexp_matches('gfx90a', '^gfx9') AS amd",
        fmt,
    )
    assert row == (
        {"v": "v", "n": "3", "digits": "942", "amd": "True"}
        if text
        else {"v": "v", "n": 3, "digits": "942", "amd": True}
    )
    # window functions over the catalog, against DuckDB reading the file itself
    sql = (
        "SELECT cache_key, row_number() OVER (ORDER BY cache_key) AS rn, "
        "count(*) OVER (PARTITION BY arch) AS per_arch FROM kernels ORDER BY cache_key"
    )
    want = _oracle(home, sql)
    assert len(want) > 10
    got = _query(capsys, home, sql, fmt)
    assert [(r["cache_key"], int(r["rn"]), int(r["per_arch"])) for r in got] == want
    # SUMMARIZE kernels: one row per column, its type and count as DuckDB gives them
    want = [(name, kind, count) for name, kind, *_, count, _ in _oracle(home, "SUMMARIZE kernels")]
    got = _query(capsys, home, "SUMMARIZE kernels", fmt)
    assert [(r["column_name"], r["column_type"], int(r["count"])) for r in got] == want
    # DESCRIBE, SHOW, read-only PRAGMAs, EXPLAIN, VALUES, FROM-first, CTEs, several statements
    assert {"kernels", "snapshots"} <= {r["name"] for r in _query(capsys, home, "SHOW TABLES", fmt)}
    assert "cache_key" in {r["column_name"] for r in _query(capsys, home, "DESCRIBE kernels", fmt)}
    assert "cache_key" in {r["name"] for r in _query(capsys, home, "PRAGMA table_info('kernels')", fmt)}
    assert [r["library_version"] for r in _query(capsys, home, "PRAGMA version", fmt)] == [f"v{duckdb.__version__}"]
    assert _query(capsys, home, "PRAGMA database_size", fmt)[0]["database_name"] == "catalog"
    assert _query(capsys, home, "EXPLAIN SELECT count(*) FROM kernels", fmt)
    n = _oracle(home, "SELECT count(*) FROM kernels")[0][0]
    for sql in (
        "FROM kernels SELECT count(*) AS n",
        "WITH k AS (SELECT * FROM kernels) SELECT count(*) AS n FROM k",
        "SELECT 1 AS n; SELECT count(*) AS n FROM kernels",
        "-- counted\nSELECT /* all */ count(*) AS n FROM kernels;",
    ):
        assert [int(r["n"]) for r in _query(capsys, home, sql, fmt)] == [n], sql
    assert [int(r["col0"]) for r in _query(capsys, home, "VALUES (1), (2)", fmt)] == [1, 2]


@pytest.mark.strace
@pytest.mark.strace
def test_the_duckdb_shell_is_guarded(home: Path, tmp_path: Path):
    """`kdb shell` runs the real duckdb-cli 1.5.5 read-only, external access off, configuration locked, in
    safe mode: every hostile line fails, nothing is written, no connection is tried, and it says how to save."""
    assert duckdb_shell(), "the DuckDB shell (pip package duckdb-cli) is a test dependency"
    catalog = home / "catalog.duckdb"
    targets = tmp_path / "targets"
    targets.mkdir()
    t = str(targets)
    script = "\n".join(
        [
            f"COPY (SELECT 1) TO '{t}/x.csv';",
            f"COPY kernels TO '{catalog}';",
            f"EXPORT DATABASE '{t}/exported';",
            f"ATTACH '{t}/new.duckdb' AS fresh;",
            "CREATE TABLE t AS SELECT 1;",
            "DELETE FROM kernels;",
            "INSTALL httpfs;",
            "LOAD httpfs;",
            "SET enable_external_access = true;",
            "SET lock_configuration = false;",
            "SELECT content FROM read_text('/etc/hostname');",
            "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv');",
            f".output {t}/out.txt",
            f".once {t}/once.txt",
            f".shell touch {t}/shell.txt",
            f".system touch {t}/system.txt",
            f".open {t}/opened.duckdb",
            f".log {t}/log.txt",
            "SELECT 'settings', current_setting('enable_external_access'), current_setting('lock_configuration'), "
            "current_setting('autoinstall_known_extensions'), current_setting('autoload_known_extensions');",
            "SELECT 'kernels', count(*) FROM kernels;",
        ]
    )
    before = _sha256(catalog)
    log = tmp_path / "shell.log"
    env = {**_env(), "PATH": f"{Path(duckdb_shell()).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [*traced(log), sys.executable, "-m", "kdb", "--home", str(home), "shell"],
        input=script,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert "kdb sql" in proc.stderr and "--format csv > FILE" in proc.stderr
    n = _oracle(home, "SELECT count(*) FROM kernels")[0][0]
    assert re.search(r"settings\s*│\s*false\s*│\s*true\s*│\s*false\s*│\s*false", proc.stdout), proc.stdout
    assert re.search(rf"kernels\s*│\s*{n}\b", proc.stdout), proc.stdout
    errors = proc.stderr
    assert errors.count("file system operations are disabled") >= 5, errors
    assert errors.count("the configuration has been locked") == 2, errors
    assert "read-only mode" in errors and "cannot be used in -safe mode" in errors, errors
    assert trace_findings(log.read_text()) == []
    assert _sha256(catalog) == before
    assert list(targets.iterdir()) == []


def test_shell_refuses_a_shared_catalog_it_cannot_guard(tmp_path: Path):
    env = {**_env(), "KDB_CATALOG": "ducklake:postgres:dbname=none host=127.0.0.1", "KDB_STORE": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "kdb", "shell"], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "kdb sql" in proc.stderr


@pytest.mark.postgres
@pytest.mark.strace
@pytest.mark.strace
@pytest.mark.postgres
def test_shared_catalog_is_guarded_too(unpack_snapshot, tmp_path: Path):
    """A shared catalog (DuckLake on PostgreSQL): kdb attaches it, then the same lock; the PostgreSQL and
    DuckLake extensions' functions (a new connection to any server, file clean-up) and writes into the one
    readable directory are refused, nothing in the store changes, and no connection leaves for another port."""
    assert find_bin_dir(), "PostgreSQL is needed for the shared catalog (.ci/run installs postgresql-15)"
    server = PgServer().start()
    try:
        store = tmp_path / "store"
        env = {**_env(), "KDB_CATALOG": server.catalog_url(server.new_database()), "KDB_STORE": str(store)}

        def run(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
            cmd = [*prefix, sys.executable, "-m", "kdb", *args]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)

        assert run("ingest", str(unpack_snapshot(SNAPSHOT)), "--tag", "a", "-q").returncode == 0
        lake = store / "lake"
        before = _listing(store)
        n = json.loads(run("sql", "SELECT count(*) AS n FROM kernels", "--format", "json").stdout)[0]["n"]
        assert n > 10
        elsewhere = "host=127.0.0.1 port=9 dbname=kdb0"  # a port nothing listens on: a try would show in the trace
        parquet = next(lake.rglob("*.parquet"))
        for sql in (
            f"SELECT * FROM postgres_scan('{elsewhere}', 'public', 'ducklake_snapshot')",
            "SELECT * FROM postgres_query('__ducklake_metadata_kdb', 'SELECT 1')",
            "SELECT * FROM postgres_execute('__ducklake_metadata_kdb', 'DROP TABLE ducklake_snapshot')",
            "SELECT * FROM ducklake_cleanup_old_files('kdb', cleanup_all => true)",
            "SELECT * FROM ducklake_expire_snapshots('kdb', older_than => now())",
            f"COPY (SELECT 1) TO '{parquet}'",
            f"COPY (SELECT 1) TO '{lake}/x.csv'",
            f"ATTACH 'ducklake:postgres:{elsewhere}' AS other",
            "INSERT INTO kdb_commits VALUES (5)",
            "USE memory",
            "SELECT * FROM read_text('/etc/hostname')",
        ):
            log = tmp_path / "trace.log"
            proc = run("sql", "--", sql, prefix=traced(log))
            assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, (sql, proc.stderr)
            assert "refused" in proc.stderr, (sql, proc.stderr)
            # kdb's own connection to the catalog's server is the only one
            connects = [line for line in log.read_text().splitlines() if re.match(r"\d+\s+connect\(", line)]
            ports = {m for line in connects for m in re.findall(r"sin6?_port=htons\((\d+)\)", line)}
            assert ports == {str(server.port)}, (sql, ports)
        assert _listing(store) == before
        # a Parquet file of the catalog is readable (the one directory external access still reaches)
        rows = run("sql", f"SELECT count(*) AS n FROM read_parquet('{parquet}')", "--format", "json")
        assert rows.returncode == 0 and json.loads(rows.stdout)[0]["n"] >= 0, rows.stderr
        proc = run("sql", "SELECT now() AS n, count(*) AS k FROM kernels", "--format", "json")
        assert proc.returncode == 0 and json.loads(proc.stdout)[0]["k"] == n, proc.stderr
    finally:
        server.stop()


# -- declared dependencies ---------------------------------------------------------------------------------


def _declared() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {}
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement)
        assert name, requirement
        out[name.group(0).lower().replace("_", "-")] = requirement
    return out


def _imported_modules() -> dict[str, set[str]]:
    """Top-level module -> the kdb files importing it (at module level or inside functions)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "kdb").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_declared():
    declared = _declared()
    distributions = importlib.metadata.packages_distributions()
    imported = _imported_modules()
    assert {"duckdb", "rich", "typer", "deepdiff"} <= set(imported)  # the walk sees imports inside functions
    undeclared = {}
    for module, files in imported.items():
        if module == "kdb" or module in sys.stdlib_module_names or module == "__future__":
            continue
        if module == "triton" and all(f.startswith("kdb/capture/") or f == "kdb/replay/in_toolchain.py" for f in files):
            # kdb.capture runs inside the user's Triton process, kdb/replay/in_toolchain.py inside a toolchain's
            # interpreter (kdb toolchain add): that Triton is theirs, never kdb's to pin
            continue
        dists = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
        if not dists & set(declared):
            undeclared[module] = (sorted(dists), sorted(files))
    assert undeclared == {}
    # what DuckDB's Python client imports for kdb: pytz for TIMESTAMP WITH TIME ZONE values
    assert "pytz" in declared and "rich" in declared


def test_deepdiff_is_pinned_and_its_records_follow_the_schema():
    """deepdiff's change records are part of the diff JSON: one major version, whose records the schema
    describes key by key (a renamed or new kind of record fails here and in the schema check of tests/test_diff.py)."""
    requirement = _declared()["deepdiff"]
    pinned = re.fullmatch(r"deepdiff>=(\d+)(?:\.\d+)*,<(\d+)", requirement.replace(" ", ""))
    assert pinned and int(pinned.group(2)) == int(pinned.group(1)) + 1, requirement
    assert importlib.metadata.version("deepdiff").split(".")[0] == pinned.group(1)
    schema = json.loads((ROOT / "docs" / "diff-json-schema.json").read_text())
    deep = schema["properties"]["deep"]["items"]["properties"]
    assert deep["triton_json_diff"]["$ref"] == deep["co_metadata_diff"]["$ref"] == "#/$defs/deepdiff"
    a = {"num_warps": 4, "arch": "gfx942", "shared": 0, "name": "k", "arg_types": ["i32", "f16"], "gone": 1}
    b = {"num_warps": 8, "arch": 942, "shared": 0, "name": "k", "arg_types": ["i32", "f16", "f32"], "new": None}
    c = {"num_warps": 4, "arg_types": ["i32"]}
    records = [json.loads(DeepDiff(x, y, ignore_order=False, verbose_level=2).to_json()) for x, y in ((a, b), (a, c))]
    kinds = set().union(*records)
    assert kinds == set(schema["$defs"]["deepdiff"]["properties"]), kinds
    validator = jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/deepdiff"})
    for record in records:
        validator.validate(record)
    assert records[0]["values_changed"]["root['num_warps']"] == {"old_value": 4, "new_value": 8}
    assert not validator.is_valid({"values_changed": {"root['x']": {"old": 1}}})
    assert not validator.is_valid({"item_moved": {}})


# -- a fresh install ----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.sweep  # ~50 s of pip on 2 cores: in the sweep; the README's command keeps the package list's test
def test_pip_install_into_an_empty_venv_runs_every_command(tmp_path: Path, unpack_snapshot):
    """`pip install .` into a venv without system site-packages, then every command, with nothing else installed."""
    src = tmp_path / "src"
    for name in ("pyproject.toml", "README.md"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    for package in ("kdb", "schema"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bindir = venv / "bin"
    pip = subprocess.run(
        [str(bindir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "KDB_HOME")}
    env["PATH"] = f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin"  # no duckdb shell, no strace, no pyenv
    home = tmp_path / "home"

    def run(*args: str, ok: tuple[int, ...] = (0,)) -> str:
        proc = subprocess.run(
            [str(bindir / "kdb"), "--home", str(home), *args],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            cwd=tmp_path,
        )
        assert proc.returncode in ok, (args, proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        return proc.stdout

    # kdb's own modules and the declared dependencies only: the venv has no other site
    probe = subprocess.run(
        [str(bindir / "python"), "-c", "import sys, kdb; print(kdb.__file__); print(sys.path)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert str(venv) in probe.stdout.splitlines()[0] and "site-packages" in probe.stdout
    assert str(ROOT) not in probe.stdout
    assert "ingest" in run("--help") and run("--version").startswith("kdb ")
    assert run("sql", "SELECT 1 AS one", "--format", "json") == '[\n  {\n    "one": 1\n  }\n]\n'
    for tag in ("t3.0.0-gfx942", "t3.1.0-gfx942"):
        run("ingest", str(unpack_snapshot(tag)), "--tag", tag, "-q")
    assert json.loads(run("tags", "--format", "json"))[0]["tag"] == "t3.0.0-gfx942"
    run("show")
    run("show", "t3.0.0-gfx942")
    for fmt in FORMATS:
        assert run("sql", "SELECT now() AS n, count(*) AS k FROM kernels", "--format", fmt)
    doc = json.loads(run("diff", "t3.0.0-gfx942", "t3.1.0-gfx942", "--format", "json", ok=(0, 1)))
    assert doc["summary"]["matched"] > 0
    run("diff", "t3.0.0-gfx942", "t3.1.0-gfx942", "--no-pager", ok=(0, 1))
    run("report", "t3.0.0-gfx942", "t3.1.0-gfx942", "--output", str(tmp_path / "r.html"))
    assert (tmp_path / "r.html").stat().st_size > 100_000
    first = "SELECT min(path) AS p FROM files JOIN snapshots USING (snapshot_id) WHERE tag = 't3.0.0-gfx942'"
    path = json.loads(run("sql", first, "--format", "json"))[0]["p"]
    run("cat", "t3.0.0-gfx942", path)
    run("export", "t3.0.0-gfx942", str(tmp_path / "out"))
    run("verify")
    run("reindex", "t3.1.0-gfx942")
    run("rm", "t3.1.0-gfx942")
    run("gc")
    assert "pip install duckdb-cli" in run("shell")  # no DuckDB shell in the venv: how to get one
    for command in ("ingest", "tags", "show", "diff", "report", "sql", "cat", "export", "rm", "gc", "verify"):
        assert "Usage" in run(command, "--help")
    for command in ("reindex", "shell", "push", "pull"):
        assert "Usage" in run(command, "--help")
