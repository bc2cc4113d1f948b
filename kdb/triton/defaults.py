"""What each Triton release applies to a tuning option the user did not set: from kdb's table where it knows
the release, learned from the two snapshots of a diff where it does not.

The table (`release_defaults.json`, written by scripts/release_defaults.py from each release's own
`parse_options({})`) is exact for the releases and targets it holds. A user diffs right after an upgrade,
so side B is often a release (or a GPU) the table has never seen; kdb then learns the defaults from the
snapshots themselves (`OptionDefaults.learn`):

* **uniform options**: an option that holds one value on every kernel of a side (per backend, target and
  release, at least `UNIFORM_MIN_KERNELS` kernels) is what that release applied; when both sides are
  uniform and differ, the option changed with the release, not with the specialization;
* **votes**: for a release the table lacks, each identity group with one kernel a side whose other-side
  kernel sits at its own (known) default, with a value that differs from it, votes for the value this side
  holds (a value set by the user is the same on both sides, so only a difference shows what this release
  applied); the majority is the default;
* **arch-independent table values**: a known release with an unknown target takes the values every target
  of that release agrees on.

The table confirms where it knows the release; it is no longer required. Each thing kdb inferred is said in
one line (`OptionDefaults.assumptions`), shown by every diff output. Pure: no I/O beyond the package data.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

# release -> backend -> arch (gfx942, 90, ...) -> option -> value
RELEASE_DEFAULTS: dict[str, dict[str, dict[str, dict[str, Any]]]] = json.loads(
    resources.files("kdb.triton").joinpath("release_defaults.json").read_text()
)
# A side must hold this many kernels of a (backend, arch, release) before one value on all of them is taken
# for what the release applied (a lone kernel's explicit setting is not a release's default).
UNIFORM_MIN_KERNELS = 4
# Releases removed from the table by `forgetting` (tests: leave-one-release-out); never a user option.
_FORGOTTEN: set[str] = set()


class _Unknown:
    def __repr__(self) -> str:
        return "<unknown default>"


UNKNOWN: Any = _Unknown()


def _vt(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


@functools.lru_cache(maxsize=1024)
def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """'3.4.0' -> (3, 4); a release family such as '3.0-3.1' -> its newest member (3, 1)."""
    if not version:
        return None
    found = re.findall(r"(\d+)\.(\d+)", version)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def known_releases() -> list[str]:
    return sorted((v for v in RELEASE_DEFAULTS if v not in _FORGOTTEN), key=_vt)


@functools.lru_cache(maxsize=1024)
def table_release(triton_version: str | None) -> str | None:
    """The table's release of the same major.minor as `triton_version` (3.5.0 -> 3.5.1), else None."""
    wanted = version_tuple(triton_version)
    if wanted is None:
        return None
    return next((v for v in known_releases() if version_tuple(v) == wanted), None)


def _arch_key(arch: str | None) -> str:
    return str(arch or "").lower().removeprefix("sm_").removeprefix("sm").split(":", 1)[0]


@functools.lru_cache(maxsize=1024)
def table_defaults(backend: str | None, arch: str | None, triton_version: str | None) -> dict[str, Any] | None:
    """The options `triton_version` applies by default on `backend`/`arch`, as the table records them; None
    when the table does not hold that release, backend and target."""
    release = table_release(triton_version)
    if release is None or backend is None:
        return None
    values = (RELEASE_DEFAULTS[release].get(backend) or {}).get(_arch_key(arch))
    return None if values is None or "__error__" in values else values


@functools.lru_cache(maxsize=1024)
def arch_independent_defaults(backend: str | None, triton_version: str | None) -> dict[str, Any]:
    """The defaults every target of a known release agrees on (what it applies to a target the table lacks)."""
    release = table_release(triton_version)
    if release is None or backend is None:
        return {}
    tables = [v for v in (RELEASE_DEFAULTS[release].get(backend) or {}).values() if "__error__" not in v]
    if not tables:
        return {}
    keys = set.intersection(*(set(t) for t in tables))
    return {k: tables[0][k] for k in sorted(keys) if all(t[k] == tables[0][k] for t in tables)}


def option_default(backend: str | None, option: str, triton_version: str | None, arch: str | None = None) -> Any:
    """The value a release applies to `option` when the user asks for nothing; `UNKNOWN` when the table cannot
    tell (a release or a target it does not hold). `arch` None: the value every target of the release agrees on."""
    defaults = (
        table_defaults(backend, arch, triton_version)
        if arch is not None
        else arch_independent_defaults(backend, triton_version)
    )
    if not defaults or option not in defaults:
        return UNKNOWN
    return defaults[option]


