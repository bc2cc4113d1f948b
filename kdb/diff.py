"""`kdb diff`: match the kernels of two snapshots and compare them. Returns result objects; never prints.

Matching (A -> B)
  Kernels are grouped by `identity` (or `identity_any_target` with `across_targets`, see
  kdb/identity.py). Within a group, pairs are made by the options rule ("equal, or each at its own
  release's default"): first pairs whose options are exactly equal and unique both ways, then pairs
  that are compatible and unique both ways. Every kernel gets one status:
    matched    paired, and the facts (resources, occupancy, instruction mix) are the same
    changed    paired, and some fact differs
    only_a     no counterpart in B
    only_b     no counterpart in A
    ambiguous  several candidates (or its counterpart was taken by another kernel); `reason` says which

Trust (exit code 2)
  A comparison is untrusted when either side has no kernels, when the sides share no target and
  `across_targets` is off, or when fewer than `min_match` (default one half) of the smaller side's
  kernels were paired. The result carries `trust_problem`; the CLI renders the report and then exits 2.

--fail-on rules (exit code 1 when any fires): see `parse_rules`.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import functools
import gc
import json
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdb.catalog import Catalog
from kdb.errors import KdbError, ParseError, TagError, UsageError
from kdb.home import Home
from kdb.identity import kernel_identity, options_compatible
from kdb.normalize import STAGE_KINDS, metadata_view, normalise_stage
from kdb.parsers.triton_json import parse_kernel_json

# Facts compared per matched pair, in display order.
METRICS: tuple[str, ...] = (
    "occupancy", "occupancy_llvm", "vgpr_count", "agpr_count", "sgpr_count", "vgpr_spill_count",
    "sgpr_spill_count", "scratch_bytes", "registers", "stack_bytes", "local_bytes", "shared", "lds_static",
    "code_size", "instr_count",
)
LIMITERS: tuple[str, ...] = ("occupancy_limiter", "occupancy_llvm_limiter")
# For each metric: +1 when a larger value is worse, -1 when better, 0 neutral.
DIRECTION: dict[str, int] = {
    "occupancy": -1, "occupancy_llvm": -1, "vgpr_count": 1, "agpr_count": 1, "sgpr_count": 1,
    "vgpr_spill_count": 1, "sgpr_spill_count": 1, "scratch_bytes": 1, "registers": 1, "stack_bytes": 1,
    "local_bytes": 1, "shared": 1, "lds_static": 1, "code_size": 0, "instr_count": 0,
}
STAGES: tuple[str, ...] = ("ttir", "ttgir", "llir", "isa")
STATUSES: tuple[str, ...] = ("matched", "changed", "only_a", "only_b", "ambiguous")
REGISTER_RULES = ("vgpr", "sgpr", "agpr", "registers")
REGISTER_COLUMN = {"vgpr": "vgpr_count", "sgpr": "sgpr_count", "agpr": "agpr_count", "registers": "registers"}
SIMPLE_RULES = ("occupancy-drop", "new-spills", "scratch-increase", "unmatched", "any-change")
DEFAULT_MIN_MATCH = 0.5


# -- rules --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    text: str
    kind: str  # one of SIMPLE_RULES, or a REGISTER_RULES name
    threshold: float = 0.0
    percent: bool = False


_REG_RULE = re.compile(r"^(vgpr|sgpr|agpr|registers):\+(\d+(?:\.\d+)?)(%?)$")


def parse_rules(texts: list[str]) -> list[Rule]:
    """--fail-on values (repeatable, or comma-separated):

    occupancy-drop     a paired kernel's occupancy (launch estimate or the compiler's) went down
    new-spills         a paired kernel spills more VGPRs/SGPRs than before (NVIDIA: more local memory)
    scratch-increase   a paired kernel's scratch (AMD) or stack/local bytes (NVIDIA) grew
    vgpr:+N, vgpr:+N%  a paired kernel's VGPR count grew by at least N registers / at least N percent
                       (sgpr:, agpr:, registers: the same)
    unmatched          any kernel is only in A, only in B, or ambiguous
    any-change         any kernel changed or is unmatched
    """
    rules = []
    for text in texts:
        for piece in text.split(","):
            piece = piece.strip()
            if not piece:
                continue
            if piece in SIMPLE_RULES:
                rules.append(Rule(piece, piece))
                continue
            m = _REG_RULE.match(piece)
            if not m:
                raise UsageError(
                    f"unknown --fail-on rule {piece!r}: use {', '.join(SIMPLE_RULES)}, or vgpr:+N / vgpr:+N% "
                    "(also sgpr:, agpr:, registers:)"
                )
            threshold = float(m.group(2))
            if threshold <= 0:
                raise UsageError(f"--fail-on {piece!r}: the threshold must be greater than 0")
            rules.append(Rule(piece, m.group(1), threshold, bool(m.group(3))))
    return rules


# -- results ------------------------------------------------------------------------------------------
@dataclass
class KernelDiff:
    status: str
    name: str
    a: dict[str, Any] | None = None  # the kernel row of side A
    b: dict[str, Any] | None = None
    reason: str | None = None
    candidates: list[str] = field(default_factory=list)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {a, b, delta}
    limiters: dict[str, dict[str, Any]] = field(default_factory=dict)
    mix_groups: dict[str, dict[str, int]] = field(default_factory=dict)  # grp -> {a, b, delta}
    mix_mnemonics: dict[str, dict[str, int]] = field(default_factory=dict)  # only those that changed
    first_changed_stage: str | None = None
    verdict: str | None = None  # regressed, improved, mixed, neutral (changed only)
    severity: float = 0.0
    fired_rules: list[str] = field(default_factory=list)

    @property
    def a_cache_key(self) -> str | None:
        return self.a["cache_key"] if self.a else None

    @property
    def b_cache_key(self) -> str | None:
        return self.b["cache_key"] if self.b else None

    @property
    def target(self) -> str | None:
        row = self.a or self.b
        return f"{row['backend']}:{row['arch']}:{row['warp_size']}" if row else None

    @property
    def regressed(self) -> bool:
        return self.verdict in ("regressed", "mixed")

    @property
    def improved(self) -> bool:
        return self.verdict == "improved"


@dataclass
class DiffResult:
    a_label: str
    b_label: str
    across_targets: bool
    kernels: list[KernelDiff]
    rules: list[Rule]
    fired: list[str]
    a_count: int
    b_count: int
    a_targets: list[str]
    b_targets: list[str]
    trust_problem: str | None = None
    min_match: float = DEFAULT_MIN_MATCH

    def count(self, status: str) -> int:
        return sum(1 for k in self.kernels if k.status == status)

    @property
    def summary(self) -> dict[str, int]:
        return {
            "matched": self.count("matched"),
            "changed": self.count("changed"),
            "regressed": sum(1 for k in self.kernels if k.regressed),
            "improved": sum(1 for k in self.kernels if k.improved),
            "only_a": self.count("only_a"),
            "only_b": self.count("only_b"),
            "ambiguous": self.count("ambiguous"),
        }

    @property
    def paired(self) -> int:
        return self.count("matched") + self.count("changed")

    @property
    def match_rate(self) -> float:
        smaller = min(self.a_count, self.b_count)
        return self.paired / smaller if smaller else 0.0


@dataclass
class KernelDeepView:
    kernel: KernelDiff
    triton_json_diff: dict[str, Any]
    co_metadata_diff: dict[str, Any]
    mix_rows: list[dict[str, Any]]  # mnemonic, grp, a, b, delta
    isa_diff: str  # unified diff of the normalised ISA
    isa_kind: str | None


# -- sides --------------------------------------------------------------------------------------------
@dataclass
class Side:
    """One snapshot, read through a catalog connection held open for the whole diff (so every lazy
    read below sees the same catalog state)."""

    label: str
    home: Home
    tag: str
    catalog: Catalog
    kernels: list[dict[str, Any]]  # with instr_mix_digest and instr_groups: enough for an unchanged mix
    mnemonics: dict[str, dict[str, int]] = field(default_factory=dict)  # filled by load_mnemonics
    files: dict[str, list[dict[str, Any]]] | None = None  # filled on first use

    def load_mnemonics(self, cache_keys: Iterable[str]) -> None:
        """Fetch, in one query, the mnemonic counts of the kernels whose mix digests differ."""
        missing = [k for k in cache_keys if k not in self.mnemonics]
        if missing:
            got = self.catalog.diff_mnemonic_counts(self.tag, missing)
            for key in missing:
                self.mnemonics[key] = got.get(key, {})

    def mnemonics_of(self, cache_key: str) -> dict[str, int]:
        self.load_mnemonics([cache_key])
        return self.mnemonics[cache_key]

    def mix_of(self, cache_key: str) -> list[tuple[str, str, int]]:
        """(mnemonic, group, count) rows of one kernel (the deep view)."""
        return self.catalog.diff_instr_mix(self.tag, [cache_key]).get(cache_key, [])

    def load_documents(self, rows: Iterable[dict[str, Any]]) -> None:
        """Add the JSON documents diff_kernels leaves out to some kernel rows (deep views)."""
        rows = [k for k in rows if "co_metadata" not in k]
        docs = self.catalog.kernel_documents([k["folder_digest"] for k in rows])
        for k in rows:
            for col, value in docs.get(k["folder_digest"], {}).items():
                if k.get(col) is None:
                    k[col] = value

    def _folder_files(self, cache_key: str) -> list[dict[str, Any]]:
        if self.files is None:
            self.files = {}
            for row in self.catalog.diff_kernel_files(self.tag):
                self.files.setdefault(row["cache_key"], []).append(row)
        return self.files.get(cache_key, [])

    def stage_file(self, cache_key: str, stage: str) -> dict[str, Any] | None:
        for kind in STAGE_KINDS[stage]:
            for f in self._folder_files(cache_key):
                if f["kind"] == kind:
                    return f
        return None

    def stage_text(self, cache_key: str, stage: str) -> tuple[str | None, str | None]:
        """(normalised text, file kind) of one stage of one kernel, None when the folder has no such file."""
        f = self.stage_file(cache_key, stage)
        if f is None:
            return None, None
        return _normalised_blob(self.home.store, f["hash"], f["size"], f["kind"]), f["kind"]

    def raw_text(self, cache_key: str, kind: str) -> str | None:
        for f in self._folder_files(cache_key):
            if f["kind"] == kind:
                return self.home.store.get(f["hash"], f["size"]).decode("utf-8", "replace")
        return None


@contextlib.contextmanager
def _loaded_side(home: Home, tag: str, label: str, wait_s: float) -> Iterator[Side]:
    with Catalog.open(home.catalog_path, read_only=True, wait_s=wait_s) as catalog:
        with _without_cycle_collector():
            kernels = catalog.diff_kernels(tag)
            kernels.sort(key=lambda k: (k["name"], k["cache_key"]))  # in Python: cheaper than ORDER BY here
            side = Side(label, home, tag, catalog, kernels)
            for k in side.kernels:
                if k.get("identity") is None:
                    _fill_identity(side, k)
        yield side


def _doc(k: dict[str, Any], col: str) -> Any:
    """A JSON column of a kernel row, decoded on first use (most pairs never need their documents)."""
    value = k.get(col)
    if isinstance(value, str):
        try:
            k[col] = value = json.loads(value)
        except ValueError:
            pass
    return value


def _fill_identity(side: Side, k: dict[str, Any]) -> None:
    """Catalogs ingested before identities were recorded: rebuild the identity from the stored TTIR."""
    ttir = side.raw_text(k["cache_key"], "ttir")
    meta_doc = _doc(k, "triton_metadata")
    if ttir is None or not isinstance(meta_doc, dict):
        return
    try:
        ident = kernel_identity(ttir, parse_kernel_json(json.dumps(meta_doc).encode()), None)
    except ParseError:
        return
    if ident:
        k["identity"], k["identity_any_target"], k["identity_parts"] = ident["identity"], ident["identity_any_target"], ident["parts"]


@contextlib.contextmanager
def open_side(home: Home, ref: str, wait_s: float = 600.0) -> Iterator[Side]:
    """A tag of `home`, or an existing cache directory ingested into a temporary home (deleted afterwards)."""
    tag_exists = False
    if home.catalog_path.exists():
        with Catalog.open(home.catalog_path, read_only=True, wait_s=wait_s) as catalog:
            tag_exists = catalog.snapshot_id(ref) is not None
    if tag_exists:
        with _loaded_side(home, ref, ref, wait_s) as side:
            yield side
        return
    path = Path(ref)
    if not path.is_dir():
        raise TagError(f"{ref!r} is neither a snapshot tag (see `kdb tags`) nor a cache directory")
    from kdb.ingest import ingest

    with tempfile.TemporaryDirectory(prefix="kdb-diff-") as tmp:
        temp_home = Home(Path(tmp))
        tag = path.resolve().name or "dir"
        ingest(temp_home, path, tag, lock_wait_s=wait_s)
        with _loaded_side(temp_home, tag, str(path), wait_s) as side:
            yield side


@functools.lru_cache(maxsize=4096)
def _normalised_blob(store: Any, digest: str, size: int, kind: str) -> str:
    """Normalising is the expensive part of a diff; a blob shared by many kernels is normalised once."""
    return normalise_stage(store.get(digest, size).decode("utf-8", "replace"), kind)


def first_changed_stage(sa: Side, a: dict[str, Any], sb: Side, b: dict[str, Any]) -> str | None:
    for stage in STAGES:
        da, db = a.get(f"{stage}_digest"), b.get(f"{stage}_digest")
        if da is not None and db is not None:  # computed at ingest: no IR needs reading
            if da != db:
                return stage
            continue
        fa, fb = sa.stage_file(a["cache_key"], stage), sb.stage_file(b["cache_key"], stage)
        if fa is not None and fb is not None and fa["hash"] == fb["hash"]:
            continue  # byte-identical: no need to read or normalise either side
        ta, _ = sa.stage_text(a["cache_key"], stage)
        tb, _ = sb.stage_text(b["cache_key"], stage)
        if ta is None and tb is None:
            continue
        if ta != tb:
            return stage
    da, db = a.get("metadata_digest"), b.get("metadata_digest")
    if da is not None and db is not None:
        return "metadata" if da != db else None
    if metadata_view(_doc(a, "triton_metadata")) != metadata_view(_doc(b, "triton_metadata")):
        return "metadata"
    return None


# -- matching -----------------------------------------------------------------------------------------
def _options(k: dict[str, Any]) -> dict[str, Any]:
    if k.get("identity_options") is not None:  # recorded at ingest: no need to decode identity_parts
        return _doc(k, "identity_options") or {}
    parts = _doc(k, "identity_parts") or {}
    return parts.get("options") or {}


def _effective_options(k: dict[str, Any]) -> dict[str, Any]:
    opts = _options(k)
    version = opts.get("triton_version") or k.get("triton_version")
    return {"backend": opts.get("backend"), "triton_version": version, "values": opts.get("values") or {}}


def _exact(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Every compared option has the same value on both sides (no release default needed)."""
    raw_a, raw_b = a.get("identity_options"), b.get("identity_options")
    if isinstance(raw_a, str) and raw_a == raw_b:
        return True  # the same options document (still undecoded)
    oa, ob = _options(a), _options(b)
    return bool(oa.get("backend") == ob.get("backend") and (oa.get("values") or {}) == (ob.get("values") or {}))


