"""Views of `kdb toolchain list`, `kdb replay` and `kdb bisect` (documents in, text out)."""

from __future__ import annotations

from typing import Any

from kdb.render.tables import table_markdown, table_text, to_json

TOOLCHAIN_EPILOG = """\b
Examples:
  kdb toolchain add 3.7.1                          # makes an environment with pip under the kdb home
  kdb toolchain add 3.6.0 --python ~/venv/bin/python   # an interpreter that already has Triton 3.6.0
  kdb toolchain list --format json
  kdb toolchain rm 3.7.1
"""

REPLAY_EPILOG = """\b
Examples:
  kdb toolchain add 3.7.1
  kdb replay rocm-t3.6 --triton 3.7.1 --tag rocm-t3.6@3.7.1 -j 8   # every kernel of rocm-t3.6 under 3.7.1
  kdb diff rocm-t3.6 rocm-t3.6@3.7.1                             # what the upgrade will do
  kdb replay rocm-t3.6 --triton 3.7.1 --tag on-gfx950 --target gfx950
  kdb sql "SELECT * FROM problems WHERE tag = 'rocm-t3.6@3.7.1' AND stage = 'replay'"
"""

BISECT_EPILOG = """\b
Examples:
  kdb bisect t3.4 t3.8                        # the kernels that changed, replayed with every release between
  kdb bisect t3.4 t3.8 --kernel 'matmul*' --format markdown
"""


def render_toolchains(chains: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return to_json(chains)
    if not chains:
        return "no toolchain registered: `kdb toolchain add VERSION` makes one\n"
    rows = [[c["version"], c["python"], "kdb" if c["managed"] else "yours", c["triton_path"]] for c in chains]
    return table_text(["triton", "python", "made by", "triton package"], rows)


def render_toolchain_change(chain: dict[str, Any], verb: str) -> str:
    return f"{verb} toolchain Triton {chain['version']}: {chain['python']}\n"


def replay_document(outcome: Any) -> dict[str, Any]:
    """The JSON of `kdb replay` (and what the table says): counts, failures, options."""
    ingest = outcome.ingest
    return {
        "tag": outcome.tag,
        "replay_of": outcome.source_tag,
        "triton": outcome.triton,
        "kernels": outcome.kernels,
        "replayed": outcome.replayed,
        "failed": outcome.failed,
        "options_dropped": outcome.dropped,
        "options_defaulted": outcome.defaulted,
        "options_assumed": outcome.assumed,
        "seconds": round(outcome.seconds, 3),
        "compile_seconds": round(outcome.compile_seconds, 3),
        "pointer_range_marked": outcome.pointer_range_marked,
        "snapshot_kernels": ingest.kernels if ingest else 0,
        "mapping": outcome.mapping,
    }


def render_replay(document: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return to_json(document)
    d = document
    out = [
        f"{d['tag']}: {d['replayed']} of {d['kernels']} kernels of {d['replay_of']} replayed with Triton "
        f"{d['triton']} in {d['seconds']:.1f} s; {len(d['failed'])} could not be replayed\n"
    ]
    for f in d["failed"]:
        out.append(f"  not replayed: {f['name']} ({f['cache_key']}): {f['reason']}\n")
    if d["options_defaulted"]:
        names = ", ".join(f"{k} ({n})" for k, n in d["options_defaulted"].items())
        out.append(f"  at their release's default, so Triton {d['triton']}'s default applies: {names}\n")
    if d["options_assumed"]:
        names = ", ".join(f"{k} ({n})" for k, n in d["options_assumed"].items())
        out.append(f"  default unknown to kdb, kept as if set by the user: {names}\n")
    if d["pointer_range_marked"]:
        out.append(
            f"  assumed: every pointer argument of {d['pointer_range_marked']} kernels under 2 GB (tt.pointer_range 32), "
            f"as Triton {d['triton']}'s JIT marks them and {d['replay_of']}'s release did not\n"
        )
    if d["options_dropped"]:
        names = ", ".join(f"{k} ({n})" for k, n in d["options_dropped"].items())
        out.append(f"  dropped, Triton {d['triton']} has no such option: {names}\n")
    out.append(f"  next: kdb diff {d['replay_of']} {d['tag']}\n")
    return "".join(out)


def bisect_document(outcome: Any) -> dict[str, Any]:
    """The JSON of `kdb bisect` (and what the table and markdown say)."""
    from dataclasses import asdict

    kernels = []
    for k in outcome.kernels:
        doc = asdict(k)
        doc["changes"] = [
            {
                "figure": c["figure"],
                "label": c["label"],
                "first_release": c["release"],
                "before": c["before"],
                "after": c["after"],
                "uncertain": list(c["uncertain"]),
                "b": c["b_value"],
            }
            for c in doc["changes"]
        ]
        doc["not_replayed"] = dict(doc["not_replayed"])
        kernels.append(doc)
    return {
        "a": outcome.a,
        "b": outcome.b,
        "a_release": outcome.a_release,
        "b_release": outcome.b_release,
        "releases": outcome.releases,
        "b_replayed": outcome.b_replayed,
        "seconds": round(outcome.seconds, 3),
        "kernels": kernels,
    }


_BISECT_COLUMNS = ("kernel", "key", "figure", "first changed in", "before", "after", "B")


def _first(change: dict[str, Any], last: str) -> str:
    if change["first_release"] is None:
        return f"after {last} (B's own compile)"
    if change["uncertain"]:
        return f"{', '.join(change['uncertain'])} or {change['first_release']} (not replayed in between)"
    return str(change["first_release"])


def render_bisect(document: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return to_json(document)
    d = document
    last = d["releases"][-1] if d["releases"] else d["a_release"]
    rows, notes = [], []
    for k in d["kernels"]:
        for c in k["changes"]:
            rows.append([k["name"], k["a_cache_key"][:8], c["label"], _first(c, last), c["before"], c["after"], c["b"]])
        for release, reason in k["not_replayed"].items():
            notes.append(f"{k['name']} ({k['a_cache_key'][:8]}) not replayed with {release}: {reason}")
    steps = " → ".join([d["a_release"] + " (A)", *d["releases"]])
    head = f"{d['a']} → {d['b']}: {len(d['kernels'])} kernels replayed from A with {steps}" + (
        "" if d["b_replayed"] else f"; B's release {d['b_release']} has no toolchain, its own compile is last"
    )
    if fmt == "markdown":
        body = table_markdown(_BISECT_COLUMNS, rows) if rows else "No figure changed.\n"
        return f"### {head}\n\n{body}" + "".join(f"- {n}\n" for n in notes)
    body = table_text(_BISECT_COLUMNS, rows) if rows else "no figure changed\n"
    return f"{head}\n{body}" + "".join(f"  {n}\n" for n in notes)
