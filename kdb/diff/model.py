"""The typed result of `kdb diff`: statuses, kernel facts, kernel diffs, the whole result, deep views.

Every value here is frozen; the engine builds them, the rules classify them, the renderers read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any

from kdb.figures import COMPARED, UNKNOWN_STAGES

# Facts compared per matched pair, in display order, and the stages whose failure leaves each unknown.
METRICS: tuple[str, ...] = COMPARED
LIMITERS: tuple[str, ...] = ("occupancy_limiter", "occupancy_llvm_limiter")
# Where the cost sits (issue 28; migration 010): loop nest, scratch per loop depth, distance to occupancy cliffs.
LOOP_FACTS: tuple[str, ...] = (
    "max_loop_depth",
    "scratch_instr_in_loops",
    "loop_weighted_scratch",
    "scratch_by_loop_depth",
    "registers_to_cliff",
    "registers_to_gain",
)
# Measured time (issue 29; migration 011): the kernel_times view's launches, ns and share of the run's GPU time.
TIME_FACTS: tuple[str, ...] = ("measured_launches", "measured_ns", "measured_share")
FACT_COLUMNS: tuple[str, ...] = METRICS + LIMITERS + LOOP_FACTS + TIME_FACTS


KEY_LENGTH = 6  # the shortest key kdb prints


def short_key(key: str | None, length: int = KEY_LENGTH) -> str:
    """The first `length` characters of the kernel's folder name (Inductor caches nest it: `triton/0/<folder>`);
    `kdb show --kernel KEY` and `kdb diff --kernel KEY` take it back (any case)."""
    return key.rsplit("/", 1)[-1][:length] if key else "-"


def key_length(keys: Iterable[str], minimum: int = KEY_LENGTH) -> int:
    """The shortest length, at least `minimum`, at which the folder-name prefix of every key names that folder
    alone: no other folder name, and no other whole cache key, starts with it (compared in upper case, as the
    lookups compare). Every key printed at this length is accepted by `kdb show` and `kdb diff --kernel`."""
    folders: dict[str, set[str]] = {}  # folder name (upper case) -> the whole keys that end with it
    for key in keys:
        folders.setdefault(key.rsplit("/", 1)[-1].upper(), set()).add(key.upper())
    longest = max((len(f) for f in folders), default=minimum)
    length = minimum
    while length < longest:
        owners: dict[str, set[str]] = {}
        for folder, whole in folders.items():
            for text in {folder, *whole}:
                owners.setdefault(text[:length], set()).add(folder)
        if all(owners[folder[:length]] == {folder} for folder in folders):
            return length
        length += 1
    return max(length, minimum)


DEFAULT_MIN_MATCH = 0.5


@dataclass(frozen=True)
class Rule:
    """One --fail-on rule (parsed and evaluated in kdb/diff/rules.py)."""

    text: str
    kind: str  # one of rules.SIMPLE_RULES, or a register rule name (vgpr, sgpr, agpr, registers)
    threshold: float = 0.0
    percent: bool = False


@dataclass(frozen=True)
class DiffOptions:
    """What a diff is asked for, beside its two sides (the options of `kdb diff` and `kdb.api.Database.diff`)."""

    across_targets: bool = False  # pair kernels across GPU targets (identity_any_target)
    rules: tuple[Rule, ...] = ()  # --fail-on
    min_match: float = DEFAULT_MIN_MATCH  # below this share of the smaller side paired, the comparison is untrusted
    allow_unknown: bool = False  # a rule that met an unknown figure does not fail the gate
    kernel: str | None = None  # --kernel: the deep views of the kernels it names
    limit: int | None = None  # of those, the first N in report order
    raw_isa: bool = False  # the deep views' ISA diffed as the files hold it


class Status(Enum):
    """What became of one kernel. The value is the label the table and markdown reports show."""

    SAME = "same"  # paired, every compared fact equal
    REGRESSED = "regressed"  # paired and changed: the verdicts of kdb/diff/rules.py
    IMPROVED = "improved"
    MIXED = "mixed"
    NEUTRAL = "neutral"
    ONLY_IN_A = "only in A"
    ONLY_IN_B = "only in B"
    AMBIGUOUS = "ambiguous"

    @property
    def label(self) -> str:
        return self.value

    @property
    def paired(self) -> bool:
        """The kernel has a counterpart on the other side (same or changed)."""
        return self in _PAIRED

    @property
    def changed(self) -> bool:
        return self in _CHANGED

    @property
    def worse(self) -> bool:
        """Counted as regressed (regressed or mixed)."""
        return self in (Status.REGRESSED, Status.MIXED)

    @property
    def report_status(self) -> str:
        """The `status` of the JSON and CSV reports: matched, changed, only_a, only_b, ambiguous."""
        return _REPORT_STATUS[self]

    @property
    def verdict(self) -> str | None:
        """The `verdict` of the JSON and CSV reports: set for changed kernels only."""
        return self.value if self in _CHANGED else None


_CHANGED = frozenset({Status.REGRESSED, Status.IMPROVED, Status.MIXED, Status.NEUTRAL})
_PAIRED = _CHANGED | {Status.SAME}
_REPORT_STATUS = {
    **{s: "changed" for s in _CHANGED},
    Status.SAME: "matched",
    Status.ONLY_IN_A: "only_a",
    Status.ONLY_IN_B: "only_b",
    Status.AMBIGUOUS: "ambiguous",
}
# Report statuses in report order (and the keys of the JSON summary besides regressed/improved).
REPORT_STATUSES: tuple[str, ...] = ("matched", "changed", "only_a", "only_b", "ambiguous")
UNPAIRED: tuple[Status, ...] = (Status.ONLY_IN_A, Status.ONLY_IN_B, Status.AMBIGUOUS)


@dataclass(frozen=True, slots=True)
class KernelFacts:
    """One side's kernel as the reports see it: its keys and the facts a diff compares."""

    cache_key: str
    name: str
    backend: str | None
    target: str  # backend:arch:warp_size
    identity: str | None
    values: Mapping[str, Any]  # FACT_COLUMNS -> value (None where not recorded)
    problems: str | None = None  # what the analysis could not read or compute ('stage: reason | …')

    def get(self, column: str) -> Any:
        """A fact by its `kernels` column (the backend and arch too), as the verdicts read a row."""
        if column == "arch":
            arch = self.target.split(":")[1]
            return None if arch == "None" else arch
        return self.backend if column == "backend" else self.values.get(column)

    def why_unknown(self, column: str) -> str:
        """The recorded reason a figure is missing: the analysis problem of the stage that computes it."""
        stages = UNKNOWN_STAGES.get(column, ())
        for problem in (self.problems or "").split(" | "):
            stage, _, reason = problem.partition(": ")
            if stage in stages and reason:
                return f"{stage}: {reason}"
        return "not recorded by the analysis"

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> KernelFacts:
        return cls(
            cache_key=row["cache_key"],
            name=row["name"],
            backend=row.get("backend"),
            target=f"{row.get('backend')}:{row.get('arch')}:{row.get('warp_size')}",
            identity=row.get("identity"),
            values={c: row.get(c) for c in FACT_COLUMNS},
            problems=row.get("problems"),
        )