def _content(k: dict[str, Any]) -> tuple[Any, ...] | None:
    """The normalised stage digests: equal tuples mean the same code at every stage."""
    digests = tuple(k.get(f"{stage}_digest") for stage in STAGES)
    return digests if any(d is not None for d in digests) else None


def _def_file(k: dict[str, Any]) -> Any:
    return _options(k).get("def_file")


def _same_content(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ca = _content(a)
    return ca is not None and ca == _content(b)


def _same_file(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return _def_file(a) is not None and _def_file(a) == _def_file(b)


# Evidence for a pair, strongest first. Each pass pairs the kernels that have exactly one candidate
# under it, on both sides; a pass only ever narrows `compatible` (identity equal, options equal or at
# their releases' defaults), so no pass can pair kernels the identity keeps apart. The source file and
# the code itself only break ties between candidates the identity cannot tell apart (Inductor writes
# the same kernel into several modules; one cache can hold a kernel compiled by two toolchains).
def _passes() -> list[tuple[str, Callable[[dict[str, Any], dict[str, Any]], bool]]]:
    def compatible(x: dict[str, Any], y: dict[str, Any]) -> bool:
        return _compatible(x, y)[0]

    return [
        ("identical code", lambda x, y: _same_content(x, y) and compatible(x, y)),
        ("same options and source file", lambda x, y: _exact(x, y) and _same_file(x, y)),
        ("same options", _exact),
        ("options at release defaults, same source file", lambda x, y: _same_file(x, y) and compatible(x, y)),
        ("options at release defaults", compatible),
    ]


def _compatible(a: dict[str, Any], b: dict[str, Any]) -> tuple[bool, list[str]]:
    return options_compatible(_options(a), _options(b), a.get("triton_version"), b.get("triton_version"))


def _pair_unique(cands: dict[int, set[int]]) -> list[tuple[int, int]]:
    """Pairs (i, j) where j is i's only candidate and i is j's only candidate."""
    reverse: dict[int, set[int]] = {}
    for i, js in cands.items():
        for j in js:
            reverse.setdefault(j, set()).add(i)
    return [(i, next(iter(js))) for i, js in cands.items() if len(js) == 1 and len(reverse[next(iter(js))]) == 1]


def match(a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]], key: str) -> list[KernelDiff]:
    """Pair the kernels of A and B; return one KernelDiff per pair or unpaired kernel (facts not yet compared)."""
    out: list[KernelDiff] = []
    groups: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for k in a_rows:
        if k.get(key) is None:
            out.append(KernelDiff("only_a", k["name"], a=k, reason="no identity (no readable TTIR)"))
        else:
            groups.setdefault(k[key], ([], []))[0].append(k)
    for k in b_rows:
        if k.get(key) is None:
            out.append(KernelDiff("only_b", k["name"], b=k, reason="no identity (no readable TTIR)"))
        else:
            groups.setdefault(k[key], ([], []))[1].append(k)
    for ga, gb in groups.values():
        paired_a: dict[int, int] = {}
        for _evidence, test in _passes():
            free_a = [i for i in range(len(ga)) if i not in paired_a]
            free_b = [j for j in range(len(gb)) if j not in paired_a.values()]
            cands = {i: {j for j in free_b if test(ga[i], gb[j])} for i in free_a}
            for i, j in _pair_unique(cands):
                paired_a[i] = j
        taken_b = set(paired_a.values())
        for i, j in paired_a.items():
            out.append(KernelDiff("changed", ga[i]["name"], a=ga[i], b=gb[j]))
        for i, k in enumerate(ga):
            if i in paired_a:
                continue
            compat = [j for j in range(len(gb)) if _compatible(k, gb[j])[0]]
            out.append(_unpaired("a", k, gb, compat, taken_b))
        for j, k in enumerate(gb):
            if j in taken_b:
                continue
            compat = [i for i in range(len(ga)) if _compatible(ga[i], k)[0]]
            out.append(_unpaired("b", k, ga, compat, set(paired_a)))
    return out


