"""Why did it compile (issue 42): the parts of Triton's cache key, recorded for every compile a capture sees.

Triton 3.4+ calls `knobs.compilation.listener(src=, metadata=, metadata_group=, times=, cache_hit=)` at the end of
every `triton.compile`. When Triton first makes kdb's cache manager in a process, kdb chains its own listener in
front of the one the user set (which keeps being called, with the same arguments). Each compile becomes one JSON
line appended to `CAPTURE_ROOT/keys/<tag>/<pid>.jsonl` (one `os.write` of an O_APPEND file):

- the kernel: name, file, `def` line, a digest of the body without its line (`JITFunction.src`), the function key
  Triton hashes (`JITFunction.cache_key`: body, `def` line, the functions it calls and constexpr globals it reads);
- the specialization: argument types (`ASTSource.signature`), attributes (divisibility…) and constexpr values;
- the target, the backend's options (the fields of its options class), the backend's own hash;
- the environment variables entering the key (as the key holds them, and their raw value in the process);
- the Triton version and key (a digest of its own sources), hit or compile, the cache key, time, pid, and the phase
  (`KDB_CAPTURE_PHASE`; `end_warmup()` sets it for this process and the workers it makes later).

Triton reads its listener at the start of `compile`, before it makes the cache manager that loads kdb: the compile
running then is recorded from that call's own frame (its `src`) and its metadata JSON when its group is read or
written. Releases without the listener (< 3.4) are recorded the same way; what a record could not read is named in
its `not_exposed` list, never guessed. Any failure here is said once on stderr and never reaches the compile.
"""

from __future__ import annotations

import hashlib
import json
import linecache
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

PHASE_ENV = "KDB_CAPTURE_PHASE"
WARMUP_DONE = "serving"
RECORD_VERSION = 1
# Triton's parts of a record, in the order a difference is told
_SOURCE_PARTS = ("body_digest", "def_line", "function_key")
_PATHS = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.+@=-]+)+/?")
_SOURCE_KEY_PARTS = ("body_digest", "def_line", "signature", "constexprs", "attrs")
_IR_PARTS = ("body_digest",)


def end_warmup(phase: str = WARMUP_DONE) -> None:
    """Mark the end of this process's warm-up: its later compiles, and those of workers it starts later (the
    environment variable is inherited), are recorded with this phase and listed first by `kdb capture misses`."""
    os.environ[PHASE_ENV] = phase


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _text(value: Any) -> str:
    key = getattr(value, "cache_key", None)
    return key if isinstance(key, str) else str(value)


def _arg_name(fn: Any, path: Any) -> str:
    """`(2,)` → the third argument's name; a tuple argument's member `(2, 0)` → `name[0]`."""
    path = path if isinstance(path, tuple) else (path,)
    names = list(getattr(fn, "arg_names", None) or [])
    head = path[0] if path else None
    name = names[head] if isinstance(head, int) and 0 <= head < len(names) else str(head)
    return name + "".join(f"[{i}]" for i in path[1:])


def source_parts(src: Any) -> dict[str, Any]:
    """What `ASTSource.hash` is made of (or, for a compile of an IR file, its text's digest)."""
    fn = getattr(src, "fn", None)
    out: dict[str, Any] = {"name": getattr(src, "name", None)}
    if fn is None:  # an IR file (`triton.compile(path)`, kdb replay): the key hashes its text, no line or arguments
        text = getattr(src, "src", None)
        out["body_digest"] = _digest(text) if isinstance(text, str) else None
        out["ir_source"] = True
        return out
    code = getattr(getattr(fn, "fn", None), "__code__", None)
    out["file"] = getattr(code, "co_filename", None)
    out["def_line"] = _def_line(out["file"], getattr(fn, "starting_line_number", None))
    body = getattr(fn, "src", None)
    if isinstance(body, str):
        out["body_digest"], out["body_digest_without_paths"] = _body_digests(body)
    key = getattr(fn, "cache_key", None)
    out["function_key"] = key[:16] if isinstance(key, str) else None
    names = list(getattr(fn, "arg_names", None) or [])
    signature = getattr(src, "signature", None) or {}
    # 3.x: argument name -> type; 2.3: argument index -> type
    out["signature"] = {
        (names[k] if isinstance(k, int) and k < len(names) else str(k)): str(v) for k, v in dict(signature).items()
    }
    out["arg_order"] = names or list(out["signature"])
    constants = getattr(src, "constants", None) or getattr(src, "constexprs", None) or {}
    out["constexprs"] = {_arg_name(fn, k): _text(v) for k, v in dict(constants).items()}
    attrs = getattr(src, "attrs", None)
    out["attrs"] = _attrs(fn, attrs)
    return out


