"""Which of Triton's cache hooks the installed Triton has, read from its own source (never from a table).

TRITON_CACHE_MANAGER (a `CacheManager` class) is read by `triton.runtime.cache.get_cache_manager` (≤3.3) or
`triton.knobs.cache.manager_class` (3.4+); TRITON_REMOTE_CACHE_BACKEND by `RemoteCacheManager` (2.3+).

The Triton a process of this Python uses is the one `import triton` loads there: found and imported in a
child Python (the current directory and PYTHONPATH as the user's process has them; a crash or a hang of the
import stays in the child). A module that shadows the installed Triton, or a Triton that cannot be imported,
never calls kdb's cache manager: `kdb capture check` says so instead of reading hooks from a Triton nothing runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# What the child Python reports: where `import triton` finds it, which distribution is installed, and whether
# the import works. One JSON line; the import runs last (it may print, or kill the child).
_PROBE = r"""
import importlib.metadata, importlib.util, json, sys
out = {}
try:
    spec = importlib.util.find_spec("triton")
    out["origin"] = spec.origin if spec is not None else None
    out["package"] = bool(spec is not None and spec.submodule_search_locations)
except Exception as exc:
    out["origin"], out["package"] = None, False
    out["error"] = (type(exc).__name__ + ": " + str(exc)).splitlines()[0]
try:
    dist = importlib.metadata.distribution("triton")
    out["version"] = dist.version
    out["installed"] = str(dist.locate_file("triton/__init__.py"))
except Exception:
    out["version"], out["installed"] = None, None
print(json.dumps(out), flush=True)
if out["origin"] is not None and "error" not in out:
    try:
        import triton
        out["file"] = getattr(triton, "__file__", None)
    except BaseException as exc:
        out["error"] = ((type(exc).__name__ + ": " + str(exc)).splitlines() or [type(exc).__name__])[0]
print(json.dumps(out), flush=True)
"""
PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Hooks:
    version: str | None  # None: no Triton in this Python
    cache_manager: bool
    remote_backend: bool
    problem: str | None = None  # why no process of this Python can call kdb (a shadowing module, a failed import)

    @property
    def usable(self) -> bool:
        return self.problem is None and (self.cache_manager or self.remote_backend)

    def describe(self) -> str:
        if self.problem is not None:
            return self.problem
        if self.version is None:
            return "no Triton in this Python: nothing will call kdb's cache manager"
        if self.cache_manager and self.remote_backend:
            return (
                f"Triton {self.version}: TRITON_CACHE_MANAGER=kdb.capture:CacheManager and "
                "TRITON_REMOTE_CACHE_BACKEND=kdb.capture:RemoteBackend both work"
            )
        if self.cache_manager:
            return (
                f"Triton {self.version} has no TRITON_REMOTE_CACHE_BACKEND hook (no RemoteCacheManager): "
                "use TRITON_CACHE_MANAGER=kdb.capture:CacheManager"
            )
        return f"Triton {self.version} has neither TRITON_CACHE_MANAGER nor TRITON_REMOTE_CACHE_BACKEND: kdb cannot be its cache"


def probe() -> dict:
    """What `import triton` does in a child of this Python (see _PROBE); its last JSON line."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return {"hang": True}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    try:
        found = json.loads(lines[-1]) if lines else {}
    except ValueError:
        found = {}
    if done.returncode != 0 and "error" not in found and found.get("origin"):
        code = done.returncode
        how = signal.Signals(-code).name if code < 0 and -code in signal.valid_signals() else f"exit status {code}"
        found["error"] = f"the import killed the process: {how}"
    return found


def triton_hooks() -> Hooks:
    """The hooks of the Triton this Python's processes import, read from its source files."""
    found = probe()
    version = found.get("version")
    origin = found.get("origin")
    if found.get("hang"):
        return Hooks(version, False, False, f"`import triton` did not finish in {PROBE_TIMEOUT_S:g} s in this Python")
    if origin is None:
        return Hooks(None, False, False)
    installed = found.get("installed")
    shown = f"Triton {version}" if version else "Triton"
    if installed and os.path.exists(installed) and os.path.realpath(installed) != os.path.realpath(origin):
        return Hooks(
            version,
            False,
            False,
            f"`import triton` in this Python loads {origin}, which shadows {shown} installed in "
            f"{Path(installed).parent.parent} (a module of that name on PYTHONPATH or in the current "
            "directory): Triton never calls kdb's cache manager here",
        )
    if found.get("error"):
        where = Path(origin).parent if found.get("package") else Path(origin)
        return Hooks(
            version,
            False,
            False,
            f"{shown} in {where} cannot be imported by this Python ({found['error']}): Triton never calls "
            "kdb's cache manager here",
        )
    root = Path(origin).parent
    texts = [p.read_text(errors="replace") for p in (root / "runtime" / "cache.py", root / "knobs.py") if p.is_file()]
    text = "\n".join(texts)
    return Hooks(
        version or "(version unknown)",
        "TRITON_CACHE_MANAGER" in text,
        "class RemoteCacheManager" in text and "TRITON_REMOTE_CACHE_BACKEND" in text,
    )
