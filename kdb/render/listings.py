"""Views of catalog listings (`kdb tags`, `show`, `ingest`, `verify`, `gc`): pure functions from records to text."""

from __future__ import annotations

import textwrap
from typing import Any

from kdb.render.profiles import render_kernel_times, render_relinked
from kdb.render.tables import (
    TableLayout,
    _cell,
    fitted_table,
    human_bytes,
    render_rows,
    table_csv,
    table_text,
    to_json,
)

# -- command-specific views -----------------------------------------------------------------------
TAG_COLUMNS = (
    "tag",
    "created_at",
    "kernel_count",
    "file_count",
    "problem_count",
    "raw_bytes",
    "stored_bytes",
    "triton_versions",
    "targets",
    "labels",
)


TAG_HEADERS = ("tag", "created", "kernels", "files", "problems", "raw", "stored", "triton", "targets", "labels")
# At a narrow width the lists (triton, targets, labels) are elided at their end, and where that is not enough these
# columns go, in this order. The tag is never elided: it is what every other command takes.
TAG_OPTIONAL = tuple(TAG_HEADERS.index(h) for h in ("files", "raw", "created", "stored", "labels"))
TAG_ELIDE = {TAG_HEADERS.index(h): ("end", n) for h, n in (("triton", 6), ("targets", 12), ("labels", 6))}


def render_tags(snapshots: list[dict[str, Any]], fmt: str, width: int | None = None) -> str:
    """`kdb tags`: with a `width` (a terminal, or COLUMNS), the table fits it and says which columns it left out."""
    if fmt == "json":
        return to_json(snapshots)
    rows = [
        [s[c] if c not in ("raw_bytes", "stored_bytes") or fmt == "csv" else human_bytes(s[c]) for c in TAG_COLUMNS]
        for s in snapshots
    ]
    if not snapshots and fmt == "table":
        return "no snapshots yet: run `kdb ingest DIR --tag NAME`\n"
    if fmt != "table" or width is None:
        return render_rows(list(TAG_HEADERS), rows, fmt)
    dropped: list[str] = []
    text = fitted_table(TAG_HEADERS, rows, width, TableLayout(elide=TAG_ELIDE, optional=TAG_OPTIONAL), dropped)
    if dropped:
        text += textwrap.fill(f"not shown at this width: {', '.join(dropped)} (-f csv: all)", width) + "\n"
    return text


def render_snapshot(
    snapshot: dict[str, Any], kinds: list[dict[str, Any]], problems: list[dict[str, Any]], fmt: str
) -> str:
    if fmt == "json":
        return to_json({**snapshot, "kinds": kinds, "problems": problems})
    if fmt == "csv":
        return table_csv(list(snapshot), [list(snapshot.values())])
    lines = [f"{k:16} {_cell(human_bytes(v) if k.endswith('bytes') else v)}" for k, v in snapshot.items()]
    out = "\n".join(lines) + "\n\n"
    out += table_text(["kind", "files", "bytes"], [[k["kind"], k["files"], human_bytes(k["bytes"])] for k in kinds])
    if problems:
        out += "\nproblems:\n" + table_text(
            ["path", "stage", "reason"], [[p["path"], p["stage"], p["reason"]] for p in problems]
        )
    return out