def _def_line(file: str | None, start: Any) -> int | None:
    """The `def` line: Triton's starting line is its first decorator's; the file's lines (linecache) tell below."""
    if not isinstance(start, int):
        return None
    lines = linecache.getlines(file) if file else []
    for number in range(start, min(start + 64, len(lines) + 1)):
        if lines[number - 1].lstrip().startswith(("def ", "async def ")):
            return number
    return start


_bodies: dict[str, tuple[str, str]] = {}


def _body_digests(body: str) -> tuple[str, str]:
    """The body's digest, and its digest with every absolute path replaced (once per body text and process)."""
    found = _bodies.get(body)
    if found is None:
        found = _bodies[body] = (_digest(body), _digest(_PATHS.sub("<path>", body)))
    return found


def _attrs(fn: Any, attrs: Any) -> dict[str, str]:
    """3.3+: {(index,): [["tt.divisibility", 16]]}; older releases: an AttrsDescriptor (its text, per release)."""
    if isinstance(attrs, dict):
        return {
            _arg_name(fn, k): ",".join(f"{a[0]}={a[1]}" if isinstance(a, list | tuple) else str(a) for a in v)
            for k, v in sorted(attrs.items(), key=lambda kv: str(kv[0]))
            if v  # an argument without attributes: as absent (3.7 lists it, 3.6 does not)
        }
    return {"(all)": str(attrs)} if attrs is not None else {}


def target_text(metadata: dict[str, Any]) -> str | None:
    """`hip:gfx942:64`: the metadata's target (a GPUTarget in memory, a dict in the stored JSON)."""
    target = metadata.get("target")
    if isinstance(target, dict):
        target = [target.get("backend"), target.get("arch"), target.get("warp_size")]
    elif target is not None and not isinstance(target, list | tuple):
        target = [getattr(target, "backend", None), getattr(target, "arch", None), getattr(target, "warp_size", None)]
    return ":".join(str(t) for t in target) if target else None


def metadata_parts(metadata: dict[str, Any], option_names: frozenset[str] | None) -> dict[str, Any]:
    """The compile's metadata (the JSON Triton stores): key, target, Triton version, the backend's options (none
    without their names: a release kdb cannot ask, said in `not_exposed`) and the env variables in the key."""
    env = {k: str(v) for k, v in metadata.items() if k.isupper()}
    options = {k: metadata[k] for k in sorted(option_names or ()) if k in metadata}  # JSON-encoded by the sink
    return {
        "cache_key": metadata.get("hash"),
        "target": target_text(metadata),
        "triton_version": metadata.get("triton_version"),
        "options": options,
        "env": env,
        "env_raw": {k: os.environ.get(k) for k in env},
    }


# -- the running Triton: its backend's option names and hash, its own key (each once per process and target) ----------
_backend_facts: dict[str, tuple[frozenset[str] | None, str | None, str | None]] = {}
# What the backend's hash is made of, kept as text (NVIDIA: `ptxas --version` and the arch; AMD: the target), so a
# changed backend hash can be said in words: which compiler version it was.
BACKEND_TEXT_CHARS = 400