def _unpaired(side: str, k: dict[str, Any], others: list[dict[str, Any]], compat: list[int], taken: set[int]) -> KernelDiff:
    other = "B" if side == "a" else "A"
    row = {"a": k} if side == "a" else {"b": k}
    if compat:
        keys = [others[j]["cache_key"] for j in compat]
        if all(j in taken for j in compat):
            reason = f"its counterpart in {other} ({', '.join(keys)}) is paired with another kernel (folder reused?)"
        elif len(compat) == 1:
            reason = f"its only candidate in {other} ({keys[0]}) is also a candidate of other kernels"
        else:
            reason = (f"{len(compat)} candidates in {other} with the same identity and compatible options "
                      f"({_what_differs([others[j] for j in compat])})")
        return KernelDiff("ambiguous", k["name"], reason=reason, candidates=keys, **row)
    if others:
        diffs = sorted({d for o in others for d in (_compatible(k, o)[1] if side == "a" else _compatible(o, k)[1])})
        reason = f"same identity as {len(others)} kernel(s) in {other}, options differ: {', '.join(diffs)}"
    else:
        reason = f"no kernel with this identity in {other}"
    return KernelDiff("only_" + side, k["name"], reason=reason, **row)


def _what_differs(candidates: list[dict[str, Any]]) -> str:
    """Name what tells tied candidates apart, when the identity cannot."""
    apart = []
    if len({_def_file(c) for c in candidates}) > 1:
        apart.append("source file")
    if len({_options(c).get("def_line") for c in candidates}) > 1:
        apart.append("def line")
    if len({_content(c) for c in candidates}) > 1:
        stages = [s for i, s in enumerate(STAGES) if len({(_content(c) or (None,) * len(STAGES))[i] for c in candidates}) > 1]
        apart.append("code at " + "/".join(stages))
    if not apart:
        return "identical in every recorded respect"
    return "they differ only in " + ", ".join(apart)


