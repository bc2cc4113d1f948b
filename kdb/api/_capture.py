"""`kdb capture env|check|commit|status` as values: kdb as Triton's cache (kdb/capture/)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from kdb.api._session import Session
from kdb.errors import InputError


def capture_tag(tag: str | None) -> str:
    """The capture's snapshot: `tag`, else $KDB_CAPTURE_TAG, else today's (checked against the tag rules)."""
    from kdb.capture.cache import default_tag
    from kdb.store.spool import check_tag

    # an explicit `--tag ''` is a tag that breaks the rules, not a request for the default
    return check_tag(tag if tag is not None else os.environ.get("KDB_CAPTURE_TAG") or default_tag())


def environment(session: Session, tag: str | None, *, remote: bool = False) -> list[tuple[str, str]]:
    """The (name, value) pairs that make Triton use this kdb home as its cache (`eval $(kdb capture env)`)."""
    home = session.home
    pairs = []
    if remote:
        pairs += [
            ("TRITON_CACHE_MANAGER", "triton.runtime.cache:RemoteCacheManager"),
            ("TRITON_REMOTE_CACHE_BACKEND", "kdb.capture:RemoteBackend"),
        ]
    else:
        pairs.append(("TRITON_CACHE_MANAGER", "kdb.capture:CacheManager"))
    if home.location is not None:
        pairs += [("KDB_CATALOG", home.location.url), ("KDB_STORE", str(home.root.resolve()))]
    else:
        pairs.append(("KDB_HOME", str(home.root.expanduser().resolve())))
    pairs.append(("KDB_CAPTURE_TAG", capture_tag(tag)))
    return pairs


def check() -> str:
    """Which of Triton's cache hooks the Triton this Python imports has; InputError (exit 3) when it has neither,
    or when a module shadows it or it cannot be imported."""
    from kdb.capture.hooks import triton_hooks

    hooks = triton_hooks()
    if not hooks.usable:
        raise InputError(hooks.describe())
    return hooks.describe()


@dataclass(frozen=True)
class Committed:
    tag: str
    folders: int


def commit(session: Session, tag: str | None, *, wait_s: float = 60.0) -> Committed:
    """Record what captures of the tag left spooled (a process killed, the catalog busy at its exit)."""
    from kdb.capture.cache import capture_root, record
    from kdb.store.spool import SpoolLayout

    layout = SpoolLayout(capture_root(session.home), capture_tag(tag))
    keys, adopted = record(session.home, layout, wait_s)
    return Committed(layout.tag, len(keys) + len(adopted))


def status(session: Session, tag: str | None) -> list[str]:
    """Folders of the tag spooled and not recorded yet, one line each kind; folders the index serves."""
    from kdb.capture.cache import status_lines

    return status_lines(session.home, capture_tag(tag))


def misses(session: Session, tag: str | None, *, after_warmup: bool = False) -> dict:
    """Every compile of the tag's captures (not a hit), with the nearest earlier specialization of the same kernel
    kdb held and what differs, in words; those after warm-up first (kdb/capture/misses.py). A JSON document."""
    from kdb.capture.keyparts import keys_folder
    from kdb.capture.misses import as_document, explain, read_all
    from kdb.store.spool import capture_root

    name = capture_tag(tag)
    read = read_all(keys_folder(capture_root(session.home), name).parent)
    return as_document(name, explain(read.records, name, after_warmup), after_warmup, len(read.damaged))
