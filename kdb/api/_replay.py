"""`kdb toolchain`, `kdb replay` and `kdb bisect` as values (kdb/replay/)."""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kdb.api._session import Session
from kdb.errors import ToolchainError
from kdb.replay import toolchains
from kdb.replay.bisect import KernelBisect
from kdb.replay.run import Progress, ReplayOutcome, ReplayRequest
from kdb.replay.run import replay as run_replay
from kdb.store.catalog import Catalog


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


@dataclass(frozen=True)
class BisectRequest:
    """`kdb bisect A B`: the kernels that changed between A and B (or those `kernel` names: a cache key prefix or
    a name glob) replayed from A with every registered release between A's and B's."""

    a: str
    b: str
    kernel: str | None = None
    workers: int = 1
    timeout_s: float = 600.0


@dataclass(frozen=True)
class BisectOutcome:
    a: str
    b: str
    a_release: str
    b_release: str
    releases: list[str]  # the steps, oldest first
    kernels: list[KernelBisect]
    b_replayed: bool  # B's release is a step (else the last step is the release before it, B's real figures after)
    seconds: float


def bisect(session: Session, request: BisectRequest, progress: Progress | None = None) -> BisectOutcome:
    """Replay A's changed (or named) kernels with each release between A's and B's; the first release where each
    figure changed."""
    import fnmatch
    import tempfile
    import time

    from kdb.api._compare import DiffRequest, diff
    from kdb.diff.model import Status
    from kdb.replay.bisect import BISECT_FIGURES, Step, first_changes, releases_between
    from kdb.store.home import Home

    started = time.monotonic()
    a_release, b_release = _release_of(session, request.a), _release_of(session, request.b)
    chains = toolchains.load(session.local_home.root)
    steps = releases_between(list(chains), a_release, b_release)
    if not steps:
        raise ToolchainError(
            f"no toolchain after Triton {a_release} up to {b_release} is registered "
            f"({', '.join(sorted(chains, key=toolchains.release_key)) or 'none'}); run `kdb toolchain add {b_release}`"
        )
    result = diff(session, DiffRequest(request.a, request.b, fmt="json")).result
    unchanged = (Status.SAME, Status.ONLY_IN_A, Status.ONLY_IN_B, Status.AMBIGUOUS)
    pairs = [k for k in result.kernels if k.a is not None]
    if request.kernel:
        pattern = request.kernel
        pairs = [
            k
            for k in pairs
            if fnmatch.fnmatchcase(k.name, pattern) or k.a.cache_key.upper().startswith(pattern.upper())  # type: ignore[union-attr]
        ]
    else:
        pairs = [k for k in pairs if k.status not in unchanged]
    keys = sorted({k.a.cache_key for k in pairs if k.a is not None})
    scratch = Path(tempfile.mkdtemp(dir=_tmp(session), prefix="bisect-"))
    figures: dict[str, tuple[dict[str, str], dict[str, dict[str, Any]], dict[str, str]]] = {}
    try:
        for release in steps if keys else []:
            tag = f"bisect-{release}"
            req = ReplayRequest(request.a, release, tag, None, request.workers, request.timeout_s, keys)
            outcome = run_replay(session.home, session.local_home.root, req, progress, into=Home(scratch))
            with Catalog.open(Home(scratch).catalog, read_only=True) as catalog:
                values = catalog.queries.kernel_figures(tag, BISECT_FIGURES)
            failed = {f["cache_key"]: f["reason"] for f in outcome.failed}
            figures[release] = (outcome.mapping, values, failed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    found = []
    for k in pairs:
        assert k.a is not None
        ks = []
        for release in steps:
            mapping, values, failed = figures[release]
            folder = mapping.get(k.a.cache_key)
            reason = failed.get(k.a.cache_key, "not replayed")
            ks.append(Step(release, values.get(folder) if folder else None, None if folder else reason))
        changes = first_changes(k.a.values, ks, k.b.values if k.b is not None else None)
        not_replayed = {s.release: s.problem or "" for s in ks if s.values is None}
        found.append(KernelBisect(k.name, k.a.cache_key, k.b.cache_key if k.b else None, tuple(changes), not_replayed))
    return BisectOutcome(
        request.a,
        request.b,
        a_release,
        b_release,
        steps,
        found,
        bool(steps) and steps[-1] == b_release,
        time.monotonic() - started,
    )


def _tmp(session: Session) -> Path:
    folder = session.local_home.root / "tmp"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _release_of(session: Session, tag: str) -> str:
    """The Triton release most of a snapshot's kernels were compiled by."""
    with session.reader() as catalog:
        releases = [r for r in catalog.queries.snapshot_releases(tag) if r[0]]
    if not releases:
        raise ToolchainError(f"{tag}: no kernel records its Triton release, so no release can be replayed against it")
    return str(releases[0][0])