def spills(facts: KernelFacts | None, counts: tuple[str, ...]) -> int | None:
    """The sum of a backend's spill counts (its roles' spill_counts); None when none is recorded."""
    if facts is None:
        return None
    values = [facts.get(c) for c in counts]
    if all(v is None for v in values):
        return None
    return sum(v or 0 for v in values)


_NUMBERS = (int, float)


def _delta(a: Any, b: Any) -> Any:
    """b - a for two numbers (not booleans); None otherwise (a side lacks the fact: another vendor's column)."""
    if a is None or b is None:
        return None
    if isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS) and not isinstance(a, bool):
        return b - a
    return None


# `--why`'s stages, in the order reports count them (kdb/replay/why.py names each kernel's).
WHY_STAGES: tuple[str, ...] = ("triton", "llvm", "ptxas", "both", "unknown")


@dataclass(frozen=True, slots=True)
class Why:
    """`kdb diff --why`: the stage that carries a changed kernel's change (kdb/replay/why.py), and the figures of
    A, of each stage swap and of B that tell it. Stage names and labels are made there; reports print them."""

    stage: str  # triton, llvm, ptxas, both, unknown
    reason: str
    figures: Mapping[str, Mapping[str, Any] | None]  # a, swap_llvm[, swap_ptxas], b -> COMPARED column -> value
    labels: Mapping[str, str]  # the same keys -> how a report names each set (`B's LLVM on A's LLIR`)
    decided_by: tuple[str, ...] = ()  # the figures the stage was judged on (those that changed from A to B)