def _backend(target_text: str | None, metadata: dict[str, Any]) -> tuple[frozenset[str] | None, str | None, str | None]:
    if str(target_text) in _backend_facts:
        return _backend_facts[str(target_text)]
    names: frozenset[str] | None = None
    digest: str | None = None
    text: str | None = None
    try:
        import dataclasses

        from triton.compiler.compiler import make_backend

        target = metadata.get("target")
        if isinstance(target, dict | list | tuple):
            from triton.backends.compiler import GPUTarget

            target = GPUTarget(*target) if isinstance(target, list | tuple) else GPUTarget(**target)
        backend = make_backend(target)
        names = frozenset(f.name for f in dataclasses.fields(backend.parse_options({})))
        text = str(backend.hash())
        digest = _digest(text)
    except Exception:  # noqa: BLE001 - a release kdb cannot ask: its records say so
        pass
    _backend_facts[str(target_text)] = (names, digest, text[:BACKEND_TEXT_CHARS] if text is not None else None)
    return _backend_facts[str(target_text)]


_triton_keys: list[str | None] = []


def _triton_key() -> str | None:
    """A digest of Triton's own key (its version and sources), once per process."""
    if not _triton_keys:
        where = (sys.modules.get(m) for m in ("triton.runtime.cache", "triton.compiler.compiler"))  # 3.4+, older
        fn = next((f for f in (getattr(m, "triton_key", None) for m in where) if f is not None), None)
        try:
            _triton_keys.append(_digest(fn()) if fn is not None else None)
        except Exception:  # noqa: BLE001 - a release without it: said in the record's not_exposed
            _triton_keys.append(None)
    return _triton_keys[0]


def build_record(src: Any, metadata: dict[str, Any], hit: bool, how: str, folder: str | None = None) -> dict[str, Any]:
    """One compile's record (`how`: "listener", "compile frame", "metadata"; `folder`: the cache folder's name, the
    key Triton's cache manager was made with): pure but for the running Triton."""
    meta = metadata
    option_names, backend_hash, backend_text = _backend(target_text(meta), meta)
    parts = metadata_parts(meta, option_names)
    record: dict[str, Any] = {"v": RECORD_VERSION, "time": time.time(), "pid": os.getpid()}
    record["phase"] = os.environ.get(PHASE_ENV) or None
    record["hit"] = hit
    record["how"] = how
    record.update(parts)
    record["folder"] = folder
    record["name"] = meta.get("name")
    if src is not None:
        record.update(source_parts(src))
    record["triton_key"] = _triton_key()
    record["backend_hash"] = backend_hash
    record["backend_hash_text"] = backend_text
    if record["triton_version"] is None:  # 3.0-3.2 store no version in the metadata: the running Triton's
        record["triton_version"] = getattr(sys.modules.get("triton"), "__version__", None)
    read = _IR_PARTS if record.get("ir_source") else _SOURCE_KEY_PARTS  # an IR file's key has no line or arguments
    not_exposed = [p for p in read if p not in record]
    if option_names is None:
        not_exposed.append("options")
    not_exposed += [p for p in ("triton_version", "triton_key", "backend_hash") if record[p] is None]
    record["not_exposed"] = not_exposed
    return record


