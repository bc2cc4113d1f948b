"""What the Python API and the CLI both run: a diff's exit status, `kdb show --kernel`'s lookup and the two HTML
report pages (one code path, whichever front end asks), and the API's wording of errors."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from kdb.errors import ExitCode, KdbError, UsageError

if TYPE_CHECKING:
    from kdb.diff.model import DiffResult
    from kdb.diff.sides import Side
    from kdb.store.catalog import Catalog

GLOB = "*?["

# kdb's core words its errors for the command line (`use --replace to overwrite it`, `see --wait`). Through the API
# each option is named as the keyword argument that sets it: the option's name with `_` for `-` (`--fail-on` is
# `fail_on`, `--min-match` `min_match`, `--wait` `wait`), a flag as the value it sets.
API_ARGUMENTS = {
    "--replace": "replace=True",
    "--no-sass": "sass=False",
    "--allow-unknown": "allow_unknown=True",
    "--across-targets": "across_targets=True",
    "--wait": "kdb.open(wait=…)",
    "--catalog": "kdb.open(catalog=…)",
    "--store": "store=…",
}
# An option in a message: not part of a word or of quoted user text (`unknown --fail-on rule '--x'`)
_OPTION = re.compile(r"(?<![\w'\"-])--([a-z][a-z-]*)")
P = ParamSpec("P")
R = TypeVar("R")


def api_message(text: str) -> str:
    """A CLI-worded message as the API says it: each `--option` named as the argument that sets it."""
    return _OPTION.sub(lambda m: API_ARGUMENTS.get(m.group(0), m.group(1).replace("-", "_")), text)


def api_errors(function: Callable[P, R]) -> Callable[P, R]:
    """Run an API entry point: a KdbError it raises (same class, same exit_code) names the API's arguments, not
    the CLI's options."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except KdbError as exc:
            if exc.args and isinstance(exc.args[0], str):
                exc.args = (api_message(exc.args[0]), *exc.args[1:])
            raise

    return run


def rule_texts(fail_on: str | Iterable[str]) -> list[str]:
    """`fail_on` as the CLI's --fail-on values: one string is one value (comma-separated rules, as on the command
    line), not a sequence of one-letter rules."""
    if isinstance(fail_on, str):
        return [fail_on]
    texts = list(fail_on)
    wrong = [t for t in texts if not isinstance(t, str)]
    if wrong:
        raise UsageError(f"fail_on takes rule strings ('new-spills', 'vgpr:+10%'), not {wrong[0]!r}")
    return texts


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
    from kdb.diff.verdict import launchable, why_unlaunchable

    rows = catalog.queries.kernel_rows(tag, pattern)
    if not rows:
        raise UsageError(f"no kernel matching {pattern!r} in snapshot {tag!r}")
    by_prefix = {r["cache_key"] for r in rows if r["name"] != pattern}
    if len(by_prefix) > 1 and not any(c in pattern for c in GLOB) and all(r["name"] != pattern for r in rows):
        keys = ", ".join(sorted(k[: len(pattern) + 4] for k in by_prefix)[:5])
        raise UsageError(f"cache-key prefix {pattern!r} is ambiguous in {tag!r}: {len(by_prefix)} kernels ({keys}…)")
    return [
        {
            **row,
            # why it cannot launch (`asks 98304 B of LDS, gfx942 grants 65536 B`); None where it can or is unknown
            "cannot_launch": why_unlaunchable(row) if launchable(row) is False else None,
            **catalog.queries.kernel_detail(tag, row["cache_key"]),
            "times": catalog.profiles.profile_times(tag, row["cache_key"]),
        }
        for row in rows
    ]


def snapshot_page(catalog: Catalog, tag: str, label: str) -> str:
    """`kdb report TAG`: the HTML page of one snapshot."""
    from kdb.report import html as report_html

    kernels = catalog.queries.kernel_rows(tag, "*")
    keys = [k["cache_key"] for k in kernels]
    lines, mixes = catalog.diffs.source_lines_of(tag, keys), catalog.diffs.diff_instr_mix(tag, keys)
    details = {
        key: {"lines": lines.get(key, []), "mix": [{"grp": g, "count": c} for _, g, c in mixes.get(key, [])]}
        for key in keys
    }
    return report_html.snapshot_report(label, kernels, details, catalog.diffs.autotune_configs(tag))


def diff_page(sa: Side, sb: Side, *, across_targets: bool = False, limit: int = 50) -> str:
    """`kdb report A B`: the HTML page of a diff, every changed kernel's drill-down complete (loop depths, metadata,
    ISA hunks: in full for the `limit` worst changed kernels, the first lines of every other one's)."""
    from kdb.diff.engine import report_sides
    from kdb.diff.model import DiffOptions
    from kdb.report import html as report_html

    result, views = report_sides(sa, sb, DiffOptions(across_targets=across_targets), sys.maxsize)
    hot: dict[tuple[str, str], list[dict]] = {}
    for name, side in (("a", sa), ("b", sb)):
        keys = [k for v in views if (k := v.kernel.a_cache_key if name == "a" else v.kernel.b_cache_key)]
        for key, rows in side.catalog.source_lines_of(side.tag, keys).items():
            hot[name, key] = rows
    tuned = (sa.catalog.autotune_configs(sa.tag), sb.catalog.autotune_configs(sb.tag))
    return report_html.diff_report(result, views, hot, tuned, limit)