@contextlib.contextmanager
def forgetting(*releases: str) -> Iterator[None]:
    """Test hook (leave-one-release-out): run with `releases` removed from kdb's table, as if kdb had never
    seen them. Not a user option."""
    unknown = [r for r in releases if r not in RELEASE_DEFAULTS]
    if unknown:
        raise ValueError(f"not in the release table: {unknown}")
    added = set(releases) - _FORGOTTEN
    _FORGOTTEN.update(added)
    _clear_caches()
    try:
        yield
    finally:
        _FORGOTTEN.difference_update(added)
        _clear_caches()


def _clear_caches() -> None:
    for fn in (table_release, table_defaults, arch_independent_defaults):
        fn.cache_clear()


# -- learning from the snapshots of a diff ----------------------------------------------------------------
Group = tuple[str | None, str | None, str | None]  # (backend, arch, triton_version) of one side's kernels


def group_of(options: Mapping[str, Any], version_hint: str | None = None) -> Group:
    return (options.get("backend"), _arch_text(options.get("arch")), options.get("triton_version") or version_hint)


def _arch_text(arch: Any) -> str | None:
    return None if arch is None else str(arch)


def _frozen(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


@dataclass
class SideDefaults:
    """One side's defaults per group: the table's where it holds the release and target, else learned."""

    label: str
    table: dict[Group, dict[str, Any] | None] = field(default_factory=dict)
    learned: dict[Group, dict[str, Any]] = field(default_factory=dict)
    uniform: dict[Group, dict[str, Any]] = field(default_factory=dict)

    def default(self, group: Group, option: str) -> Any:
        table = self.table.get(group)
        if table is not None:
            return table.get(option, ABSENT)
        learned = self.learned.get(group, {})
        return learned.get(option, UNKNOWN)

    def is_uniform(self, group: Group, option: str, value: Any) -> bool:
        uniform = self.uniform.get(group)
        return uniform is not None and option in uniform and uniform[option] == _frozen(value)


# An option the release does not have: it compiles as if at its default.
ABSENT: Any = object()


@dataclass
class OptionDefaults:
    """Both sides' defaults for one diff; `assumptions` says, one line each, what kdb had to infer."""

    a: SideDefaults
    b: SideDefaults
    assumptions: tuple[str, ...] = ()

    @classmethod
    def empty(cls) -> OptionDefaults:
        return cls(SideDefaults("A"), SideDefaults("B"))

    @classmethod
    def learn(
        cls,
        a_options: Sequence[KernelOptions],
        b_options: Sequence[KernelOptions],
        a_label: str = "A",
        b_label: str = "B",
    ) -> OptionDefaults:
        """`*_options`: per kernel (identity key, options document, version hint). Learns each side's defaults."""
        a, b = SideDefaults(a_label), SideDefaults(b_label)
        for side, rows in ((a, a_options), (b, b_options)):
            _fill_table_and_uniform(side, rows)
        singles = _one_kernel_a_side(a_options, b_options)
        for side, other, mine in ((a, b, 0), (b, a, 1)):
            unknown_groups = [g for g, t in side.table.items() if t is None]
            if not unknown_groups:
                continue
            votes = _votes(other, [(s[mine], s[1 - mine]) for s in singles], set(unknown_groups))
            for group in unknown_groups:
                learned = dict(arch_independent_defaults(group[0], group[2]))
                for option, counter in votes.get(group, {}).items():
                    (value, n), *rest = counter.most_common(2) + [(None, 0)]
                    if n > rest[0][1]:  # a strict majority of the votes
                        learned[option] = _thawed(value)
                for option, value in side.uniform.get(group, {}).items():
                    learned.setdefault(option, _thawed(value))
                side.learned[group] = learned
        return cls(a, b, tuple(_assumption_lines(a) + _assumption_lines(b)))

    def side_default(self, side: str, group: Group, option: str) -> Any:
        """`side` 'a' or 'b': the default of `option` for `group` (the table's, else learned, else UNKNOWN)."""
        sd = self.a if side == "a" else self.b
        if group not in sd.table:
            return table_or_inferred_default(group, option)
        return sd.default(group, option)

    def release_change(self, group_a: Group, group_b: Group, option: str, va: Any, vb: Any) -> bool:
        """Both sides hold one value of `option` on every kernel, and they differ: the release changed it."""
        return self.a.is_uniform(group_a, option, va) and self.b.is_uniform(group_b, option, vb)


def table_or_inferred_default(group: Group, option: str) -> Any:
    """Without a diff's context: the table's default for the group, else the release's arch-independent one."""
    table = table_defaults(*group)
    if table is None:
        table = arch_independent_defaults(group[0], group[2]) or None
        if table is None or option not in table:
            return UNKNOWN
    return table.get(option, ABSENT)


KernelOptions = tuple[str | None, Mapping[str, Any], str | None]  # (identity key, options document, version hint)
Single = tuple[tuple[Group, Mapping[str, Any]], tuple[Group, Mapping[str, Any]]]  # (A's, B's) of a 1-1 group


def _one_kernel_a_side(a_options: Sequence[KernelOptions], b_options: Sequence[KernelOptions]) -> list[Single]:
    """The identity groups holding exactly one kernel on each side: (group, values) of A's and of B's."""
    by_key: dict[str, tuple[list[tuple[Group, Mapping[str, Any]]], list[tuple[Group, Mapping[str, Any]]]]] = {}
    for rows, idx in ((a_options, 0), (b_options, 1)):
        for key, doc, hint in rows:
            if key is not None:
                by_key.setdefault(key, ([], []))[idx].append((group_of(doc, hint), doc.get("values") or {}))
    return [(ga[0], gb[0]) for ga, gb in by_key.values() if len(ga) == 1 and len(gb) == 1]


def _votes(
    other: SideDefaults,
    pairs: list[tuple[tuple[Group, Mapping[str, Any]], tuple[Group, Mapping[str, Any]]]],
    wanted: set[Group],
) -> dict[Group, dict[str, Counter]]:
    """For each group of this side: each option's values on kernels whose one counterpart sits at its default."""
    votes: dict[Group, dict[str, Counter]] = {}
    for (group, vals_mine), (other_group, vals_other) in pairs:
        if group not in wanted:
            continue
        for option in set(vals_mine) | set(vals_other):
            if vals_mine.get(option) is None:  # not recorded here: says nothing of this release's default
                continue
            # Equal values pair whatever the defaults are, and a value equal to the other side's default may
            # be an explicit setting: only a kernel that differs from its counterpart at its default shows
            # what this release applied (an explicit setting is the same on both sides).
            if _frozen(vals_mine.get(option)) == _frozen(vals_other.get(option)):
                continue
            if _at_known_default(other, other_group, option, vals_other.get(option)):
                votes.setdefault(group, {}).setdefault(option, Counter())[_frozen(vals_mine.get(option))] += 1
    return votes


def _at_known_default(side: SideDefaults, group: Group, option: str, value: Any) -> bool:
    if value is None:  # not recorded: compiled at the release's default
        return True
    default = side.default(group, option)
    if default is UNKNOWN:
        return side.is_uniform(group, option, value)
    return default is ABSENT or value == default


def _thawed(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


_NO_VALUES: Mapping[str, Any] = {}


def _fill_table_and_uniform(side: SideDefaults, rows: Iterable[KernelOptions]) -> None:
    values_by_group: dict[Group, dict[str, set[Any]]] = {}
    counts: Counter[Group] = Counter()
    # (group, id of a values mapping) -> the group's option count when it was last added: the same mapping again
    # (kernels sharing one decoded options document, kdb/diff/sides.py) adds nothing while no option is new
    added: dict[tuple[Group, int], int] = {}
    for _key, doc, hint in rows:
        group = group_of(doc, hint)
        counts[group] += 1
        seen = values_by_group.setdefault(group, {})
        vals = doc.get("values") or _NO_VALUES
        if added.get((group, id(vals))) == len(seen):
            continue
        for option in set(vals) | set(seen):
            seen.setdefault(option, set()).add(_frozen(vals.get(option)))
        added[group, id(vals)] = len(seen)
    for group, options in values_by_group.items():
        side.table[group] = table_defaults(group[0], group[1], group[2])
        if counts[group] >= UNIFORM_MIN_KERNELS:
            side.uniform[group] = {o: next(iter(v)) for o, v in options.items() if len(v) == 1}


def _assumption_lines(side: SideDefaults) -> list[str]:
    lines = []
    newest = (known_releases() or ["?"])[-1]
    for group, table in sorted(side.table.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        if table is not None:
            continue
        backend, arch, version = group
        where = f"{backend} {arch}" if arch else str(backend)
        release = table_release(version)
        if version is None:
            what = f"{side.label}: the Triton release of {where} kernels is not recorded"
        elif release is None:
            wanted, top = version_tuple(version), version_tuple(newest)
            relation = "newer than" if wanted and top and wanted > top else "not among"
            what = f"{side.label}: Triton {version} is {relation} the releases kdb knows (newest {newest})"
        else:
            what = f"{side.label}: kdb's table of Triton {release} has no {where} defaults"
        lines.append(f"{what}: option defaults of {where} inferred from the snapshot")
    return lines