@dataclass(frozen=True, slots=True)
class KernelDiff:
    status: Status
    name: str
    a: KernelFacts | None = None
    b: KernelFacts | None = None
    reason: str | None = None
    candidates: tuple[str, ...] = ()
    mix_groups: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # grp -> {a, b, delta}
    mix_mnemonics: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # only those that changed
    first_changed_stage: str | None = None
    severity: float = 0.0
    fired_rules: tuple[str, ...] = ()
    # --fail-on rules this kernel could not be judged by: a figure they read is unknown on a side
    unknown_rules: tuple[str, ...] = ()
    # what the verdict does not say but a user should know (issue 28: the upgrade brought it near a cliff)
    warnings: tuple[str, ...] = ()
    # The sides' instruction mixes come from different sources (SASS and PTX: one side ingested --no-sass): the
    # source both have, whose counts were compared instead, or "" where none is common (not compared). None when
    # both sides' mixes come from the same source (kdb/diff/mix_sources.py, like with like).
    mix_source: str | None = None
    why: Why | None = None  # `--why`: changed kernels only

    # The metric and limiter tables follow from the two sides' facts, so they are derived when a renderer
    # asks, not built for every pair: most of a 10k-kernel diff's pairs are never shown.
    @property
    def metrics(self) -> dict[str, dict[str, Any]]:
        """name -> {a, b, delta} for every METRICS column of a paired kernel; empty when unpaired."""
        if self.a is None or self.b is None:
            return {}
        va, vb = self.a.values, self.b.values
        return {m: {"a": va.get(m), "b": vb.get(m), "delta": _delta(va.get(m), vb.get(m))} for m in METRICS}

    @property
    def limiters(self) -> dict[str, dict[str, Any]]:
        """name -> {a, b} for every LIMITERS column of a paired kernel; empty when unpaired."""
        if self.a is None or self.b is None:
            return {}
        return {m: {"a": self.a.get(m), "b": self.b.get(m)} for m in LIMITERS}

    @property
    def measured_ns(self) -> int | None:
        """The time profiles measured for the kernel: B's, else A's (None: no imported profile ran it)."""
        for side in (self.b, self.a):
            if side is not None and side.get("measured_ns") is not None:
                return int(side.get("measured_ns"))
        return None

    @property
    def a_cache_key(self) -> str | None:
        return self.a.cache_key if self.a else None

    @property
    def b_cache_key(self) -> str | None:
        return self.b.cache_key if self.b else None

    @property
    def facts(self) -> KernelFacts | None:
        """Side A's facts, else side B's."""
        return self.a or self.b

    @property
    def target(self) -> str | None:
        facts = self.facts
        return facts.target if facts else None


@dataclass(frozen=True, slots=True)
class Winner:
    """One side's autotune winner: the config that won, its timings, and the kernel folder compiled for it
    (kdb/ingest/inductor.py links them at ingest; `facts` is None when no folder is linked)."""

    source: str  # best_config, autotune_json
    path: str  # the file, relative to the ingested directory
    config: Mapping[str, Any]  # {"kwargs": {...}, "num_warps": …, "num_stages": …}
    time_ms: float | None  # best_config: the module's kernel_perf; autotune_json: the config's median
    tuning_ms: float | None  # best_config: time_taken_ms (how long autotuning took)
    found_by_coordesc: bool | None
    cache_key: str | None
    link: str  # hash, config, ambiguous, missing
    link_detail: str | None
    facts: KernelFacts | None


# Winner statuses: the same config won, another config won (a flip), a winner on one side only.
WINNER_STATUSES: tuple[str, ...] = ("flip", "same", "only_a", "only_b")


@dataclass(frozen=True, slots=True)
class WinnerDiff:
    """The autotune winners of one Inductor kernel (module path + kernel name) on both sides."""

    status: str  # one of WINNER_STATUSES
    source: str
    module: str | None
    kernel: str | None
    a: Winner | None = None
    b: Winner | None = None
    worse: tuple[str, ...] = ()  # how B's winner's folder is worse than A's: "spills 0→4", "occupancy 8→4"
    unchecked: str | None = None  # why resources were not compared (a winner with no linked folder)
    fired_rules: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.kernel or (self.a or self.b or _NO_WINNER).path


_NO_WINNER = Winner("", "-", {}, None, None, None, None, "missing", None, None)


