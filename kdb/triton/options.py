"""Tuning options of a kernel specialization, compared by release default: which options kdb compares per backend,
and whether two kernels' options are compatible ("equal, or each at its own release's default"). Pure functions."""

from __future__ import annotations

from typing import Any

from kdb.triton.defaults import (
    ABSENT,
    RELEASE_DEFAULTS,
    UNKNOWN,
    Group,
    OptionDefaults,
    group_of,
    table_or_inferred_default,
)

# Each release's defaults (kdb/triton/defaults.py: the table, and what a diff learns from its snapshots).
# Fields of the options dataclasses that a release derives from the target, the machine or the install
# (paths), not from what the kernel asked for; num_warps/num_ctas are part of the hashed identity instead.
NOT_COMPARED = frozenset(
    {
        "arch",
        "backend_name",
        "extern_libs",
        "supported_fp8_dtypes",
        "deprecated_fp8_dtypes",
        "deprecated_fp8_dot_operand_dtypes",
        "allowed_dot_input_precisions",
        "default_dot_input_precision",
        "max_num_imprecise_acc_default",
        "allow_fp8e4nv",
        "allow_fp8e4b15",
        "warp_size",
        "ptx_version",
        "ptx_options",
        "num_warps",
        "num_ctas",
    }
)


def _compared_options() -> dict[str, tuple[str, ...]]:
    names: dict[str, set[str]] = {}
    for backends in RELEASE_DEFAULTS.values():
        for backend, arches in backends.items():
            for values in arches.values():
                names.setdefault(backend, set()).update(k for k in values if not k.startswith("__"))
    return {backend: tuple(sorted(keys - NOT_COMPARED)) for backend, keys in names.items()}


# Every option kdb compares, per backend: each release's tuning knobs (num_stages, waves_per_eu, kpack,
# matrix_instr_nonkdim, schedule_hint, instruction_sched_variant, maxnreg, enable_fp_fusion, ...).
TUNING_OPTIONS: dict[str, tuple[str, ...]] = _compared_options()


def options_compatible(
    a: dict[str, Any],
    b: dict[str, Any],
    version_a: str | None = None,
    version_b: str | None = None,
    context: OptionDefaults | None = None,
) -> tuple[bool, list[str]]:
    """Compare two `parts["options"]` dicts: every option equal, or each side at its own release's default.

    An option the other release does not have counts as "at its default" there. `version_a`/`version_b`
    stand in for a JSON without `triton_version` (before 3.3): the release family inferred from the
    folder name, e.g. '3.0-3.1'. `context` holds what a diff learned from both snapshots
    (kdb/triton/defaults.py): defaults of releases and targets the table lacks, and options that one
    value covers on every kernel of each side (a release change, not a specialization). Returns
    (compatible, names of options that differ and are not both at their defaults).
    """
    backend_a, backend_b = a.get("backend"), b.get("backend")
    vals_a, vals_b = a.get("values") or {}, b.get("values") or {}
    differing = []
    keys = set(vals_a) | set(vals_b)
    if backend_a != backend_b:  # --across-targets between backends: only the options both backends have
        keys &= set(TUNING_OPTIONS.get(backend_a or "", ())) & set(TUNING_OPTIONS.get(backend_b or "", ()))
    group_a, group_b = group_of(a, version_a), group_of(b, version_b)
    for key in sorted(keys):
        va, vb = vals_a.get(key), vals_b.get(key)
        if va == vb:
            continue
        if context is not None and context.release_change(group_a, group_b, key, va, vb):
            continue
        if _at_default(_default(context, "a", group_a, key), va) and _at_default(
            _default(context, "b", group_b, key), vb
        ):
            continue
        differing.append(key)
    return (not differing, differing)


def _default(context: OptionDefaults | None, side: str, group: Group, key: str) -> Any:
    if context is None:
        return table_or_inferred_default(group, key)
    return context.side_default(side, group, key)


def _at_default(default: Any, value: Any) -> bool:
    if value is None:  # not recorded, or recorded as "not set" (3.0/3.1 write debug: null)
        return True
    if default is ABSENT:  # the release has no such option: it compiles as if at its default
        return True
    if default is UNKNOWN:  # a release or target kdb knows nothing about: only equal values are compatible
        return False
    return bool(value == default)
