"""`kdb capture misses`: every compile of a capture, with the nearest earlier specialization of the same kernel kdb
held and what differs, in words (issue 42). Pure functions over the records kdb/capture/keyparts.py writes, but for
`read_records`, which reads them.

A compile (a record with `hit` false) is compared with every earlier record (hit or compile, any tag of the home)
of a kernel of the same name: the nearest is the one fewest parts differ from, the latest among equals. The parts
are told in the order Triton's key is built: the Triton release and its own sources, the backend, the target, the
kernel's source, the specialization (argument types, attributes, constexpr values), the options, the environment.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIRST = "first compile of this kernel"
PATH_ONLY = "debug locations differ only in a path"  # the words (Inductor's kernel in another folder)
WARMUP_PHASES = ("", "warmup", "warm-up", "warm_up")
_PATHS = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.+@=-]+)+/?")


@dataclass(frozen=True)
class Explained:
    record: dict[str, Any]
    nearest: dict[str, Any] | None
    differs: tuple[str, ...]

    @property
    def after_warmup(self) -> bool:
        return after_warmup(self.record)


def after_warmup(record: dict[str, Any]) -> bool:
    """A compile after its process marked the end of warm-up (KDB_CAPTURE_PHASE set, not to warm-up)."""
    return (record.get("phase") or "").lower() not in WARMUP_PHASES


@dataclass(frozen=True)
class Read:
    """The records under a `keys/` folder, and the lines that were not records (`damaged`: `tag/pid.jsonl` once
    per such line): a process killed mid-write, or a damaged file."""

    records: list[dict[str, Any]]
    damaged: tuple[str, ...] = ()


def read_all(folder: Path) -> Read:
    """Every record under `folder` (`keys/`: one folder per tag, one file per process), each with its `tag`, time
    ordered; a line that is not a JSON object is counted in `damaged`, never skipped silently."""
    out: list[dict[str, Any]] = []
    damaged: list[str] = []
    for path in sorted(folder.glob("*/*.jsonl")) if folder.is_dir() else []:
        for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                damaged.append(f"{path.parent.name}/{path.name}")
                continue
            record["tag"] = path.parent.name
            out.append(record)
    out.sort(key=lambda r: (r.get("time") or 0.0, r.get("pid") or 0))
    return Read(out, tuple(damaged))


def read_records(folder: Path) -> list[dict[str, Any]]:
    """The records of `read_all` (its damaged lines left out)."""
    return read_all(folder).records


# -- what differs, in words -------------------------------------------------------------------------------------
def _short(value: Any) -> str:
    return str(value)[:8] if value is not None else "unknown"


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def _only_paths(a: Any, b: Any) -> bool:
    return _PATHS.sub("<path>", _shown(a)) == _PATHS.sub("<path>", _shown(b))


def _triton(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    a, b = old.get("triton_version"), new.get("triton_version")
    if a != b:
        return [f"Triton {a} → {b}"]
    out = []
    if None not in (old.get("triton_key"), new.get("triton_key")) and old["triton_key"] != new["triton_key"]:
        out.append(f"Triton's own sources changed ({b}: key {_short(old['triton_key'])} → {_short(new['triton_key'])})")
    if None not in (old.get("backend_hash"), new.get("backend_hash")) and old["backend_hash"] != new["backend_hash"]:
        out.append(_backend_change(old, new))
    if old.get("target") != new.get("target"):
        out.append(f"target {old.get('target')} → {new.get('target')}")
    return out


_TOOL_VERSIONS = (re.compile(r"\bV(\d+(?:\.\d+)+)"), re.compile(r"release (\d+(?:\.\d+)+)"))


def _tool_version(text: str) -> str | None:
    found = next((m for m in (p.search(text) for p in _TOOL_VERSIONS) if m), None)
    return found.group(1) if found else None


def _backend_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    """A changed backend hash in words: the compiler version its text names (NVIDIA's is `ptxas --version`), else
    the first line of its text that differs; records without the text give the digests."""
    a, b = old.get("backend_hash_text"), new.get("backend_hash_text")
    if isinstance(a, str) and isinstance(b, str):
        va, vb = _tool_version(a), _tool_version(b)
        if va and vb and va != vb and "ptxas" in a + b:
            return f"backend compiler ptxas {va} → {vb}"
        lines = [(x, y) for x, y in zip(a.splitlines(), b.splitlines(), strict=False) if x != y]
        if lines:
            return f"backend hash {lines[0][0][:60]!r} → {lines[0][1][:60]!r} (its compiler's version)"
    return f"backend hash {_short(old['backend_hash'])} → {_short(new['backend_hash'])} (its compiler's version)"


def _source(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    if "body_digest" not in old or "body_digest" not in new:
        return []
    if old["body_digest"] != new["body_digest"]:
        same = old.get("body_digest_without_paths")
        if same is not None and same == new.get("body_digest_without_paths"):
            return [PATH_ONLY]
        return ["kernel source changed"]
    if old.get("def_line") != new.get("def_line"):
        return [f"source moved from line {old.get('def_line')} to {new.get('def_line')}, body unchanged"]
    if old.get("function_key") != new.get("function_key"):
        return ["a function it calls or a constexpr global it reads changed (its own body and line unchanged)"]
    return []


def _specialization(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    order = list(new.get("arg_order") or []) or sorted(new.get("signature") or {})
    index = {name: i for i, name in enumerate(order)}
    out = []
    sig_a, sig_b = old.get("signature") or {}, new.get("signature") or {}
    for name in sorted(set(sig_a) | set(sig_b), key=lambda n: (index.get(n, len(index)), n)):
        a, b = sig_a.get(name), sig_b.get(name)
        if a == b:
            continue
        where = f"arg {index[name]}" if name in index else f"arg {name}"
        if a and b and a.startswith("*") and b.startswith("*"):
            out.append(f"{where} dtype {a[1:]}→{b[1:]}")
        else:
            out.append(f"{where} type {a or 'none'}→{b or 'none'}")
    attrs_a, attrs_b = old.get("attrs") or {}, new.get("attrs") or {}
    for name in sorted(set(attrs_a) | set(attrs_b), key=lambda n: (index.get(n, len(index)), n)):
        a, b = attrs_a.get(name) or None, attrs_b.get(name) or None
        if a != b:
            where = f"arg {index[name]}" if name in index else f"arg {name}"
            out.append(f"{where} attributes {a or 'none'}→{b or 'none'}")
    const_a, const_b = old.get("constexprs") or {}, new.get("constexprs") or {}
    for name in sorted(set(const_a) | set(const_b), key=lambda n: (index.get(n, len(index)), n)):
        a, b = const_a.get(name), const_b.get(name)
        if a != b:
            out.append(f"constexpr {name} {a if a is not None else 'none'}→{b if b is not None else 'none'}")
    return out


def _options(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Options both records hold that differ; across releases, one only a release has and a path that moved with
    its install are the release's, said by `Triton A → B`."""
    a, b = old.get("options") or {}, new.get("options") or {}
    same_release = old.get("triton_version") == new.get("triton_version")
    out = []
    for name in sorted(set(a) | set(b)):
        if a.get(name) == b.get(name):
            continue
        if name not in a or name not in b:
            if same_release:
                out.append(f"option {name} {_shown(a.get(name, 'none'))}→{_shown(b.get(name, 'none'))}")
        elif _only_paths(a[name], b[name]):
            if same_release:
                out.append(f"{name} differs only in a path")
        else:
            out.append(f"{name} {_shown(a[name])}→{_shown(b[name])}")
    return out


def _env_value(record: dict[str, Any], name: str) -> str:
    if name not in (record.get("env") or {}):
        return "unset"
    raw = (record.get("env_raw") or {}).get(name)
    return f'"{raw}"' if raw is not None else f"{record['env'][name]} (set in Python)"


def _environment(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    names = sorted(set(old.get("env") or {}) | set(new.get("env") or {}))
    out = []
    for name in names:
        a, b = _env_value(old, name), _env_value(new, name)
        if (old.get("env") or {}).get(name) != (new.get("env") or {}).get(name) or a != b:
            out.append(f"{name} {a} → {b}")
    return out


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two records of a kernel, in words, in the order Triton's key is built; the kernel's
    file alone differing (a path, as when Inductor writes the same kernel into another folder) in the issue's
    words. A part either record could not read (`not_exposed`) is compared in neither: `unknown` tells it."""
    hidden = set(old.get("not_exposed") or []) | set(new.get("not_exposed") or [])
    if hidden:
        old = {k: v for k, v in old.items() if k not in hidden}
        new = {k: v for k, v in new.items() if k not in hidden}
    out = _triton(old, new) + _source(old, new) + _specialization(old, new) + _options(old, new)
    out += _environment(old, new)
    if not out and None not in (old.get("file"), new.get("file")) and old["file"] != new["file"]:
        return [PATH_ONLY]
    return out


def unknown(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The parts either record could not read (`not_exposed`), each said once with the release that hid it:
    they may differ, and kdb cannot say."""
    out: list[str] = []
    seen: set[str] = set()
    for record in (new, old):
        missing = [str(p) for p in record.get("not_exposed") or [] if p not in seen]
        seen.update(missing)
        if missing:
            release = record.get("triton_version") or "(release unknown)"
            it = "it" if len(missing) == 1 else "they"
            out.append(f"{', '.join(missing)} not exposed by Triton {release}: cannot say whether {it} changed")
    return out


def _unexplained(old: dict[str, Any]) -> str:
    key = str(old.get("folder") or old.get("cache_key"))[:12]  # as the table's key column
    return f"no recorded part differs from {key}: the key has a part kdb does not see"


# -- every compile, explained -------------------------------------------------------------------------------------
def explain_one(record: dict[str, Any], held: list[dict[str, Any]]) -> Explained:
    """`record` against the records before it of a kernel of its name (`held`, in time order)."""
    best: tuple[int, int, dict[str, Any], list[str]] | None = None
    for i, old in enumerate(held):
        if old is record or (old.get("time") or 0.0) > (record.get("time") or 0.0):
            continue
        if old.get("cache_key") == record.get("cache_key"):
            words = [f"the same key was compiled before (process {old.get('pid')}, tag {old.get('tag')})"]
            return Explained(record, old, tuple(words))
        words = differences(old, record)
        score = (len(words), -i)  # the parts it cannot see (`unknown`) are told, not counted
        if best is None or score < best[:2]:
            best = (score[0], score[1], old, words)
    if best is None:
        return Explained(record, None, (FIRST,))
    _, _, old, words = best
    return Explained(record, old, tuple((words or [_unexplained(old)]) + unknown(old, record)))


def explain(records: list[dict[str, Any]], tag: str, only_after_warmup: bool = False) -> list[Explained]:
    """Every compile of `tag` (records of every tag, in time order), those after warm-up first."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    out = []
    for record in records:
        name = str(record.get("name"))
        held = by_name.setdefault(name, [])
        listed = record.get("tag") == tag and not record.get("hit")
        if listed and (not only_after_warmup or after_warmup(record)):
            out.append(explain_one(record, _latest_per_key(held)))
        held.append(record)
    out.sort(key=lambda e: (not e.after_warmup, e.record.get("time") or 0.0))
    return out


def _latest_per_key(held: list[dict[str, Any]]) -> list[dict[str, Any]]:
    latest: dict[Any, dict[str, Any]] = {}
    for record in held:
        latest.pop(record.get("cache_key"), None)
        latest[record.get("cache_key")] = record
    return list(latest.values())


def as_document(tag: str, explained: list[Explained], only_after_warmup: bool, damaged: int = 0) -> dict[str, Any]:
    """The JSON of `kdb capture misses --format json`: plain field names, one entry per compile; `damaged`: the
    record lines read that were not records (`damaged_records`)."""
    compiles = []
    for e in explained:
        r, n = e.record, e.nearest or {}
        compiles.append(
            {
                "kernel": r.get("name"),
                "file": r.get("file"),
                "def_line": r.get("def_line"),
                "cache_key": r.get("cache_key"),
                "folder": r.get("folder"),
                "time": r.get("time"),
                "pid": r.get("pid"),
                "phase": r.get("phase"),
                "after_warmup": e.after_warmup,
                "triton_version": r.get("triton_version"),
                "target": r.get("target"),
                "differs": list(e.differs),
                "nearest_cache_key": n.get("cache_key"),
                "nearest_folder": n.get("folder"),
                "nearest_tag": n.get("tag"),
                "nearest_was_hit": n.get("hit"),
                "recorded_by": r.get("how"),
                "not_exposed": r.get("not_exposed") or [],
            }
        )
    after = sum(1 for e in explained if e.after_warmup)
    return {
        "tag": tag,
        "only_after_warmup": only_after_warmup,
        "compiles": compiles,
        "after_warmup_count": after,
        "damaged_records": damaged,
    }