def render_ingest(summary: Any) -> str:
    dedup = summary.raw_bytes - summary.new_bytes
    line = (
        f"{summary.tag}: {summary.kernels} kernels, {summary.files} files, {human_bytes(summary.raw_bytes)} read, "
        f"{human_bytes(summary.new_bytes)} new in store, {human_bytes(max(dedup, 0))} compressed or deduplicated away, "
        f"{summary.problems} problems, {summary.seconds:.1f} s"
    )
    out = line + "\n"
    if getattr(summary, "files_unchanged", 0):
        out += (
            f"  {summary.files_unchanged} of {summary.files} files unchanged since the last ingest of this directory "
            "(size, mtime, inode): not read again (--rehash reads them)\n"
        )
    if getattr(summary, "blobs_repaired", 0):
        n = summary.blobs_repaired
        out += f"  repaired {n} damaged stored blob{'s' if n != 1 else ''} with this cache's bytes\n"
    found = getattr(summary, "found", None) or {}
    if found.get("generated_modules") or found.get("best_configs") or found.get("autotune_files"):
        out += (
            f"  found: {found.get('triton_caches', 0)} Triton caches ({found.get('kernel_folders', 0)} kernel folders), "
            f"{found.get('generated_modules', 0)} generated modules, {found.get('best_configs', 0)} best configs, "
            f"{found.get('kernel_perf', 0)} kernel_perf, {found.get('autotune_files', 0)} autotune files\n"
        )
        for kind, counts in sorted((getattr(summary, "links", None) or {}).items()):
            shown = ", ".join(f"{n} {how}" for how, n in sorted(counts.items()))
            out += f"  links {kind.replace('_', ' ')}: {shown}\n"
    for note, n in (getattr(summary, "notes", None) or {}).items():
        out += f"  {n} kernel{'s' if n != 1 else ''} with the PTX mix only, {note}\n"
    out += render_relinked(getattr(summary, "profiles_relinked", []), getattr(summary, "profiles_dropped", []))
    for p in summary.problem_list[:20]:
        out += f"  problem: {p['path']}: {p['reason']}\n"
    if len(summary.problem_list) > 20:
        out += f"  … and {len(summary.problem_list) - 20} more (kdb show {summary.tag})\n"
    return out


def render_verify(report: Any, fmt: str) -> str:
    if fmt == "json":
        return to_json(
            {
                "ok": report.ok,
                "blobs_checked": report.blobs_checked,
                "problems": report.problems,
                "unreferenced_blobs": report.unreferenced,
                "unreferenced_bytes": report.unreferenced_bytes,
                "temporaries": report.temporaries,
                "catalog": getattr(report, "catalog", True),
                "notes": report.notes,
            }
        )
    out = "".join(f"problem: {p}\n" for p in report.problems)
    out += "".join(f"note: {n}\n" for n in report.notes)
    if not getattr(report, "catalog", True):
        out += "no catalog in this home: no snapshot references any blob (`kdb ingest` records one)\n"
    status = "OK" if report.ok else f"{len(report.problems)} problems"
    out += (
        f"verify: {status}; {report.blobs_checked} blobs re-hashed, {report.unreferenced} unreferenced "
        f"({human_bytes(report.unreferenced_bytes)}, `kdb gc` frees them), {report.temporaries} leftover temporaries\n"
    )
    return out


def render_transfer(results: list[Any], verb: str, source: str, dest: str, fmt: str) -> str:
    """`kdb push` / `kdb pull`: per snapshot, whether it travelled and how many blobs and bytes did."""
    rows = [
        {
            "tag": r.tag,
            "dest_tag": r.dest_tag,
            "status": r.status,
            "kernels": r.kernels,
            "blobs": r.blobs,
            "blobs_copied": r.blobs_copied,
            "bytes_copied": r.bytes_copied,
        }
        for r in results
    ]
    if fmt == "json":
        return to_json({"command": verb, "from": source, "to": dest, "snapshots": rows})
    if fmt == "csv":
        return table_csv(list(rows[0]) if rows else [], [list(r.values()) for r in rows])
    lines = []
    for r in results:
        renamed = f" as {r.dest_tag}" if r.dest_tag != r.tag else ""
        if r.status == "present":
            lines.append(f"{verb} {r.tag}{renamed}: already there (same files), nothing copied\n")
        else:
            lines.append(
                f"{verb} {r.tag}{renamed}: {r.kernels} kernels; {r.blobs_copied} of {r.blobs} blobs copied "
                f"({human_bytes(r.bytes_copied)}), the rest were there already\n"
            )
    return "".join(lines) + f"  from {source}\n  to   {dest}\n"


