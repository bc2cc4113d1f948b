"""Views of measured time: what `kdb profile import` linked, and a kernel's times in `kdb show --kernel`."""

from __future__ import annotations

from typing import Any

from kdb.render.tables import table_text, to_json

PROFILE_EPILOG = """\b
Examples:
  kdb profile import run.torch.json.gz --tag torch2.11          # a torch.profiler trace (plain or gzipped)
  kdb profile import run.proton.hatchet run2.json --tag torch2.11
  kdb show torch2.11 --kernel triton_poi_fused_add_0            # the kernel's launches and time
  kdb sql "SELECT * FROM kernel_times WHERE tag = 'torch2.11' ORDER BY total_ns DESC"
  kdb cat torch2.11 run.torch.json.gz > back.json.gz            # a stored profile, as imported
  kdb profile rm run.torch.json.gz --tag torch2.11              # forget one profile (or name it by its sha256)
"""

PROFILE_RM_EPILOG = """\b
Examples:
  kdb profile rm run.torch.json.gz --tag torch2.11     # by the file name it was imported with
  kdb profile rm 3f2a9c41 --tag torch2.11              # by the sha256 of the file or of its JSON (8+ digits)
  kdb sql "SELECT name, profile_hash, content_hash FROM profile_files JOIN snapshots USING (snapshot_id) WHERE tag = 'torch2.11'"
"""


def human_ns(ns: float | None) -> str:
    if ns is None:
        return ""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def percent(share: float | None) -> str:
    return "" if share is None else f"{100 * share:.1f}%"


def render_profile_import(summary: dict[str, Any], fmt: str) -> str:
    """SUMMARY: the import's summary as a dict (`tag`, `files`: each file's FileSummary fields)."""
    if fmt == "json":
        return to_json(summary)
    out = []
    for f in summary["files"]:
        again = ""
        if f["replaced"]:
            earlier = f.get("replaced_name")
            named = f" as {earlier}" if earlier and earlier != f["name"] else ""
            again = f" (the same profile was imported before{named}: its rows replaced)"
        if f.get("same_as"):
            again += f" (also given as {', '.join(f['same_as'])}: the same profile, read once)"
        out.append(
            f"{summary['tag']}: {f['name']} ({f['format']}){again}: {f['launches']} kernel launches, "
            f"{human_ns(f['total_ns'])} of GPU kernel time\n"
        )
        out += _device_lines(f)
        out += _file_lines(f)
    return "".join(out)


def _device_lines(f: dict[str, Any]) -> list[str]:
    if f.get("device") is None:
        return ["  device: the file names none, so it was not checked against the snapshot's targets\n"]
    out = [f"  device: {f['device']}" + ("" if f.get("targets") else " (the snapshot names no target to check)") + "\n"]
    if f.get("unnamed_launches"):
        out.append(f"  {f['unnamed_launches']} launches ran on a device the file does not name (not checked)\n")
    return out


def _file_lines(f: dict[str, Any]) -> list[str]:
    out = []
    share = f["linked_ns"] / f["triton_ns"] if f["triton_ns"] else None
    out.append(
        f"  Triton: {f['triton_launches']} launches, {human_ns(f['triton_ns'])}; linked {f['linked_launches']} "
        f"launches to {f['folders']} kernel folders, {human_ns(f['linked_ns'])} ({percent(share) or 'none'} "
        "of the Triton time)\n"
    )
    if f["by_rule"]:
        rules = ", ".join(f"{rule} {n}" for rule, n in sorted(f["by_rule"].items()))
        out.append(f"  launches linked with each rule (a launch may need several): {rules}\n")
    for reason, (n, ns) in sorted(f["unlinked"].items()):
        out.append(f"  not linked: {reason}: {n} launches, {human_ns(ns)}\n")
    if f.get("mostly_unlinked"):
        out.append(
            f"  warning: {f['no_kernel_launches']} of {f['triton_launches']} Triton launches find no kernel folder "
            "of the snapshot (a run of another cache?): its GPU time lowers every share\n"
        )
    return out


def render_relinked(relinked: list[dict[str, Any]], dropped: list[dict[str, Any]]) -> str:
    """`kdb ingest --replace`: what became of the replaced snapshot's profiles (empty when it had none)."""
    out = []
    for f in relinked:
        share = f["linked_ns"] / f["triton_ns"] if f["triton_ns"] else None
        out.append(
            f"  profile {f['name']} kept and linked again: {f['linked_launches']} of {f['triton_launches']} Triton "
            f"launches to {f['folders']} kernel folders ({percent(share) or 'none'} of the Triton time)\n"
        )
        if f.get("mostly_unlinked"):
            out.append(
                f"  warning: {f['no_kernel_launches']} of its Triton launches find no kernel folder now "
                f"(kdb profile rm {f['name']} --tag … forgets it)\n"
            )
    for d in dropped:
        out.append(f"  profile {d['name']} (sha256 {d['profile_hash']}) dropped: {d['reason']}\n")
    return "".join(out)


def render_kernel_times(times: list[dict[str, Any]]) -> str:
    """The `measured time` block of `kdb show --kernel` (empty when no profile linked a launch to the kernel)."""
    if not times:
        return ""
    rows = [
        [t["profile"], t["launches"], human_ns(t["total_ns"]), human_ns(t["mean_ns"]), percent(t["share"]), t["link"]]
        for t in times
    ]
    return "\nmeasured time:\n" + table_text(["profile", "launches", "total", "mean", "share", "linked by"], rows)
