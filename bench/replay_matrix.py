#!/usr/bin/env python3
"""The replay fidelity matrix of issue 39: does `kdb replay` reproduce what a real compile gives?

For every corpus snapshot (corpus/snapshots/*.tar.zst and the AMD Inductor upgrade scenarios under
corpus/inductor/amd/), in a scratch kdb home (made or reused; toolchains from /var/tmp/kdb-toolchains):

* own release: `kdb replay S --triton <S's release> --tag S@own`, then `kdb diff S S@own --format json`: per kernel,
  every figure kdb compares (the JSON's `metrics`: each figure's `a` equal to its `b`) and the verdict (`same`,
  which `kdb diff S S` gives every kernel);
* next release: `kdb replay S --triton <N> --tag S@N` with N the next release the corpus holds for S's target (and
  scenario), then `kdb diff N-snapshot S@N --format json` (figures of the real compile against the replay's, per
  kernel of S that `kdb diff S N-snapshot` pairs) and the verdicts of `kdb diff S N-snapshot` against those of
  `kdb diff S S@N`.

Writes bench/results/replay_matrix.json (one entry per snapshot pair, merged into what a run of another subset
wrote) and prints the matrix in markdown.

    python bench/replay_matrix.py                         # everything (hours on 2 cores)
    python bench/replay_matrix.py --only 'gfx942,sm90'    # snapshots whose tag contains one of these (or globs)
    python bench/replay_matrix.py --own-only --only t3.6.0-gfx942
    python bench/replay_matrix.py --report                # the markdown of the recorded results, nothing run
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
INDUCTOR = CORPUS / "inductor" / "amd"
OUT = ROOT / "bench" / "results" / "replay_matrix.json"
DEFAULT_HOME = Path("/var/tmp/kdb-replay-matrix/home")
TOOLCHAINS = Path("/var/tmp/kdb-toolchains")
FIRST_TARGETS = ("gfx942", "sm90")  # run first: the targets the users hit
PAIRED = ("same", "regressed", "improved", "mixed", "neutral")


@dataclass(frozen=True)
class Snap:
    tag: str
    archive: Path
    release: str
    target: str  # gfx942, sm90
    group: str  # "kernels" (the corpus suite) or the Inductor scenario


@dataclass(frozen=True)
class Config:
    home: Path
    jobs: int
    timeout: float
    outcomes: Path  # the replays' `kdb replay --format json` outputs, kept to reuse a replay
    redo: bool


def release_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


def corpus_snapshots() -> list[Snap]:
    snaps = []
    for tag, s in json.loads((CORPUS / "manifest.json").read_text())["snapshots"].items():
        snaps.append(Snap(tag, CORPUS / s["archive"], s["triton_version"], s["target"], "kernels"))
    for tag, s in json.loads((INDUCTOR / "manifest.json").read_text())["snapshots"].items():
        snaps.append(Snap(tag, INDUCTOR / s["archive"], s["release"], s["target"].split(":")[1], s["scenario"]))
    return snaps


def next_of(snap: Snap, snaps: list[Snap]) -> Snap | None:
    later = [s for s in snaps if (s.group, s.target) == (snap.group, snap.target)]
    later = [s for s in later if release_key(s.release) > release_key(snap.release)]
    return min(later, key=lambda s: release_key(s.release), default=None)


def selected(snap: Snap, only: list[str]) -> bool:
    return not only or any(fnmatch.fnmatch(snap.tag, p) if "*" in p else p in snap.tag for p in only)


def run_order(snap: Snap) -> tuple[Any, ...]:
    first = snap.target in FIRST_TARGETS
    return (not first, snap.group != "kernels", snap.target, release_key(snap.release))


def kdb(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # run outside the repository: `-m` puts the working directory first on sys.path, ahead of PYTHONPATH (which may
    # name a frozen copy of kdb to measure while others edit the tree)
    command = [sys.executable, "-m", "kdb", "--home", str(home), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=home.parent)


def json_of(done: subprocess.CompletedProcess[str], what: str) -> Any:
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"{what}: exit {done.returncode}, no JSON ({done.stderr.strip()[-400:]})") from None


def tags(home: Path) -> set[str]:
    return {t["tag"] for t in json_of(kdb(home, "tags", "-f", "json"), "kdb tags")}


def prepare(home: Path, snaps: list[Snap]) -> None:
    """Toolchains registered, every snapshot ingested (what is there already is kept)."""
    chains = {c["version"] for c in json_of(kdb(home, "toolchain", "list", "-f", "json"), "kdb toolchain list")}
    for python in sorted(TOOLCHAINS.glob("t*/bin/python")):
        version = python.parent.parent.name[1:]
        if version not in chains:
            done = kdb(home, "toolchain", "add", version, "--python", str(python))
            print(f"toolchain {version}: {(done.stdout or done.stderr).strip()}", flush=True)
    have = tags(home)
    for snap in snaps:
        if snap.tag in have:
            continue
        with tempfile.TemporaryDirectory(prefix="kdb-matrix-") as tmp:
            unpack = f"zstd -dc {snap.archive} | tar -x -C {tmp}"
            subprocess.run(unpack, shell=True, check=True)
            done = kdb(home, "ingest", tmp, "--tag", snap.tag, "-q", "-j", "2")
        if done.returncode != 0 and snap.tag not in tags(home):
            raise SystemExit(f"ingest {snap.tag}: exit {done.returncode} {done.stderr.strip()}")
        # exit 1: ingested, with problems (files the analysis could not read: they are the snapshot's as well)
        print(f"ingested {snap.tag} (exit {done.returncode})", flush=True)


def replay(cfg: Config, snap: Snap, release: str, tag: str) -> dict[str, Any]:
    """`kdb replay` (or the outcome of an earlier one, when its snapshot is still there)."""
    saved = cfg.outcomes / f"{tag}.json"
    if not cfg.redo and saved.exists() and tag in tags(cfg.home):
        return dict(json.loads(saved.read_text()))
    started = time.monotonic()
    args = ["replay", snap.tag, "--triton", release, "--tag", tag, "-j", str(cfg.jobs), "--replace"]
    done = kdb(cfg.home, *args, "--timeout", f"{cfg.timeout:g}", "-f", "json")
    try:
        outcome = json.loads(done.stdout)
    except ValueError:  # nothing replayed: no snapshot, one line saying why
        outcome = {"tag": None, "kernels": None, "replayed": 0, "failed": [], "error": done.stderr.strip()}
    outcome["wall_seconds"] = round(time.monotonic() - started, 1)
    cfg.outcomes.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(outcome, indent=1))
    return dict(outcome)


def diff(home: Path, a: str, b: str) -> dict[str, dict[str, Any]]:
    """`kdb diff A B --format json`: the rows of A's kernels, by A's cache key (a B-only row by its B key)."""
    done = kdb(home, "diff", f"tag:{a}", f"tag:{b}", "-f", "json", "--no-pager", "--min-match", "0")
    rows = json_of(done, f"kdb diff {a} {b}")["kernels"]
    return {r["a_cache_key"] or f"B:{r['b_cache_key']}": r for r in rows}


def differing(row: dict[str, Any]) -> dict[str, Any]:
    """The figures whose two sides differ: what proves a pair's figures equal is every metric's a == b."""
    return {k: {"ref": m["a"], "replay": m["b"]} for k, m in (row.get("metrics") or {}).items() if m["a"] != m["b"]}


def mix_equal(row: dict[str, Any]) -> bool:
    groups = row.get("mix_groups") or {}
    return all(g.get("a") == g.get("b") for g in groups.values())


@dataclass
class Tally:
    compared: int = 0
    figures_equal: int = 0
    mix_equal: int = 0
    verdicts: int = 0
    verdicts_agree: int = 0

    def add(self, row: dict[str, Any] | None, verdict: tuple[str | None, str | None]) -> dict[str, Any] | None:
        """Count one paired kernel; what differs when its figures are not equal (None when they are)."""
        self.compared += 1
        self.verdicts += 1
        self.verdicts_agree += verdict[0] == verdict[1]
        if row is None:
            return {"figures": None}
        figures = differing(row)
        self.figures_equal += not figures and bool(row.get("metrics"))
        self.mix_equal += mix_equal(row)
        return {"figures": figures} if figures or not row.get("metrics") else None


def evaluate(cfg: Config, snap: Snap, reference: Snap | None) -> dict[str, Any]:
    """One snapshot pair: S under its own release (reference None) or under the next one (`reference`)."""
    started = time.monotonic()
    release = reference.release if reference else snap.release
    tag = f"{snap.tag}@{release}" if reference else f"{snap.tag}@own"
    outcome = replay(cfg, snap, release, tag)
    mapping: dict[str, str] = outcome.get("mapping") or {}
    failed = {f["cache_key"]: f for f in outcome.get("failed") or []}
    diff_started = time.monotonic()
    ref_tag = reference.tag if reference else snap.tag
    to_replay = diff(cfg.home, snap.tag, tag) if outcome.get("tag") else {}
    # source kernel -> (its reference kernel, the verdict `kdb diff S reference` gives it): for the own release
    # the reference is S itself (`kdb diff S S`: every kernel `same`)
    real = diff(cfg.home, snap.tag, ref_tag)
    pairs = {k: (r["b_cache_key"], r["label"]) for k, r in real.items() if r["label"] in PAIRED}
    unpaired = sum(1 for k, r in real.items() if not k.startswith("B:") and r["label"] not in PAIRED)
    ref_rows = diff(cfg.home, reference.tag, tag) if reference and outcome.get("tag") else to_replay
    diff_seconds = time.monotonic() - diff_started
    tally, misses = Tally(), []
    for key, (ref_key, label) in sorted(pairs.items()):
        ours = to_replay.get(key, {})
        verdict = (label, ours.get("label"))
        name = ours.get("name") or (failed.get(key) or {}).get("name")
        base = {"name": name, "source": key, "reference": ref_key, "replay": mapping.get(key)}
        if key not in mapping:
            tally.add(None, (label, None))
            reason = (failed.get(key) or {}).get("reason") or outcome.get("error") or "not in the replay's mapping"
            misses.append({**base, "why": "not replayed", "reason": reason, "verdicts": verdict})
            continue
        row = ref_rows.get(ref_key)
        if row is None or row.get("label") not in PAIRED or row.get("b_cache_key") != mapping[key]:
            tally.add(None, verdict)
            why = f"kdb diff {ref_tag} {tag} pairs it with {row.get('b_cache_key') if row else None}"
            misses.append({**base, "why": "not paired", "reason": why, "verdicts": verdict})
            continue
        miss = tally.add(row, verdict)
        if miss or verdict[0] != verdict[1]:
            misses.append({**base, "why": "figures" if miss else "verdict", **(miss or {}), "verdicts": verdict})
    return {
        "pair": tag,
        "kind": "next" if reference else "own",
        "source": snap.tag,
        "group": snap.group,
        "target": snap.target,
        "from_release": snap.release,
        "release": release,
        "reference": ref_tag,
        "kernels": outcome.get("kernels") or sum(1 for k in real if not k.startswith("B:")),
        "replayed": outcome.get("replayed", 0),
        "not_replayed": [
            {"name": f["name"], "cache_key": f["cache_key"], "reason": f["reason"]} for f in failed.values()
        ],
        "replay_error": outcome.get("error"),
        "options_dropped": outcome.get("options_dropped") or {},
        "unpaired_with_reference": unpaired,
        "paired": tally.compared,
        "figures_equal": tally.figures_equal,
        "mix_equal": tally.mix_equal,
        "verdicts_compared": tally.verdicts,
        "verdicts_agree": tally.verdicts_agree,
        "misses": misses,
        "seconds": {
            "replay": outcome.get("seconds"),
            "replay_wall": outcome.get("wall_seconds"),
            "diff": round(diff_seconds, 1),
            "total": round(time.monotonic() - started, 1),
        },
    }


def cell(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return ""
    text = f"{entry['figures_equal']}/{entry['paired']}"
    if entry["kind"] == "next":
        text = f"→{entry['release']} {text} (v {entry['verdicts_agree']})"
    return text


def markdown(results: dict[str, Any]) -> str:
    entries = list(results["pairs"].values())
    rows = sorted({(e["group"], e["target"]) for e in entries}, key=lambda r: (r[0] != "kernels", r))
    releases = sorted({e["from_release"] for e in entries}, key=release_key)
    lines = [
        "Cells: own-release replay `figures equal / kernels`; next-release replay `→N figures equal / kernels paired "
        "with N's real compile (v: same verdict as kdb diff S N)`.",
        "",
        "| target | " + " | ".join(releases) + " |",
        "|---|" + "---|" * len(releases),
    ]
    for group, target in rows:
        cells = []
        for release in releases:
            found = [e for e in entries if (e["group"], e["target"], e["from_release"]) == (group, target, release)]
            own = next((e for e in found if e["kind"] == "own"), None)
            nxt = next((e for e in found if e["kind"] == "next"), None)
            cells.append("<br>".join(c for c in (cell(own), cell(nxt)) if c))
        label = target if group == "kernels" else f"{group} ({target})"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    t = results["totals"]
    lines += ["", f"Totals: {json.dumps(t)}"]
    misses = [(e["pair"], m) for e in entries for m in e["misses"]]
    if misses:
        lines += ["", f"Misses ({len(misses)}):"]
        for pair, m in misses:
            detail = m.get("reason") or json.dumps(m.get("figures"))
            lines.append(f"- {pair} {m['name']}: {m['why']}: {detail} (verdicts {m['verdicts']})")
    return "\n".join(lines)


def totals(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("own", "next"):
        es = [e for e in results["pairs"].values() if e["kind"] == kind]
        out[kind] = {
            k: sum(e[k] or 0 for e in es)
            for k in ("kernels", "replayed", "paired", "figures_equal", "verdicts_compared", "verdicts_agree")
        }
        out[kind]["snapshot_pairs"] = len(es)
        out[kind]["seconds"] = round(sum(e["seconds"]["replay_wall"] or 0 for e in es), 1)
    return out


def save(results: dict[str, Any]) -> None:
    results["totals"] = totals(results)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, OUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME)
    parser.add_argument("--only", default="", help="comma-separated substrings or globs of snapshot tags")
    parser.add_argument("--own-only", action="store_true")
    parser.add_argument("--next-only", action="store_true")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--redo", action="store_true", help="replay again what an earlier run replayed")
    parser.add_argument("--report", action="store_true", help="print the recorded matrix; run nothing")
    args = parser.parse_args()
    results = json.loads(OUT.read_text()) if OUT.exists() else {"pairs": {}}
    if args.report:
        print(markdown(results))
        return
    snaps = corpus_snapshots()
    only = [p for p in args.only.split(",") if p]
    chosen = sorted((s for s in snaps if selected(s, only)), key=run_order)
    cfg = Config(args.home, args.jobs, args.timeout, args.home.parent / "replays", args.redo)
    started = time.monotonic()
    needed = {s.tag for s in chosen} | {n.tag for s in chosen if (n := next_of(s, snaps))}
    prepare(args.home, [s for s in snaps if s.tag in needed])
    results.update(home=str(args.home), jobs=args.jobs, timeout_s=args.timeout, machine=f"{os.cpu_count()} cores")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    probe = [sys.executable, "-c", "import kdb; print(kdb.__file__)"]
    where = subprocess.run(probe, capture_output=True, text=True, cwd=args.home.parent)
    results["kdb"] = {"tree_head": head.stdout.strip(), "imported_from": where.stdout.strip()}
    for snap in chosen:
        references: list[Snap | None] = [] if args.next_only else [None]
        if not args.own_only and (nxt := next_of(snap, snaps)) is not None:
            references.append(nxt)
        for reference in references:
            entry = evaluate(cfg, snap, reference)
            results["pairs"][entry["pair"]] = entry
            save(results)
            print(
                f"{entry['pair']}: {cell(entry)}, replayed {entry['replayed']}/{entry['kernels']}, "
                f"{len(entry['misses'])} misses, {entry['seconds']['replay_wall']} s",
                flush=True,
            )
    results["last_run_seconds"] = round(time.monotonic() - started, 1)
    save(results)
    print(markdown(results))


if __name__ == "__main__":
    main()