@dataclass(frozen=True)
class DiffResult:
    a_label: str
    b_label: str
    across_targets: bool
    kernels: tuple[KernelDiff, ...]
    rules: tuple[Rule, ...]
    fired: tuple[str, ...]
    a_count: int
    b_count: int
    a_targets: tuple[str, ...]
    b_targets: tuple[str, ...]
    trust_problem: str | None = None
    min_match: float = DEFAULT_MIN_MATCH
    winners: tuple[WinnerDiff, ...] = ()
    # Rules that met a figure kdb could not compute on some kernel (the CLI exits 8 unless --allow-unknown)
    unknown_rules: tuple[str, ...] = ()
    allow_unknown: bool = False
    # Why each of unknown_rules could not be judged: `vgpr:+10: cuda kernels have no VGPR count (…)` (rules.py)
    unknown_reasons: tuple[str, ...] = ()
    # One line per thing kdb had to assume: an unknown release or target, figures it could not compute
    assumptions: tuple[str, ...] = ()
    # cache key (A's or B's) -> autotune group identity (kdb/diff/groups.py): kernels that differ only in tuning
    group_of: Mapping[str, str] = field(default_factory=dict)
    # cache keys of the folders compiled for an autotune winner (the kernels view's is_autotune_best): a group's row
    autotune_best: frozenset[str] = frozenset()

    def winner_count(self, status: str) -> int:
        return sum(1 for w in self.winners if w.status == status)

    def count(self, status: Status) -> int:
        return sum(1 for k in self.kernels if k.status is status)

    @property
    def summary(self) -> dict[str, int]:
        """The one definition of the counts, read by the table, markdown, CSV, JSON, HTML and the Python API: every
        status under its own name (`regressed` does not count `mixed`), so same + regressed + improved + mixed +
        neutral + only_a + only_b + ambiguous = kernels. `matched` (= same) and `changed` (= regressed + improved +
        mixed + neutral) are kept for schema version 1's readers."""
        counts = self.status_counts
        return {
            "matched": counts[Status.SAME],
            "changed": sum(counts[s] for s in _CHANGED),
            "regressed": counts[Status.REGRESSED],
            "improved": counts[Status.IMPROVED],
            "only_a": counts[Status.ONLY_IN_A],
            "only_b": counts[Status.ONLY_IN_B],
            "ambiguous": counts[Status.AMBIGUOUS],
            "same": counts[Status.SAME],
            "mixed": counts[Status.MIXED],
            "neutral": counts[Status.NEUTRAL],
            "kernels": len(self.kernels),
        }

    @cached_property
    def status_counts(self) -> dict[Status, int]:
        """Kernels per status, every status present (0 included), in Status order: they add up to the kernels."""
        counts = dict.fromkeys(Status, 0)
        for k in self.kernels:
            counts[k.status] += 1
        return counts

    @cached_property
    def key_length(self) -> int:
        """How many characters of a folder name the reports print as a kernel's key (kdb/diff/model.key_length)."""
        keys = [key for k in self.kernels for key in (k.a_cache_key, k.b_cache_key) if key]
        return key_length(keys)

    def key_of(self, k: KernelDiff) -> str:
        """The key printed for a kernel: side A's folder, else side B's, at `key_length` characters."""
        return short_key(k.a_cache_key or k.b_cache_key, self.key_length)

    @property
    def paired(self) -> int:
        return sum(1 for k in self.kernels if k.status.paired)

    @property
    def match_rate(self) -> float:
        smaller = min(self.a_count, self.b_count)
        return self.paired / smaller if smaller else 0.0


@dataclass(frozen=True)
class KernelDeepView:
    kernel: KernelDiff
    triton_json_diff: dict[str, Any]
    co_metadata_diff: dict[str, Any]
    mix_rows: list[dict[str, Any]]  # mnemonic, grp, a, b, delta
    isa_diff: str  # unified diff of the ISA, normalised (kdb/diff/isa.py) unless isa_raw
    isa_kind: str | None
    isa_raw: bool = False  # `--raw-isa`: the files as the compiler wrote them
    # the mix per loop depth (issue 28): loop_depth, mnemonic, grp, a, b, delta; empty when neither side's loop
    # nest is known; `loop_known` says per side whether it is (a side without one reads as all zeros otherwise)
    loop_rows: list[dict[str, Any]] = field(default_factory=list)
    loop_known: tuple[bool, bool] = (False, False)
