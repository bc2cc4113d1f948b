"""Write `kdb diff` outputs of fixed corpus pairs to a directory, to compare two versions of kdb byte for byte.

    python bench/diff_outputs.py /tmp/arch-before            # ingest the corpus, write the outputs
    python bench/diff_outputs.py /tmp/arch-after --compare /tmp/arch-before

Every corpus snapshot is ingested (through the CLI of the kdb this Python imports) into a temporary home;
each case below writes `NAME.out` (stdout) and `NAME.rc` (exit status). Directory arguments are unpacked
to a fixed path (`--unpack-dir`, default /tmp/kdb-diff-outputs-corpus) so their labels match across runs.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "corpus"))

from unpack import unpack_snapshot  # noqa: E402

SAME = [("t3.3.1-gfx942", "t3.4.0-gfx942"), ("t3.6.0-gfx950", "t3.7.1-gfx950")]
ACROSS = [("t3.4.0-sm90", "t3.6.0-sm80"), ("t3.1.0-gfx90a", "t3.3.1-gfx942"), ("t3.4.0-gfx942", "t3.4.0-gfx1100")]
FORMATS = ("json", "table", "markdown", "csv")


def cases(unpacked: dict[str, Path]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for a, b in SAME:
        for fmt in FORMATS:
            out[f"{a}__{b}.{fmt}"] = [a, b, "--format", fmt]
        out[f"{a}__{b}.failon.json"] = [a, b, "--format", "json", "--fail-on", "new-spills,vgpr:+5%,unmatched"]
    for a, b in ACROSS:
        for fmt in FORMATS:
            out[f"{a}__{b}.across.{fmt}"] = [a, b, "--across-targets", "--format", fmt]
    out["untrusted.json"] = ["t3.4.0-sm90", "t3.6.0-sm80", "--format", "json"]
    deep = ["t3.3.1-gfx942", "t3.4.0-gfx942", "--kernel", "*matmul*"]
    out["deep.json"] = [*deep, "--format", "json"]
    out["deep.table"] = [*deep, "--format", "table"]
    out["deep-nv.json"] = ["t3.4.0-sm90", "t3.6.0-sm80", "--across-targets", "--kernel", "*", "--format", "json"]
    out["dir.json"] = ["t3.6.0-gfx950", str(unpacked["t3.7.1-gfx950"]), "--format", "json"]
    return out


def every_pair(names: list[str]) -> dict[str, list[str]]:
    """Every corpus pair a user would diff: consecutive releases of one target, and neighbouring targets of one release."""
    manifest = json.loads((ROOT / "corpus" / "manifest.json").read_text())["snapshots"]
    by_target: dict[str, list[str]] = {}
    by_release: dict[str, list[str]] = {}
    for name in names:
        by_target.setdefault(manifest[name]["target"], []).append(name)
        by_release.setdefault(manifest[name]["triton_version"], []).append(name)
    release = lambda n: tuple(int(p) for p in manifest[n]["triton_version"].split("."))  # noqa: E731
    out: dict[str, list[str]] = {}
    for tags in by_target.values():
        tags.sort(key=release)
        for a, b in zip(tags, tags[1:], strict=False):
            for fmt in FORMATS:
                out[f"every.{a}__{b}.{fmt}"] = [a, b, "--format", fmt]
    for tags in by_release.values():
        tags.sort()
        for a, b in zip(tags, tags[1:], strict=False):
            for fmt in FORMATS:
                out[f"every.{a}__{b}.across.{fmt}"] = [a, b, "--across-targets", "--format", fmt]
    return out


def kdb(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kdb", "--home", str(home), *args], capture_output=True, text=True)


def write_reports_and_listings(home: Path, names: list[str], out: Path) -> None:
    """`kdb report` of every same-target pair in SAME and ACROSS and of each snapshot alone; `kdb show` of each snapshot."""
    for name in names:
        r = kdb(home, "show", name)
        (out / f"show.{name}.out").write_text(r.stdout)
        (out / f"show.{name}.rc").write_text(f"{r.returncode}\n{r.stderr}")
        r = kdb(home, "report", name, "-o", str(out / f"report.{name}.html"))
        (out / f"report.{name}.rc").write_text(f"{r.returncode}\n{r.stderr}")
    for a, b in SAME:
        r = kdb(home, "report", a, b, "-o", str(out / f"report.{a}__{b}.html"))
        (out / f"report.{a}__{b}.rc").write_text(f"{r.returncode}\n{r.stderr}")
    for a, b in ACROSS:
        r = kdb(home, "report", a, b, "--across-targets", "-o", str(out / f"report.{a}__{b}.html"))
        (out / f"report.{a}__{b}.rc").write_text(f"{r.returncode}\n{r.stderr}")


# What differs between two runs of the same kdb: when a snapshot was made, and how long an ingest took.
_CLOCK = re.compile(rb"(created_at\s+)\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?|( in )\d+(\.\d+)? s\b")


def _stable(text: bytes) -> bytes:
    return _CLOCK.sub(lambda m: (m.group(1) or m.group(3)) + b"<clock>", text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--compare", type=Path, help="a directory written by an earlier run")
    parser.add_argument(
        "--every-pair",
        action="store_true",
        help="also every consecutive-release and neighbouring-target pair, every report and listing",
    )
    parser.add_argument("--unpack-dir", type=Path, default=Path("/tmp/kdb-diff-outputs-corpus"))
    args = parser.parse_args()
    manifest = json.loads((ROOT / "corpus" / "manifest.json").read_text())
    names = sorted(manifest["snapshots"])
    unpacked = {}
    for name in names:
        dest = args.unpack_dir / name
        if not dest.exists():
            unpack_snapshot(name, dest)
        unpacked[name] = dest
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kdb-diff-outputs-") as tmp:
        home = Path(tmp)
        for name in names:
            r = kdb(home, "ingest", str(unpacked[name]), "--tag", name, "-q")
            if r.returncode not in (0, 1):
                sys.exit(f"ingest {name} failed ({r.returncode}): {r.stderr}")
        todo = cases(unpacked)
        if args.every_pair:
            todo.update(every_pair(names))
        for case, argv in todo.items():
            r = kdb(home, "diff", *argv)
            (args.out / f"{case}.out").write_text(r.stdout)
            (args.out / f"{case}.rc").write_text(f"{r.returncode}\n{r.stderr}")
        if args.every_pair:
            write_reports_and_listings(home, names, args.out)
    if args.compare is None:
        return 0
    differ = []
    for path in sorted(args.compare.iterdir()):
        other = args.out / path.name
        if not other.exists() or _stable(other.read_bytes()) != _stable(path.read_bytes()):
            differ.append(path.name)
    print(
        f"{len(differ)} of {len(list(args.compare.iterdir()))} files differ"
        + (": " + ", ".join(differ) if differ else "")
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