# -- where records go -------------------------------------------------------------------------------------------
class _Sink:
    """This process's records file (a forked worker opens its own)."""

    def __init__(self) -> None:
        self.fd = -1
        self.pid = 0
        self.lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
        with self.lock:
            if self.pid != os.getpid():
                folder = records_folder()
                if folder is None:
                    return
                folder.mkdir(parents=True, exist_ok=True)
                self.fd = os.open(folder / f"{os.getpid()}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self.pid = os.getpid()
            os.write(self.fd, line)


_sink = _Sink()


def records_folder() -> Path | None:
    """`CAPTURE_ROOT/keys/<tag>` of the process's capture; None once kdb failed in this process."""
    from kdb.capture.cache import current

    capture = current()
    return None if capture is None else keys_folder(capture.layout.root, capture.layout.tag)


def keys_folder(capture_root: Path, tag: str) -> Path:
    return capture_root / "keys" / tag


def _write(src: Any, metadata: dict[str, Any], hit: bool, how: str, folder: str | None = None) -> None:
    try:
        _sink.write(build_record(src, metadata, hit, how, folder))
    except Exception as exc:  # noqa: BLE001 - recording never breaks a compile
        from kdb.capture.cache import say
        from kdb.capture.recording import one_line

        say("keyparts", f"the key's parts of a compile were not recorded ({one_line(exc)})")


# -- the listener, chained in front of the user's -------------------------------------------------------------
class _Listener:
    def __init__(self, after: Any) -> None:
        self.after = after

    def __call__(
        self, *, src: Any, metadata: Any, metadata_group: Any, times: Any, cache_hit: bool, **more: Any
    ) -> Any:
        paths = list(metadata_group.values()) if isinstance(metadata_group, dict) else []
        folder = Path(str(paths[0])).parent.name if paths else None
        _write(src, metadata if isinstance(metadata, dict) else {}, bool(cache_hit), "listener", folder)
        if self.after is not None:
            return self.after(
                src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit, **more
            )
        return None


def _compilation_knobs() -> Any:
    knobs = sys.modules.get("triton.knobs")
    compilation = getattr(knobs, "compilation", None)
    return compilation if compilation is not None and hasattr(type(compilation), "listener") else None


def install() -> bool:
    """Chain kdb's listener in front of the current one (again, if the user replaced it); False: this Triton has
    no listener (< 3.4) or is not loaded."""
    compilation = _compilation_knobs()
    if compilation is None:
        return False
    current = compilation.listener
    if not isinstance(current, _Listener):
        compilation.listener = _Listener(current)
    return True


# -- the compile Triton's listener did not see: the first one of a process, or any in a release without one -----
_pending: dict[str, Any] = {}


def attach(key: str) -> None:
    """Called when Triton makes a cache manager for `key` (inside `triton.compile`; in remote mode, when its
    RemoteCacheManager makes kdb's backend): chain the listener for later compiles; when this compile read no kdb
    listener, keep its source to record at its group's read or write (not for a dump or override manager)."""
    try:
        listening = install()
        frame = sys._getframe(1)
        for _ in range(6):
            frame = frame.f_back  # type: ignore[assignment]
            if frame is None:
                return
            if frame.f_locals.get("override") is True or frame.f_locals.get("dump") is True:
                return
            if frame.f_code.co_name == "compile" and frame.f_globals.get("__name__") == "triton.compiler.compiler":
                if not (listening and isinstance(frame.f_locals.get("compilation_listener"), _Listener)):
                    _pending[key] = frame.f_locals.get("src")
                return
    except Exception:  # noqa: BLE001 - recording never breaks a compile
        return


def group_seen(key: str, metadata_path: str | None, hit: bool) -> None:
    """The group of `key` was read (a hit) or written (a compile): record it if no listener will."""
    if key not in _pending:
        return
    try:
        data = Path(metadata_path).read_bytes() if metadata_path else None
    except OSError:
        data = None
    group_data_seen(key, data, hit)


def group_data_seen(key: str, metadata: bytes | None, hit: bool) -> None:
    """As `group_seen`, with the metadata JSON's bytes (remote mode: what kdb's backend served or was given)."""
    if key not in _pending:
        return
    src = _pending.pop(key)
    try:
        found = json.loads(metadata) if metadata else {}
    except ValueError:
        found = {}
    _write(src, found if isinstance(found, dict) else {}, hit, "metadata" if src is None else "compile frame", key)


# -- upkeep: a removed snapshot's records go with it ------------------------------------------------------------
def forget_keys(capture_root: Path, tag: str) -> bool:
    """`kdb rm TAG`: remove the tag's records (True when there were some)."""
    import shutil

    folder = keys_folder(capture_root, tag)
    if not folder.is_dir():
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def prune_keys(capture_root: Path, live: set[str], grace_s: float) -> list[str]:
    """`kdb gc`: remove the records of every tag that no longer exists: not a snapshot (`live`), nothing of it
    waiting in the capture spool, and no record written in the last `grace_s` (a capture running now, before its
    first commit). The tags removed."""
    root = capture_root / "keys"
    removed = []
    now = time.time()
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        tag = folder.name
        if tag in live or not folder.is_dir():
            continue
        if any(any((capture_root / part / tag).glob("*")) for part in ("spool", "commit", "writing")):
            continue
        try:
            times = [f.stat().st_mtime for f in folder.iterdir()] + [folder.stat().st_mtime]
        except OSError:  # written or removed meanwhile: next gc
            continue
        if any(now - t < grace_s for t in times):
            continue
        if forget_keys(capture_root, tag):
            removed.append(tag)
    return removed
