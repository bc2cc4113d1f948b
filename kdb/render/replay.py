"""Views of `kdb toolchain list`, `kdb replay` and `kdb bisect` (documents in, text out)."""

from __future__ import annotations

from typing import Any

from kdb.render.tables import table_text, to_json

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
    if d["options_dropped"]:
        names = ", ".join(f"{k} ({n})" for k, n in d["options_dropped"].items())
        out.append(f"  dropped, Triton {d['triton']} has no such option: {names}\n")
    out.append(f"  next: kdb diff {d['replay_of']} {d['tag']}\n")
    return "".join(out)
