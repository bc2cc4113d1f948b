"""`kdb bisect A B`: the first release where each figure of a kernel changed (pure: values in, findings out).

A is replayed with every registered release between A's and B's (B's own included when registered), each a step.
With a dozen releases at most, every step is compiled: a linear walk finds the first change exactly, where a binary
search would miss a figure that changed and changed back. A step whose replay failed leaves the first change
uncertain between the last known release and the next one; it is said, never skipped silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdb.figures import BY_COLUMN, COMPARED

# The figures a bisect names (issue 39): registers, spills, scratch/local, LDS/shared, occupancy.
BISECT_FIGURES: tuple[str, ...] = tuple(c for c in COMPARED if c not in ("code_size", "instr_count"))


@dataclass(frozen=True)
class Step:
    release: str
    values: Mapping[str, Any] | None  # the replayed kernel's figures; None: not replayed
    problem: str | None = None  # why it was not replayed


@dataclass(frozen=True)
class FirstChange:
    figure: str
    label: str
    release: str | None  # the first release whose replay differs from A's value; None: no step differs
    before: Any
    after: Any
    uncertain: tuple[str, ...] = ()  # releases before it that could not be replayed: the change may sit there
    b_value: Any = None  # B's real figure


@dataclass(frozen=True)
class KernelBisect:
    name: str
    a_cache_key: str
    b_cache_key: str | None
    changes: tuple[FirstChange, ...]
    not_replayed: Mapping[str, str] = field(default_factory=dict)  # release -> reason


def release_key(version: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version or "")[:3])


def releases_between(registered: Sequence[str], a_release: str, b_release: str) -> list[str]:
    """The registered releases from A's (left out) to B's (kept), in that order: oldest first for an upgrade,
    newest first for a downgrade."""
    low, high = release_key(a_release), release_key(b_release)
    if low <= high:
        return sorted((v for v in registered if low < release_key(v) <= high), key=release_key)
    return sorted((v for v in registered if high <= release_key(v) < low), key=release_key, reverse=True)


def first_changes(
    a_values: Mapping[str, Any], steps: Sequence[Step], b_values: Mapping[str, Any] | None
) -> list[FirstChange]:
    """Per figure that changes on some step (or differs between A and B): the first step that differs from A."""
    found = []
    for figure in BISECT_FIGURES:
        start = a_values.get(figure)
        b_value = None if b_values is None else b_values.get(figure)
        before, uncertain, hit = start, [], None
        for step in steps:
            if step.values is None:
                uncertain.append(step.release)
                continue
            value = step.values.get(figure)
            if value != start:
                hit = (step.release, value)
                break
            before, uncertain = value, []
        if hit is None and b_value == start:
            continue
        release, after = hit if hit is not None else (None, b_value)
        found.append(FirstChange(figure, BY_COLUMN[figure].label, release, before, after, tuple(uncertain), b_value))
    return found
