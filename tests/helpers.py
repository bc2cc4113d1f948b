"""Small helpers shared by tests: run the CLI in-process and hash trees."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kdb.cli import run


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def kdb(capsys, home: Path, *args: str) -> Result:
    capsys.readouterr()
    code = run(["--home", str(home), *args])
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def kdb_subprocess(home: Path, *args: str, timeout: float = 600, binary: bool = False) -> Result:
    proc = subprocess.run(
        [sys.executable, "-m", "kdb", "--home", str(home), *args], capture_output=True, text=not binary, timeout=timeout
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def plant_catalog_path(home: Path, path: str) -> None:
    """Record an extra file under an arbitrary `path` in the first snapshot (as a damaged or hostile
    catalog could), pointing at a real stored blob so that only the path is wrong."""
    import duckdb

    con = duckdb.connect(str(home / "catalog.duckdb"))
    try:
        con.execute(
            "INSERT INTO top_files SELECT (SELECT min(snapshot_id) FROM snapshots), ?, hash, size, kind "
            "FROM folder_files ORDER BY name LIMIT 1",
            [path],
        )
    finally:
        con.close()


def duckdb_shell() -> str | None:
    """The `duckdb` executable of the duckdb-cli package: on PATH, or beside this interpreter (a pyenv
    shim may not exist yet right after the install)."""
    import shutil

    beside = Path(sys.executable).parent / "duckdb"
    return shutil.which("duckdb") or (str(beside) if beside.exists() else None)
