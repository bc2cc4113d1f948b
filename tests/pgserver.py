"""A throwaway PostgreSQL server for the shared-catalog tests: its own temporary directory, a free
loopback port, trust authentication, stopped at the end. Binaries: $KDB_PG_BIN, else PATH, else
/usr/local/bin, else Debian's /usr/lib/postgresql/*/bin. As root, the server runs as `postgres`."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DATABASES = 12  # created before the server starts (single-user mode), handed out one per test


def find_bin_dir() -> Path | None:
    candidates = [os.environ.get("KDB_PG_BIN", "")]
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    candidates += ["/usr/local/bin", *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for c in candidates:
        if c and all((Path(c) / exe).exists() for exe in ("initdb", "pg_ctl", "postgres")):
            return Path(c)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self) -> None:
        # Its own directory in the system's temp dir (pytest's is private to root; the server runs as postgres).
        root = Path(tempfile.mkdtemp(prefix="kdb-pg-"))
        bindir = find_bin_dir()
        if bindir is None:
            raise RuntimeError("PostgreSQL binaries (initdb, pg_ctl, postgres) not found")
        self.bin = bindir
        self.root = root
        self.data = root / "data"
        self.port = _free_port()
        self.user = "kdb"
        self._next = 0
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(root, pw.pw_uid, pw.pw_gid)
            root.chmod(0o755)

    def _run(self, *args: str, stdin: str | None = None) -> None:
        cmd = [str(a) for a in args]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=300, cwd="/")
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")

    def start(self) -> PgServer:
        self._run(self.bin / "initdb", "-D", self.data, "-A", "trust", "-U", self.user, "--no-sync", "-E", "UTF8")
        creates = "".join(f"CREATE DATABASE kdb{i};\n" for i in range(DATABASES))
        self._run(self.bin / "postgres", "--single", "-D", self.data, "postgres", stdin=creates)
        for attempt in range(5):  # another process (a parallel xdist worker) may take the free port first
            options = (
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            try:
                self._run(self.bin / "pg_ctl", "-D", self.data, "-o", options, "-l", self.root / "log", "-w", "start")
                break
            except RuntimeError:
                if attempt == 4:
                    raise
                self.port = _free_port()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("PostgreSQL did not start")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run(self.bin / "pg_ctl", "-D", self.data, "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def new_database(self) -> str:
        if self._next >= DATABASES:
            raise RuntimeError("no fresh database left")
        name = f"kdb{self._next}"
        self._next += 1
        return name

    def catalog_url(self, dbname: str) -> str:
        return f"ducklake:postgres:dbname={dbname} host=127.0.0.1 port={self.port} user={self.user}"
