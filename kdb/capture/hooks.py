"""Which of Triton's cache hooks the installed Triton has, read from its own source (never from a table).

TRITON_CACHE_MANAGER (a `CacheManager` class) is read by `triton.runtime.cache.get_cache_manager` (≤3.3) or
`triton.knobs.cache.manager_class` (3.4+); TRITON_REMOTE_CACHE_BACKEND by `RemoteCacheManager` (2.3+).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hooks:
    version: str | None  # None: no Triton in this Python
    cache_manager: bool
    remote_backend: bool

    def describe(self) -> str:
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


def triton_hooks() -> Hooks:
    """Read, not imported: a Triton that cannot be imported here (2.2 imports torch at once) still has its hooks."""
    import importlib.metadata
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return Hooks(None, False, False)
    root = Path(next(iter(spec.submodule_search_locations)))
    texts = [p.read_text(errors="replace") for p in (root / "runtime" / "cache.py", root / "knobs.py") if p.is_file()]
    text = "\n".join(texts)
    try:
        version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        version = "(version unknown)"
    return Hooks(
        version,
        "TRITON_CACHE_MANAGER" in text,
        "class RemoteCacheManager" in text and "TRITON_REMOTE_CACHE_BACKEND" in text,
    )