# -- comparison ---------------------------------------------------------------------------------------
_NUMBERS = (int, float)


def _delta(a: Any, b: Any) -> Any:
    if a is None or b is None:  # the common case for another vendor's columns
        return None
    if isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS) and not isinstance(a, bool):
        return b - a
    return None


def _mix_tables(a: dict[str, Any], mnemonics_a: dict[str, int], b: dict[str, Any], mnemonics_b: dict[str, int]
                ) -> tuple[dict, dict]:
    """(group -> {a, b, delta} for every group, mnemonic -> {a, b, delta} for mnemonics whose count changed)."""
    ga, gb = _doc(a, "instr_groups") or {}, _doc(b, "instr_groups") or {}
    group_table = {g: {"a": ga.get(g, 0), "b": gb.get(g, 0), "delta": gb.get(g, 0) - ga.get(g, 0)}
                   for g in sorted(ga.keys() | gb.keys())}
    # (mnemonic, count) pairs in one mix and not the other: the set operation runs in C, so only the
    # mnemonics whose count changed are visited here
    differing = sorted({m for m, _ in mnemonics_a.items() ^ mnemonics_b.items()})
    changed = {m: {"a": mnemonics_a.get(m, 0), "b": mnemonics_b.get(m, 0),
                   "delta": mnemonics_b.get(m, 0) - mnemonics_a.get(m, 0)} for m in differing}
    return group_table, changed


