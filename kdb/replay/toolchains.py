"""The Python environments kdb compiles with (`kdb toolchain add|list|rm`): one Triton release each.

A toolchain is an interpreter whose `import triton` is that release: one the user already has (`--python`), or
one kdb makes under the home with `python -m venv` and pip, from whatever index pip is configured with. The
registry is `toolchains.json` in the local home (interpreter paths belong to this machine, never to a shared
home). Compiling needs nothing else: NVIDIA uses the wheel's own `ptxas`; AMD links in-process where the release
does and with `ld.lld` where it does not (`TRITON_HIP_LLD_PATH`, found by `lld_path`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from kdb.errors import ToolchainError, UsageError

REGISTRY_NAME = "toolchains.json"
MANAGED_DIR = "toolchains"
_VERSION = re.compile(r"^\d+\.\d+\.\d+(?:[.+-]?\w+)*$")
# What one probe asks an interpreter: its Triton release and where that Triton sits.
_PROBE = "import json, triton; print(json.dumps({'version': triton.__version__, 'path': triton.__file__}))"
PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Toolchain:
    version: str
    python: str
    managed: bool  # made by kdb under its home (rm deletes it) or registered with --python (rm forgets it)
    triton_path: str


def _registry(home_root: Path) -> Path:
    return home_root / REGISTRY_NAME


def load(home_root: Path) -> dict[str, Toolchain]:
    path = _registry(home_root)
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ToolchainError(
            f"{path}: unreadable toolchain registry ({exc}); remove it and add the toolchains again"
        ) from None
    return {r["version"]: Toolchain(**r) for r in rows}


def _save(home_root: Path, chains: dict[str, Toolchain]) -> None:
    home_root.mkdir(parents=True, exist_ok=True)
    rows = [asdict(c) for c in sorted(chains.values(), key=lambda c: release_key(c.version))]
    fd, tmp = tempfile.mkstemp(dir=home_root, prefix=".toolchains-")
    with os.fdopen(fd, "w") as f:
        json.dump(rows, f, indent=1)
    os.replace(tmp, _registry(home_root))


def release_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


def probe(python: str) -> dict[str, str]:
    """The Triton release an interpreter imports; ToolchainError with one line when it has none."""
    try:
        done = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=compile_env()
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"{python}: cannot run it ({exc})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolchainError(f"{python}: `import triton` fails there ({last})")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def add(home_root: Path, version: str, python: str | None = None) -> Toolchain:
    """Register `python` as the toolchain of `version` (its Triton must be that release), or make one."""
    if not _VERSION.match(version):
        raise UsageError(f"{version!r} is not a Triton release (expected e.g. 3.7.1)")
    managed = python is None
    if python is None:
        python = str(_make_venv(home_root, version))
    found = probe(python)
    if found["version"] != version:
        raise ToolchainError(f"{python} has Triton {found['version']}, not {version}")
    chains = load(home_root)
    chains[version] = Toolchain(version, python, managed, found["path"])
    _save(home_root, chains)
    return chains[version]


def _make_venv(home_root: Path, version: str) -> Path:
    """`python -m venv HOME/toolchains/tVERSION` and `pip install triton==VERSION` into it."""
    folder = home_root / MANAGED_DIR / f"t{version}"
    python = folder / "bin" / "python"
    if python.exists():
        return python
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [sys.executable, "-m", "venv", str(partial)],
        [str(partial / "bin" / "python"), "-m", "pip", "install", "--quiet", f"triton=={version}"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ToolchainError(
                f"could not install Triton {version} with pip ({last}); with no network, install it in an "
                f"environment by hand and run `kdb toolchain add {version} --python PATH/bin/python`"
            )
    os.replace(partial, folder)  # the venv's scripts name the partial path: make it again under its final name
    subprocess.run([sys.executable, "-m", "venv", "--upgrade", str(folder)], capture_output=True)
    return python


def remove(home_root: Path, version: str) -> Toolchain:
    chains = load(home_root)
    if version not in chains:
        raise ToolchainError(f"no toolchain {version} (kdb toolchain list shows them)")
    gone = chains.pop(version)
    _save(home_root, chains)
    if gone.managed:
        shutil.rmtree(home_root / MANAGED_DIR / f"t{version}", ignore_errors=True)
    return gone


def get(home_root: Path, version: str) -> Toolchain:
    chains = load(home_root)
    if version not in chains:
        known = ", ".join(sorted(chains, key=release_key)) or "none"
        raise ToolchainError(
            f"no toolchain for Triton {version} (registered: {known}); run `kdb toolchain add {version}`"
        )
    return chains[version]


def lld_path() -> str | None:
    """The `ld.lld` that releases which link AMD code objects outside the process are told to use."""
    if found := os.environ.get("TRITON_HIP_LLD_PATH"):
        return found
    if found := shutil.which("ld.lld"):
        return found
    candidates = sorted(Path("/usr/lib").glob("llvm-*/bin/ld.lld"), key=lambda p: release_key(p.parent.parent.name))
    return str(candidates[-1]) if candidates else None


def compile_env(cache_dir: str | None = None) -> dict[str, str]:
    """The environment a toolchain compiles in: no cache manager of the user's (kdb's own capture included), no
    compile-time dumps; AMD's `ld.lld` where one is found."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "KDB_CAPTURE", "PYTHONPATH"))}
    if lld := lld_path():
        env["TRITON_HIP_LLD_PATH"] = lld
    if cache_dir is not None:
        env["TRITON_CACHE_DIR"] = cache_dir
    return env