def gc_summary(result: Any) -> str:
    out = (
        f"gc: deleted {result.blobs_deleted} blobs and {result.temporaries_deleted} temporaries, "
        f"freed {human_bytes(result.bytes_freed)}"
    )
    if result.catalog_compacted:
        out += (
            f"; catalog compacted {human_bytes(result.catalog_bytes_before)} -> "
            f"{human_bytes(result.catalog_bytes_after)}"
        )
    if result.capture_folders_removed or result.capture_index_removed:
        out += (
            f"; removed {result.capture_folders_removed} captured folders whose writer died mid-compile and "
            f"{result.capture_index_removed} capture index entries (damaged, or naming deleted blobs)"
        )
    return out + "\n"


# `kdb show --kernel`: the kernel's keys and launch, then its figures (kdb/figures.py) in their shipped order.
# fmt: off
KERNEL_HEADLINE = (
    "name", "cache_key", "backend", "arch", "triton_version", "num_warps", "num_stages", "shared", "vgpr_count",
    "agpr_count", "sgpr_count", "vgpr_spill_count", "sgpr_spill_count", "scratch_bytes", "registers", "stack_bytes",
    "static_shared", "code_size", "occupancy_llvm", "occupancy_llvm_limiter", "occupancy", "occupancy_limiter",
    "occupancy_unit", "vgpr_headroom", "instr_source", "instr_note", "instr_count", "spill_count", "reload_count",
)
# fmt: on


# Figures that share a word, named apart: the code object's spilled registers vs the assembly's spill instructions.
KERNEL_GLOSS = {
    "vgpr_spill_count": "VGPRs spilled, per the code object",
    "sgpr_spill_count": "SGPRs spilled, per the code object",
    "spill_count": "spill-store instructions, per the assembly",
    "reload_count": "spill-reload instructions, per the assembly",
}


def _headline(column: str, facts: dict[str, Any]) -> str:
    """One `kdb show --kernel` line: `column  value`, what the figure counts where a word is shared, and
    `cannot launch (asks …, … grants …)` for an occupancy of 0."""
    value = facts.get(column)
    if column == "occupancy" and facts.get("cannot_launch"):
        return f"{column:24} cannot launch ({facts['cannot_launch']})"
    gloss = KERNEL_GLOSS.get(column)
    return f"{column:24} {_cell(value)}" + (f"  ({gloss})" if gloss else "")


def render_kernels(details: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return to_json(details)
    parts = []
    for d in details:
        # the kernels view's columns, else kernel_analysis's (instr_note is there only)
        facts = {**d.get("analysis", {}), **{k: v for k, v in d.items() if v is not None}}
        lines = [_headline(k, facts) for k in KERNEL_HEADLINE if facts.get(k) is not None]
        out = "\n".join(lines) + "\n"
        by_group: dict[str, int] = {}
        for m in d["mix"]:
            by_group[m["grp"]] = by_group.get(m["grp"], 0) + m["count"]
        if by_group:
            out += "\ninstruction groups:\n" + table_text(
                ["group", "count"], sorted(by_group.items(), key=lambda kv: -kv[1])
            )
            top = sorted(d["mix"], key=lambda m: -m["count"])[:15]
            out += "\ntop mnemonics:\n" + table_text(
                ["mnemonic", "group", "count"], [[m["mnemonic"], m["grp"], m["count"]] for m in top]
            )
        hot = [ln for ln in d["lines"] if ln["grp"] in ("matrix", "scratch", "local") and ln["line"]]
        if hot:
            out += "\nsource lines with matrix / spill instructions:\n" + table_text(
                ["file", "line", "group", "count"],
                [[ln["file"].rsplit("/", 1)[-1], ln["line"], ln["grp"], ln["count"]] for ln in hot],
            )
        if d["problems"]:
            out += "\nproblems:\n" + "".join(f"  {p['path']}: {p['stage']}: {p['reason']}\n" for p in d["problems"])
        out += render_kernel_times(d.get("times", []))
        parts.append(out)
    return "\n".join(parts)
