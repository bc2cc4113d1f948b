"""What an external oracle printed, kept by tool version and input digest: never recomputed for an unchanged input.

llvm-readelf, llvm-objdump, cuobjdump and nvdisasm are deterministic functions of their arguments and their
input files. `run([tool, *args])` hashes the tool's identity (its resolved path and what `TOOL --version`
prints, asked once per process), the arguments with every argument that names an existing file replaced by
the sha256 of its bytes, and any stdin; a hit returns the recorded exit status, stdout and stderr without
starting the tool. Entries live in the test cache ($KDB_TEST_CACHE/oracle/), written to a temporary file and
renamed into place, so parallel workers and a killed run never leave a partial one.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import uuid
from functools import cache
from pathlib import Path

import zstandard
from corpus_cache import cache_root, file_sha256

FORMAT = 1


@cache
def tool_identity(exe: str) -> str:
    """The tool's resolved path and its `--version` text (what changes when the tool is upgraded)."""
    path = Path(exe).resolve()
    proc = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    return json.dumps([str(path), proc.returncode, proc.stdout, proc.stderr])


def _key(args: list[str], stdin: str | None) -> str:
    h = hashlib.sha256(json.dumps([FORMAT, tool_identity(args[0])]).encode())
    for arg in args[1:]:
        path = Path(arg)
        if "\0" not in arg and len(arg) < 4096 and path.is_file():
            h.update(b"file\0" + file_sha256(path).encode() + b"\0")
        else:
            h.update(b"arg\0" + arg.encode() + b"\0")
    if stdin is not None:
        h.update(b"stdin\0" + hashlib.sha256(stdin.encode()).digest())
    return h.hexdigest()


def run(
    args: list[str], *, input: str | None = None, check: bool = False, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(args, capture_output=True, text=True, ...) through the cache."""
    key = _key([str(a) for a in args], input)
    entry = cache_root() / "oracle" / key[:2] / f"{key}.json.zst"
    try:
        record = json.loads(zstandard.ZstdDecompressor().decompress(entry.read_bytes()))
    except (OSError, ValueError, zstandard.ZstdError):
        proc = subprocess.run(args, input=input, capture_output=True, text=True, timeout=timeout)
        record = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_name(f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        tmp.write_bytes(zstandard.ZstdCompressor(level=3).compress(json.dumps(record).encode()))
        tmp.replace(entry)
    proc = subprocess.CompletedProcess(args, record["returncode"], record["stdout"], record["stderr"])
    if check:
        proc.check_returncode()
    return proc