def _spills(row: dict[str, Any]) -> int | None:
    values = [row.get("vgpr_spill_count"), row.get("sgpr_spill_count")]
    if all(v is None for v in values):
        return None
    return sum(v or 0 for v in values)


def _same_mix(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Both kernels have an instruction mix and its digests are equal (no need to read the mnemonics)."""
    if a is None or b is None:
        return False
    return a.get("instr_mix_digest") is not None and a.get("instr_mix_digest") == b.get("instr_mix_digest")


def compare_pair(kd: KernelDiff, sa: Side, sb: Side) -> None:
    a, b = kd.a, kd.b
    assert a is not None and b is not None
    facts_differ = False
    for m in METRICS:
        va, vb = a.get(m), b.get(m)
        kd.metrics[m] = {"a": va, "b": vb, "delta": _delta(va, vb)}
        facts_differ = facts_differ or va != vb
    for m in LIMITERS:
        kd.limiters[m] = {"a": a.get(m), "b": b.get(m)}
    if _same_mix(a, b):  # equal digests: no mnemonic count changed, none needs reading
        mnemonics_a = mnemonics_b = {}
    else:
        mnemonics_a, mnemonics_b = sa.mnemonics_of(a["cache_key"]), sb.mnemonics_of(b["cache_key"])
    kd.mix_groups, kd.mix_mnemonics = _mix_tables(a, mnemonics_a, b, mnemonics_b)
    kd.first_changed_stage = first_changed_stage(sa, a, sb, b)
    facts_differ = facts_differ or bool(kd.mix_mnemonics)
    kd.status = "changed" if facts_differ else "matched"
    if kd.status == "changed":
        kd.verdict, kd.severity = classify(kd)


def classify(kd: KernelDiff) -> tuple[str, float]:
    """(verdict, severity): occupancy drops first, then new spills, scratch growth, register growth."""
    m = kd.metrics
    worse = better = 0.0

    def d(name: str) -> float:
        v = m.get(name, {}).get("delta")
        return float(v) if v is not None else 0.0

    occ = min(d("occupancy"), d("occupancy_llvm"))
    if occ < 0:
        worse += 10000 * -occ
    occ_up = max(d("occupancy"), d("occupancy_llvm"))
    if occ_up > 0:
        better += 10000 * occ_up
    sa, sb = _spills(kd.a or {}), _spills(kd.b or {})
    if sa is not None and sb is not None:
        if sb > sa:
            worse += (5000 if sa == 0 else 2500) + (sb - sa)
        elif sb < sa:
            better += (5000 if sb == 0 else 2500) + (sa - sb)
    for name in ("scratch_bytes", "local_bytes", "stack_bytes"):
        if d(name) > 0:
            worse += 1000 + min(d(name), 1000) / 10
            break
        if d(name) < 0:
            better += 1000 + min(-d(name), 1000) / 10
            break
    for name, weight in (("vgpr_count", 1.0), ("agpr_count", 1.0), ("registers", 1.0), ("sgpr_count", 0.25),
                         ("shared", 1 / 1024), ("lds_static", 1 / 1024)):
        if d(name) > 0:
            worse += weight * d(name)
        elif d(name) < 0:
            better += weight * -d(name)
    if worse and better:
        return "mixed", worse
    if worse:
        return "regressed", worse
    if better:
        return "improved", -better
    return "neutral", 0.0


def evaluate_rule(rule: Rule, kd: KernelDiff) -> bool:
    if rule.kind == "unmatched":
        return kd.status in ("only_a", "only_b", "ambiguous")
    if rule.kind == "any-change":
        return kd.status != "matched"
    if kd.status not in ("matched", "changed"):
        return False
    a, b = kd.a or {}, kd.b or {}
    if rule.kind == "occupancy-drop":
        return any(a.get(c) is not None and b.get(c) is not None and b[c] < a[c] for c in ("occupancy", "occupancy_llvm"))
    if rule.kind == "new-spills":
        sa, sb = _spills(a), _spills(b)
        if sa is not None and sb is not None and sb > sa:
            return True
        return a.get("backend") == "cuda" and (b.get("local_bytes") or 0) > (a.get("local_bytes") or 0)
    if rule.kind == "scratch-increase":
        return any(a.get(c) is not None and b.get(c) is not None and b[c] > a[c]
                   for c in ("scratch_bytes", "stack_bytes", "local_bytes"))
    col = REGISTER_COLUMN[rule.kind]
    va, vb = a.get(col), b.get(col)
    if va is None or vb is None:
        return False
    if rule.percent:
        return va > 0 and (vb - va) * 100.0 / va >= rule.threshold or (va == 0 and vb > 0)
    return vb - va >= rule.threshold


def _targets(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({f"{r['backend']}:{r['arch']}:{r['warp_size']}" for r in rows if r.get("backend")})


def diff_sides(sa: Side, sb: Side, *, across_targets: bool = False, rules: list[Rule] | None = None,
               min_match: float = DEFAULT_MIN_MATCH) -> DiffResult:
    rules = rules or []
    key = "identity_any_target" if across_targets else "identity"
    kernels = match(sa.kernels, sb.kernels, key)
    # Mnemonic rows are fetched, in one query per side, only for pairs whose mix digests differ.
    differ = [kd for kd in kernels if kd.status == "changed" and not _same_mix(kd.a, kd.b)]
    sa.load_mnemonics(kd.a["cache_key"] for kd in differ)
    sb.load_mnemonics(kd.b["cache_key"] for kd in differ)
    for kd in kernels:
        if kd.status == "changed":  # paired; compare_pair decides matched/changed
            compare_pair(kd, sa, sb)
    fired: list[str] = []
    for kd in kernels:
        kd.fired_rules = [r.text for r in rules if evaluate_rule(r, kd)]
        for r in kd.fired_rules:
            if r not in fired:
                fired.append(r)
    fired = [r.text for r in rules if r.text in fired]
    order = {s: i for i, s in enumerate(STATUSES)}

    def report_order(k: KernelDiff) -> tuple[Any, ...]:
        regressed = k.regressed
        return (-k.severity if regressed else 0, 0 if regressed else 1, 0 if regressed else order[k.status], k.name,
                k.a_cache_key or "", k.b_cache_key or "")

    kernels.sort(key=report_order)
    result = DiffResult(sa.label, sb.label, across_targets, kernels, rules, fired, len(sa.kernels), len(sb.kernels),
                        _targets(sa.kernels), _targets(sb.kernels), min_match=min_match)
    result.trust_problem = trust_problem(result)
    return result


def trust_problem(r: DiffResult) -> str | None:
    if not r.a_count or not r.b_count:
        return f"nothing to compare: {r.a_label} has {r.a_count} kernels, {r.b_label} has {r.b_count}"
    if not r.across_targets and r.a_targets and r.b_targets and not set(r.a_targets) & set(r.b_targets):
        return (f"the snapshots share no target ({', '.join(r.a_targets)} vs {', '.join(r.b_targets)}): "
                "use --across-targets to compare them")
    if r.match_rate < r.min_match:
        return (f"only {r.paired} of {min(r.a_count, r.b_count)} kernels of the smaller side were paired "
                f"({r.match_rate:.0%} < {r.min_match:.0%}): the comparison cannot be trusted")
    return None


def diff(home: Home, ref_a: str, ref_b: str, *, across_targets: bool = False, fail_on: list[str] | None = None,
         min_match: float = DEFAULT_MIN_MATCH, kernel: str | None = None, wait_s: float = 600.0
         ) -> tuple[DiffResult, list[KernelDeepView]]:
    """Diff two snapshots (tags of `home` or cache directories); with `kernel`, also the deep views."""
    rules = parse_rules(fail_on or [])
    if not 0 <= min_match <= 1:
        raise UsageError(f"--min-match must be between 0 and 1, not {min_match}")
    with open_side(home, ref_a, wait_s) as sa, open_side(home, ref_b, wait_s) as sb, _without_cycle_collector():
        result = diff_sides(sa, sb, across_targets=across_targets, rules=rules, min_match=min_match)
        views = deep_views(result, sa, sb, kernel) if kernel else []
    return result, views


@contextlib.contextmanager
def _without_cycle_collector() -> Iterator[None]:
    """Loading and comparing two snapshots allocates millions of small objects (rows, metric tables)
    and frees almost none until the diff ends, so Python's cycle collector rescans them over and over
    for nothing: ~0.25 s of a ~1.1 s comparison of two 10k-kernel snapshots. Nothing there builds
    reference cycles worth collecting early. (Not around the ingest of a directory argument: that
    runs as long as its cache is large.)"""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# -- deep view ----------------------------------------------------------------------------------------
def _select(result: DiffResult, pattern: str) -> list[KernelDiff]:
    out = []
    for kd in result.kernels:
        keys = [kd.a_cache_key or "", kd.b_cache_key or ""]
        if (fnmatch.fnmatchcase(kd.name, pattern) or kd.name == pattern
                or any(k and (k == pattern or k.startswith(pattern)) for k in keys if len(pattern) >= 6)):
            out.append(kd)
    return out


def _deepdiff(a: Any, b: Any) -> dict[str, Any]:
    from deepdiff import DeepDiff

    return json.loads(DeepDiff(a, b, ignore_order=False, verbose_level=2).to_json())


def deep_views(result: DiffResult, sa: Side, sb: Side, pattern: str) -> list[KernelDeepView]:
    chosen = _select(result, pattern)
    if not chosen:
        raise UsageError(f"no kernel named or matching {pattern!r} in either snapshot")
    views = []
    for kd in chosen:
        a, b = kd.a or {}, kd.b or {}
        if a:
            sa.load_documents([a])
        if b:
            sb.load_documents([b])
        # Keyed by (mnemonic, group): one mnemonic can count in two groups of a kernel (a MUBUF load
        # from scratch and one from global memory), and each keeps its own row.
        mix_a = {(m, g): c for m, g, c in sa.mix_of(a["cache_key"])} if a else {}
        mix_b = {(m, g): c for m, g, c in sb.mix_of(b["cache_key"])} if b else {}
        rows = []
        for mn, grp in sorted(set(mix_a) | set(mix_b)):
            ca, cb = mix_a.get((mn, grp), 0), mix_b.get((mn, grp), 0)
            rows.append({"mnemonic": mn, "grp": grp, "a": ca, "b": cb, "delta": cb - ca})
        rows.sort(key=lambda r: (-abs(r["delta"]), r["grp"], r["mnemonic"]))
        ta, kind_a = sa.stage_text(a["cache_key"], "isa") if a else (None, None)
        tb, kind_b = sb.stage_text(b["cache_key"], "isa") if b else (None, None)
        isa = "".join(difflib.unified_diff(
            ((ta or "") + "\n").splitlines(keepends=True) if ta else [], ((tb or "") + "\n").splitlines(keepends=True) if tb else [],
            fromfile=f"{result.a_label}:{a.get('cache_key', '-')}/{kd.name}", tofile=f"{result.b_label}:{b.get('cache_key', '-')}/{kd.name}",
            n=3, lineterm="\n"))
        if isa and not isa.endswith("\n"):
            isa += "\n"
        views.append(KernelDeepView(
            kernel=kd,
            triton_json_diff=_deepdiff(_doc(a, "triton_metadata"), _doc(b, "triton_metadata")),
            co_metadata_diff=_deepdiff(_doc(a, "co_metadata"), _doc(b, "co_metadata")),
            mix_rows=rows, isa_diff=isa, isa_kind=kind_a or kind_b,
        ))
    return views


__all__ = [
    "DiffResult",
    "KdbError",
    "KernelDeepView",
    "KernelDiff",
    "Rule",
    "diff",
    "diff_sides",
    "normalise_stage",
    "open_side",
    "parse_rules",
]
