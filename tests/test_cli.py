"""The command line as a contract: version, help, every command documented, usage errors exit 2."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import kdb
from kdb.cli import app

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kdb", *args], capture_output=True, text=True, timeout=60)


def test_version_and_help():
    r = _run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"kdb {kdb.__version__}"
    r = _run("--help")
    assert r.returncode == 0 and "ingest" in r.stdout and "diff" in r.stdout


def test_every_command_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"^\| `kdb ([a-z]+)", readme, flags=re.M))
    commands = {c.name or c.callback.__name__.replace("_cmd", "") for c in app.registered_commands}
    assert commands and commands <= documented, sorted(commands - documented)


def test_usage_errors_exit_2_without_traceback(tmp_path):
    for args in (["ingest"], ["no-such-command"], ["sql", "SELECT 1", "--format", "yaml"]):
        r = _run("--home", str(tmp_path / "home"), *args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
