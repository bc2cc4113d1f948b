"""What the Python API and the CLI both run: sides opened from tags, a diff's exit status, `kdb show --kernel`'s
lookup and the two HTML report pages (one code path, whichever front end asks)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from kdb.errors import ExitCode, TagError, UsageError
from kdb.store.catalog import Catalog

if TYPE_CHECKING:
    from kdb.diff.model import DiffResult
    from kdb.diff.sides import Side
    from kdb.store.home import Home

GLOB = "*?["


@contextmanager
def open_sides(home: Home, tags: Sequence[str], wait_s: float) -> Iterator[list[Side]]:
    """The loaded diff sides of snapshot tags of `home`, each over its own read-only catalog connection held
    open until the block ends (so every lazy read of a side sees one catalog state)."""
    from kdb.diff.sides import load_side

    if not home.has_catalog():
        raise TagError(f"unknown snapshot {tags[0]!r}: the home {home.root} has no snapshot yet")
    with ExitStack() as stack:
        sides = []
        for tag in tags:
            catalog = stack.enter_context(Catalog.open(home.catalog, read_only=True, wait_s=wait_s))
            if catalog.snapshot_id(tag) is None:
                raise TagError(f"unknown snapshot {tag!r} (see `kdb tags`)")
            sides.append(load_side(catalog, home.store, tag, tag))
        yield sides


def exit_code(result: DiffResult) -> ExitCode:
    """The status `kdb diff` exits with for `result`: 2 untrusted, 1 a rule fired, 8 a rule met an unknown."""
    if result.trust_problem:
        return ExitCode.USAGE
    if result.fired:
        return ExitCode.FINDINGS
    if result.unknown_rules and not result.allow_unknown:
        return ExitCode.UNKNOWN
    return ExitCode.OK


def kernel_details(catalog: Catalog, tag: str, pattern: str) -> list[dict[str, Any]]:
    """`kdb show TAG --kernel PATTERN`'s kernels: each row of the `kernels` view with its analysis, mix, hot
    lines, problems and measured times. UsageError when nothing matches or a cache-key prefix names several kernels."""
    rows = catalog.kernel_rows(tag, pattern)
    if not rows:
        raise UsageError(f"no kernel matching {pattern!r} in snapshot {tag!r}")
    by_prefix = {r["cache_key"] for r in rows if r["name"] != pattern}
    if len(by_prefix) > 1 and not any(c in pattern for c in GLOB) and all(r["name"] != pattern for r in rows):
        keys = ", ".join(sorted(k[: len(pattern) + 4] for k in by_prefix)[:5])
        raise UsageError(f"cache-key prefix {pattern!r} is ambiguous in {tag!r}: {len(by_prefix)} kernels ({keys}…)")
    return [
        {**row, **catalog.kernel_detail(tag, row["cache_key"]), "times": catalog.profile_times(tag, row["cache_key"])}
        for row in rows
    ]


def snapshot_page(catalog: Catalog, tag: str, label: str) -> str:
    """`kdb report TAG`: the HTML page of one snapshot."""
    from kdb.report import html as report_html

    kernels = catalog.kernel_rows(tag, "*")
    keys = [k["cache_key"] for k in kernels]
    lines, mixes = catalog.source_lines_of(tag, keys), catalog.diff_instr_mix(tag, keys)
    details = {
        key: {"lines": lines.get(key, []), "mix": [{"grp": g, "count": c} for _, g, c in mixes.get(key, [])]}
        for key in keys
    }
    return report_html.snapshot_report(label, kernels, details, catalog.autotune_configs(tag))


def diff_page(sa: Side, sb: Side, *, across_targets: bool = False, limit: int = 50) -> str:
    """`kdb report A B`: the HTML page of a diff, with ISA hunks for the `limit` worst changed kernels."""
    from kdb.diff.engine import report_sides
    from kdb.report import html as report_html

    result, views = report_sides(sa, sb, across_targets=across_targets, limit=limit)
    hot: dict[tuple[str, str], list[dict]] = {}
    for name, side in (("a", sa), ("b", sb)):
        keys = [k for v in views if (k := v.kernel.a_cache_key if name == "a" else v.kernel.b_cache_key)]
        for key, rows in side.catalog.source_lines_of(side.tag, keys).items():
            hot[name, key] = rows
    tuned = (sa.catalog.autotune_configs(sa.tag), sb.catalog.autotune_configs(sb.tag))
    return report_html.diff_report(result, views, hot, tuned)
