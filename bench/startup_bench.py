"""Start-up and answer speed (issue 41), before and after in one run: a baseline tree against this one.

    git worktree add --detach /tmp/kdb-base <commit>      # the tree to compare against
    python bench/startup_bench.py --base /tmp/kdb-base --home HOME --json bench/results/startup_query.json

HOME holds snapshots `a0` and `b` (query_bench.py's 10k-kernel caches A and B) and ~20 snapshots in all
(re-ingests of A) for the summary query; without --home, query_bench.py's steps build one under --work.
Every command runs as a fresh process, the baseline's and this tree's alternating, `--repeat` times each
(fastest and median): `kdb --version` as the console script runs it, `python -X importtime -c "import
kdb.cli"` (the cumulative figure; and of the module holding the command app, which a command imports),
`kdb tags`, `kdb diff a0 b` (table and JSON) and run_bench.py's summary query through `kdb sql`. Each
tree runs with PYTHONPATH at its root (the import path is checked); outputs of the two trees are compared
byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from run_bench import QUERY  # noqa: E402

# the `kdb` console script (pyproject.toml: kdb = "kdb.cli:main"), without the wrapper's own start-up
CONSOLE = "import sys; from kdb.cli import main; sys.argv[0] = 'kdb'; main()"


NEUTRAL = Path("/")  # the working directory of every command: neither tree may be found through it


def _env(tree: Path, home: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "KDB_HOME": str(home), "COLUMNS": "200"}


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False, cwd=NEUTRAL)
    return time.perf_counter() - t0, done


def _import_us(module: str, env: dict[str, str]) -> int | None:
    """The cumulative µs `python -X importtime` gives `module` (None when the tree has no such module)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        env=env,
        capture_output=True,
        text=True,
        cwd=NEUTRAL,
    )
    for line in done.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module:
            return int(parts[1])
    return None


def _stats(values: list[float]) -> dict[str, float]:
    return {"fastest": round(min(values), 4), "median": round(statistics.median(values), 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="the baseline tree (a git worktree)")
    ap.add_argument("--home", type=Path, help="a home with a0, b and ~20 snapshots (default: build under --work)")
    ap.add_argument("--work", type=Path, default=BENCH / ".data" / "query")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--quiet-below",
        type=float,
        metavar="LOAD",
        help="start each command only once the 1-minute load average is below LOAD (a shared machine's quiet moments)",
    )
    args = ap.parse_args()
    home = args.home
    if home is None:
        subprocess.run(
            [sys.executable, str(BENCH / "query_bench.py"), "--work", str(args.work), "--repeat", "1"], check=True
        )
        home = args.work / "home"
    trees = {"base": args.base.resolve(), "new": ROOT}
    for name, tree in trees.items():
        where = subprocess.run(
            [sys.executable, "-c", "import kdb; print(kdb.__file__)"],
            env=_env(tree, home),
            capture_output=True,
            text=True,
            check=True,
            cwd=NEUTRAL,
        ).stdout.strip()
        assert where.startswith(str(tree)), f"{name}: kdb imported from {where}, not {tree}"
    kdb = [sys.executable, "-c", CONSOLE]
    commands = {
        "version": [*kdb, "--version"],
        "tags": [*kdb, "tags"],
        "diff": [*kdb, "diff", "a0", "b"],
        "diff_json": [*kdb, "diff", "a0", "b", "--format", "json"],
        "summary_query": [*kdb, "sql", QUERY],
    }
    times: dict[str, dict[str, list[float]]] = {n: {c: [] for c in commands} for n in trees}
    outputs: dict[str, dict[str, bytes]] = {n: {} for n in trees}
    imports: dict[str, dict[str, list[int]]] = {n: {"kdb.cli": [], "app": []} for n in trees}
    loads: list[float] = []  # the 1-minute load average as each timed command started
    for i in range(args.repeat):
        for cmd, argv in commands.items():
            for name, tree in trees.items():  # alternating: the load the machine is under falls on both
                while args.quiet_below is not None and os.getloadavg()[0] >= args.quiet_below:
                    time.sleep(2)
                loads.append(os.getloadavg()[0])
                seconds, done = _timed(argv, _env(tree, home))
                assert done.returncode in (0, 1), (name, cmd, done.stderr.decode()[-500:])
                times[name][cmd].append(seconds)
                outputs[name].setdefault(cmd, done.stdout)
        for name, tree in trees.items():
            env = _env(tree, home)
            imports[name]["kdb.cli"].append(_import_us("kdb.cli", env) or 0)
            app = "kdb.cli.commands" if (tree / "kdb" / "cli" / "commands.py").exists() else "kdb.cli"
            imports[name]["app"].append(_import_us(app, env) or 0)
        print(f"round {i + 1}/{args.repeat}", flush=True)
    snapshots = subprocess.run(
        [*kdb, "sql", "SELECT count(*) FROM snapshots", "--format", "csv"],
        env=_env(ROOT, home),
        capture_output=True,
        text=True,
        check=True,
        cwd=NEUTRAL,
    ).stdout.split()[-1]
    out: dict[str, object] = {
        "cpus": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "load_1min_at_start_of_commands": {"min": min(loads), "max": max(loads)},
        "quiet_below": args.quiet_below,
        "base": str(trees["base"]),
        "base_commit": subprocess.run(
            ["git", "-C", str(trees["base"]), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "new_commit": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "repeat": args.repeat,
        "summary_snapshots": int(snapshots),
        "same_output": {c: outputs["base"][c] == outputs["new"][c] for c in commands},
    }
    for name in trees:
        out[name] = {
            **{f"{c}_s": _stats(v) for c, v in times[name].items()},
            **{f"import_{m}_ms": _stats([u / 1000 for u in v]) for m, v in imports[name].items()},
        }
    base, new = out["base"], out["new"]
    assert isinstance(base, dict) and isinstance(new, dict)
    out["ratio_fastest"] = {k: round(new[k]["fastest"] / base[k]["fastest"], 3) for k in base if base[k]["fastest"]}
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
