"""The lint, format and type checks configured in pyproject.toml, run as part of the suite so that CI
(`.ci/run`: `pip install -e '.[test]' && python -m pytest`) fails when any of them fails."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from conftest import ROOT

CHECKS = {
    "ruff check": [sys.executable, "-m", "ruff", "check", "."],
    "ruff format --check": [sys.executable, "-m", "ruff", "format", "--check", "."],
    "mypy": [sys.executable, "-m", "mypy"],
}
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 250


@pytest.mark.parametrize("name", list(CHECKS))
def test_tool_passes(name):
    proc = subprocess.run(CHECKS[name], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"


def test_modules_and_classes_stay_small():
    too_big = []
    for path in sorted((ROOT / "kdb").rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_big.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                too_big.append(f"{path.relative_to(ROOT)}: class {node.name}")
    assert too_big == []
