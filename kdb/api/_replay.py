"""`kdb toolchain`, `kdb replay` and `kdb bisect` as values (kdb/replay/)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from kdb.api._session import Session
from kdb.replay import toolchains
from kdb.replay.run import Progress, ReplayOutcome, ReplayRequest
from kdb.replay.run import replay as run_replay


def toolchain_add(session: Session, version: str, python: str | None = None) -> dict[str, Any]:
    """Register `python` (an interpreter whose Triton is `version`), or make one with pip under the local home."""
    return asdict(toolchains.add(session.local_home.root, version, python))


def toolchain_list(session: Session) -> list[dict[str, Any]]:
    chains = toolchains.load(session.local_home.root)
    return [asdict(chains[v]) for v in sorted(chains, key=toolchains.release_key)]


def toolchain_rm(session: Session, version: str) -> dict[str, Any]:
    return asdict(toolchains.remove(session.local_home.root, version))


def replay(session: Session, request: ReplayRequest, progress: Progress | None = None) -> ReplayOutcome:
    """Compile every kernel of `request.source_tag` from its stored TTIR with `request.version`; ingest the result
    as `request.new_tag`."""
    session.record_captures(request.source_tag)
    return run_replay(session.home, session.local_home.root, request, progress)
