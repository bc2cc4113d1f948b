"""Small helpers shared by tests: run the CLI in-process and hash trees."""

from __future__ import annotations

import hashlib
import json
import re
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


def python_json_text(document: object) -> str:
    """What Python's encoder writes for `document` (indent 2, non-ASCII kept), with floats' exponents as
    orjson writes them (1e-7, 1e16; Python: 1e-07, 1e+16): the same numbers, the text kdb's to_json must give."""
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    # a number is a whole value on its line in indented JSON (after `"key": ` or alone in a list)
    number = re.compile(r'^(\s*(?:"(?:[^"\\]|\\.)*": )?-?[0-9]+(?:\.[0-9]+)?)e\+?(-?)0*([0-9]+)(,?)$', re.MULTILINE)
    return number.sub(lambda m: f"{m.group(1)}e{m.group(2)}{m.group(3)}{m.group(4)}", text)


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


def assert_best_configs_link_the_recompiled_folder(corpus_dir: Path, model: str, cache: Path, rows: list[dict]) -> int:
    """Every best config of `cache` (`rows`: its `autotune` rows with source 'best_config') links the folder
    that recompiling its winner gives (corpus/inductor/oracle_toolchains.py recompiled each once per ptxas an
    Inductor run uses; exactly one of the names must be a folder of the cache). Returns how many were checked."""
    toolchains = json.loads((corpus_dir / "best_config_toolchains.json").read_text())["scenarios"][model]
    recompiled: dict[str, dict[str, str]] = {}
    for toolchain, recompile in toolchains.items():
        assert recompile["status"] == "ok", toolchain
        for r in recompile["records"]:
            recompiled.setdefault(r["best_config_path"], {})[toolchain] = r["cache_key"]
    folders = {p.name for p in (cache / "triton" / "0").iterdir()}
    by_path = {r["path"]: r for r in rows}
    assert set(recompiled) == set(by_path) == {str(p.relative_to(cache)) for p in cache.glob("*/*.best_config")}
    for path, row in by_path.items():
        in_cache = {key for key in recompiled[path].values() if key in folders}
        assert len(in_cache) == 1, (path, recompiled[path])
        best = json.loads((cache / path).read_text())
        if best.get("triton_cache_hash"):
            assert best["triton_cache_hash"] in in_cache
        expected_link = "hash" if best.get("triton_cache_hash") else "config"
        assert (row["link"], row["cache_key"]) == (expected_link, f"triton/0/{in_cache.pop()}"), path
    return len(by_path)


def assert_verified(capsys, home: Path, planted: dict[str, set[str]] | None = None) -> None:
    """`kdb verify` on `home` finds exactly the problems a test planted: none when `planted` is empty, else one
    problem per key of `planted` (a substring naming it, e.g. a blob digest) that names every snapshot tag in its
    value, and nothing else. Issue 37 asks this after every trust test."""
    result = kdb(capsys, home, "verify", "--format", "json")
    report = json.loads(result.out)
    problems = report["problems"]
    planted = planted or {}
    if not planted:
        assert (result.code, problems) == (0, []), result.out + result.err
        return
    assert result.code == 5, result.out + result.err
    unexplained = [p for p in problems if not any(key in p for key in planted)]
    assert unexplained == [], unexplained
    for key, tags in planted.items():
        naming = [p for p in problems if key in p]
        assert naming, (key, problems)
        for tag in tags:
            assert any(re.search(rf"\b{re.escape(tag)}\b", p) for p in naming), (key, tag, naming)
