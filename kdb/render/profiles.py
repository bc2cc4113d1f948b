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
        again = " (imported before: its rows replaced)" if f["replaced"] else ""
        out.append(
            f"{summary['tag']}: {f['name']} ({f['format']}){again}: {f['launches']} kernel launches, "
            f"{human_ns(f['total_ns'])} of GPU kernel time\n"
        )
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
