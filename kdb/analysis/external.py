"""An external tool (llvm-objdump, nvdisasm) run over bytes kdb holds in memory: the tools read only files, so
the bytes go to a private temporary folder, removed when the tool has finished."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path


def run_on_bytes(
    data: bytes, file_name: str, command: Callable[[str], list[str]], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Write DATA to FILE_NAME in a temporary folder and run COMMAND(its path), its output captured as text.
    The tool's exit status is the caller's to judge; OSError and subprocess.TimeoutExpired reach it too."""
    with tempfile.TemporaryDirectory(prefix="kdb-tool-") as tmp:
        path = Path(tmp) / file_name
        path.write_bytes(data)
        return subprocess.run(command(str(path)), capture_output=True, text=True, timeout=timeout, check=False)
