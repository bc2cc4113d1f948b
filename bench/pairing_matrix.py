#!/usr/bin/env python3
"""How well `kdb diff` pairs kernels across releases, judged against the corpus build records.

The build records (corpus/records/*.json, corpus/inductor/amd/records/*.json) say which config
produced which cache folder in each snapshot; kdb never reads them. A *true pair* is two folders,
one per snapshot, that the same config produced. For every pair of snapshots of one target (and,
with --across-targets, of one backend across targets) this ingests both, runs
`kdb diff A B --format json` and counts:

* found: true pairs kdb paired;
* missed: true pairs kdb left unpaired (only in A/B, ambiguous) or paired elsewhere;
* wrong: pairs kdb made that no config supports.

    python bench/pairing_matrix.py                  # every same-target pair of the corpus, matrix on stdout
    python bench/pairing_matrix.py --json out.json  # the same, machine-readable

tests/test_pairing.py asserts the totals (>= 99.5% found, 0 wrong) from the same functions.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import io
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("KDB_CORPUS_DIR", ROOT / "corpus"))
sys.path.insert(0, str(CORPUS))

from unpack import unpack_archive  # noqa: E402


@dataclass(frozen=True)
class Snapshot:
    tag: str
    archive: Path
    release: str
    target: str  # e.g. hip:gfx942
    group: str  # snapshots of one group are compared pairwise (the kernel suite, an Inductor scenario)
    folders: dict[str, frozenset[str]]  # cache folder -> configs that produced it
    # config -> the tuning options the compiler applied (the record's `applied_options`): a config whose
    # request one release rewrote (HIP kpack=2 on gfx950 from 3.3) compiled another specialization there
    applied: dict[str, str] = field(default_factory=dict)


@dataclass
class PairScore:
    a: str
    b: str
    true_pairs: int = 0
    rewritten: int = 0  # configs in both whose applied options differ: not the same specialization
    found: int = 0
    missed: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.found / self.true_pairs if self.true_pairs else 1.0


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def suite_snapshots() -> list[Snapshot]:
    """The kernel-suite snapshots of corpus/manifest.json with their records."""
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    out = []
    for tag, entry in manifest["snapshots"].items():
        records = json.loads((CORPUS / entry["records"]).read_text())
        folders: dict[str, set[str]] = {}
        applied: dict[str, str] = {}
        for rec in records:
            if rec.get("cache_key"):
                folders.setdefault(rec["cache_key"], set()).add(rec["config"])
                applied[rec["config"]] = json.dumps(rec.get("applied_options") or {}, sort_keys=True)
        out.append(
            Snapshot(
                tag,
                CORPUS / entry["archive"],
                entry["triton_version"],
                f"{entry['backend']}:{entry['target']}",
                "suite",
                {k: frozenset(v) for k, v in folders.items()},
                applied,
            )
        )
    return out


def inductor_snapshots() -> list[Snapshot]:
    """The Inductor kernels recompiled for AMD (corpus/inductor/amd), if that part of the corpus exists."""
    base = CORPUS / "inductor" / "amd"
    manifest_path = base / "manifest.json"
    if not manifest_path.exists():
        return []
    manifest = json.loads(manifest_path.read_text())
    out = []
    for tag, entry in manifest["snapshots"].items():
        doc = json.loads((base / entry["records"]).read_text())
        folders: dict[str, set[str]] = {}
        for rec in doc["records"] if isinstance(doc, dict) else doc:
            if rec.get("status") == "ok" and rec.get("cache_key"):
                folders.setdefault(rec["cache_key"], set()).add(rec["config_id"])
        out.append(
            Snapshot(
                tag,
                base / entry["archive"],
                entry["release"],
                ":".join(entry["target"].split(":")[:2]),  # hip:gfx942:64 -> hip:gfx942
                f"inductor:{entry['scenario']}",
                {k: frozenset(v) for k, v in folders.items()},
            )
        )
    return out


def pairs_to_check(snapshots: list[Snapshot], across_targets: bool = False) -> list[tuple[Snapshot, Snapshot]]:
    """Every pair (older release first) of snapshots of one group and one target; with across_targets,
    of one group and one backend on different targets."""
    out = []
    for a, b in itertools.combinations(sorted(snapshots, key=lambda s: (_version_key(s.release), s.tag)), 2):
        if a.group != b.group:
            continue
        same_target = a.target == b.target
        same_backend = a.target.split(":")[0] == b.target.split(":")[0]
        if (same_target and not across_targets) or (across_targets and not same_target and same_backend):
            out.append((a, b))
    return out


def kdb(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kdb", "--home", str(home), *args], capture_output=True, text=True, timeout=timeout
    )


def ingest_all(home: Path, snapshots: list[Snapshot], workdir: Path) -> None:
    for snap in snapshots:
        cache = unpack_archive(snap.archive, workdir / snap.tag)
        proc = kdb(home, "ingest", str(cache), "--tag", snap.tag, "--no-sass", "-q")
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"ingest {snap.tag}: exit {proc.returncode}: {proc.stderr.strip()}")


def score(a: Snapshot, b: Snapshot, diff_doc: dict) -> PairScore:
    s = PairScore(a.tag, b.tag)
    configs_b: dict[str, str] = {c: folder for folder, cs in b.folders.items() for c in cs}
    truth: dict[str, set[str]] = {}
    rewritten: set[tuple[str, str]] = set()
    for folder_a, cs in a.folders.items():
        same = {c for c in cs if c in configs_b and a.applied.get(c) == b.applied.get(c)}
        rewritten |= {(folder_a, configs_b[c]) for c in cs if c in configs_b and c not in same}
        partners = {configs_b[c] for c in same}
        if partners:
            truth[folder_a] = partners
    s.rewritten = len({fa for fa, _ in rewritten} - set(truth))
    s.true_pairs = len(truth)
    paired = {
        k["a_cache_key"]: k["b_cache_key"] for k in diff_doc["kernels"] if k.get("a_cache_key") and k.get("b_cache_key")
    }
    for folder_a, folder_b in paired.items():
        if folder_a in truth and folder_b in truth[folder_a]:
            s.found += 1
        elif (folder_a, folder_b) in rewritten:
            continue  # the same request, compiled with options one release rewrote: neither found nor wrong
        elif folder_a in a.folders or folder_b in b.folders:
            # a pair between folders the records know, that no config supports
            s.wrong.append(
                f"{sorted(a.folders.get(folder_a, {'?'}))[0]} -> {sorted(b.folders.get(folder_b, {'?'}))[0]}"
            )
    s.missed = sorted(sorted(a.folders[f])[0] for f in truth if paired.get(f) not in truth[f])
    return s


Runner = Callable[[Path, list[str]], tuple[int, str]]


def subprocess_runner(home: Path, args: list[str]) -> tuple[int, str]:
    proc = kdb(home, *args)
    return proc.returncode, proc.stdout


def in_process_runner(home: Path, args: list[str]) -> tuple[int, str]:
    """The CLI called in this process (no interpreter start per diff); stdout captured."""
    from kdb.cli import run

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run(["--home", str(home), *args])
    return code, out.getvalue()


def diff_documents(
    home: Path,
    pairs: list[tuple[Snapshot, Snapshot]],
    across_targets: bool = False,
    jobs: int = 2,
    runner: Runner | None = None,
) -> list[dict]:
    """`kdb diff A B --format json` of every pair, in order."""

    def one(pair: tuple[Snapshot, Snapshot]) -> dict:
        a, b = pair
        args = ["diff", a.tag, b.tag, "--format", "json", "--min-match", "0"]
        if across_targets:
            args.append("--across-targets")
        code, out = (runner or subprocess_runner)(home, args)
        if code not in (0, 1, 2) or not out.strip():
            raise RuntimeError(f"diff {a.tag} {b.tag}: exit {code}")
        return json.loads(out)

    if runner is not None:  # in-process: one at a time
        return [one(p) for p in pairs]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(one, pairs))


def run_matrix(
    home: Path,
    pairs: list[tuple[Snapshot, Snapshot]],
    across_targets: bool = False,
    jobs: int = 2,
    runner: Runner | None = None,
) -> list[PairScore]:
    docs = diff_documents(home, pairs, across_targets, jobs, runner)
    return [score(a, b, doc) for (a, b), doc in zip(pairs, docs, strict=True)]


def format_matrix(scores: list[PairScore], snapshots: list[Snapshot]) -> str:
    """One release x release table per (group, target): found/true in each cell."""
    by_tag = {s.tag: s for s in snapshots}
    lines = []
    groups: dict[tuple[str, str], list[PairScore]] = {}
    for sc in scores:
        a = by_tag[sc.a]
        groups.setdefault((a.group, a.target), []).append(sc)
    for (group, target), items in sorted(groups.items()):
        tags = sorted({t for sc in items for t in (sc.a, sc.b)}, key=lambda t: _version_key(by_tag[t].release))
        rel = {t: by_tag[t].release for t in tags}
        cell = {(sc.a, sc.b): sc for sc in items}
        lines.append(f"\n{group} {target}  (row = A, column = B: found/true pairs, * = a wrong pair)")
        lines.append("| A \\ B | " + " | ".join(rel[t] for t in tags) + " |")
        lines.append("|---|" + "---|" * len(tags))
        for ta in tags:
            row = []
            for tb in tags:
                sc = cell.get((ta, tb))
                row.append("" if sc is None else f"{sc.found}/{sc.true_pairs}" + ("*" if sc.wrong else ""))
            lines.append(f"| {rel[ta]} | " + " | ".join(row) + " |")
    total_true = sum(s.true_pairs for s in scores)
    total_found = sum(s.found for s in scores)
    total_wrong = sum(len(s.wrong) for s in scores)
    total_rewritten = sum(s.rewritten for s in scores)
    lines.append(
        f"\ntotal: {total_found}/{total_true} true pairs found "
        f"({100 * total_found / max(total_true, 1):.2f}%), {total_wrong} wrong pairs, {len(scores)} snapshot pairs; "
        f"{total_rewritten} folders left out of the truth because one release rewrote the config's requested "
        "options (e.g. kpack=2 -> 1 on gfx950), so the two folders are not the same specialization"
    )
    return "\n".join(lines)


def leave_one_release_out(
    home: Path,
    snapshots: list[Snapshot],
    releases: list[str] | None = None,
    pairs: list[tuple[Snapshot, Snapshot]] | None = None,
) -> dict[str, list[PairScore]]:
    """For each release R of kdb's option-defaults table: every same-target pair (of `pairs`, default all) that
    involves R, diffed in this process with R removed from the table (kdb.triton.defaults.forgetting), as if
    kdb had never seen R."""
    from kdb.triton.defaults import RELEASE_DEFAULTS, forgetting, version_tuple

    out: dict[str, list[PairScore]] = {}
    all_pairs = pairs_to_check(snapshots) if pairs is None else pairs
    for release in releases or sorted(RELEASE_DEFAULTS, key=_version_key):
        wanted = version_tuple(release)
        pairs = [(a, b) for a, b in all_pairs if wanted in (version_tuple(a.release), version_tuple(b.release))]
        with forgetting(release):
            out[release] = run_matrix(home, pairs, runner=in_process_runner)
    return out


def format_leave_one_out(results: dict[str, list[PairScore]], snapshots: list[Snapshot]) -> str:
    """One row per forgotten release, one column per (group, target): found/true pairs, wrong pairs marked."""
    by_tag = {s.tag: s for s in snapshots}
    columns = sorted({(by_tag[sc.a].group, by_tag[sc.a].target) for scs in results.values() for sc in scs})
    lines = [
        "leave-one-release-out: row = the release removed from kdb's table; cell = found/true pairs over every "
        "pair of that target involving it (* = wrong pairs)",
        "| removed | " + " | ".join(f"{t} ({g})" if g != "suite" else t for g, t in columns) + " | total |",
        "|---|" + "---|" * (len(columns) + 1),
    ]
    grand_true = grand_found = grand_wrong = 0
    for release, scores in results.items():
        cells = []
        for col in columns:
            mine = [sc for sc in scores if (by_tag[sc.a].group, by_tag[sc.a].target) == col]
            true, found = sum(s.true_pairs for s in mine), sum(s.found for s in mine)
            wrong = sum(len(s.wrong) for s in mine)
            cells.append(f"{found}/{true}" + (f" {wrong}*" if wrong else "") if mine else "")
        true, found = sum(s.true_pairs for s in scores), sum(s.found for s in scores)
        wrong = sum(len(s.wrong) for s in scores)
        grand_true, grand_found, grand_wrong = grand_true + true, grand_found + found, grand_wrong + wrong
        lines.append(
            f"| {release} | " + " | ".join(cells) + f" | {found}/{true}" + (f" {wrong}*" if wrong else "") + " |"
        )
    lines.append(
        f"\ntotal: {grand_found}/{grand_true} true pairs found ({100 * grand_found / max(grand_true, 1):.2f}%), "
        f"{grand_wrong} wrong pairs"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write per-pair scores here")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--home", type=Path, help="reuse a kdb home that already holds the snapshots")
    ap.add_argument("--across-targets", action="store_true", help="also pair one backend's targets")
    ap.add_argument(
        "--leave-one-out", action="store_true", help="also each release removed from kdb's table in turn (in process)"
    )
    args = ap.parse_args(argv)
    snapshots = suite_snapshots() + inductor_snapshots()
    with tempfile.TemporaryDirectory(prefix="kdb-pairing-") as tmp:
        home = args.home or Path(tmp) / "home"
        if args.home is None:
            ingest_all(home, snapshots, Path(tmp))
        scores = run_matrix(home, pairs_to_check(snapshots), jobs=args.jobs)
        if args.across_targets:
            scores += run_matrix(
                home, pairs_to_check(snapshots, across_targets=True), across_targets=True, jobs=args.jobs
            )
        loro = leave_one_release_out(home, snapshots) if args.leave_one_out else None
    print(format_matrix(scores, snapshots))
    if loro is not None:
        print("\n" + format_leave_one_out(loro, snapshots))
    for sc in scores:
        if sc.missed or sc.wrong:
            print(
                f"{sc.a} -> {sc.b}: missed {sc.missed[:6]}{' ...' if len(sc.missed) > 6 else ''} wrong {sc.wrong[:6]}"
            )
    if args.json:
        args.json.write_text(json.dumps([sc.__dict__ for sc in scores], indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
