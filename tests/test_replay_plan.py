"""The pure parts of replay and bisect, on real corpus files: which options a replay passes, how the replaying
release's JIT marks pointers, which releases a bisect steps through and where a figure first changed."""

from __future__ import annotations

import json

import pytest

from kdb.errors import UsageError
from kdb.replay.bisect import Step, first_changes, releases_between
from kdb.replay.plan import PointerPlan, Target, jit_marks_pointer_range, parse_target, plan_options, specialize_ttir
from kdb.triton.defaults import option_default

RELEASES = ["3.4.0", "3.5.1", "3.6.0", "3.7.1", "3.8.0"]


def _kernel(unpack_snapshot, snapshot: str, kernel: str, config_part: str):
    """(JSON, TTIR) of the corpus folder whose build record's config contains `config_part`."""
    from conftest import CORPUS

    records = json.loads((CORPUS / "records" / f"{snapshot}.json").read_text())
    (record,) = [r for r in records if r["kernel"] == kernel and config_part in r["config"]]
    folder = unpack_snapshot(snapshot) / record["cache_key"]
    meta = json.loads((folder / f"{kernel}.json").read_text())
    return meta, (folder / f"{kernel}.ttir").read_text()


def test_an_option_at_its_release_default_is_left_to_the_new_release_and_a_set_one_is_kept(unpack_snapshot):
    meta, _ = _kernel(unpack_snapshot, "t3.5.1-gfx942", "matmul_kernel", "/wpe2")
    source = Target("hip", "gfx942", 64)
    plan = plan_options(meta, source, "3.5.1")
    assert meta["waves_per_eu"] == 2 != option_default("hip", "waves_per_eu", "3.5.1", "gfx942")
    assert plan.options["waves_per_eu"] == 2
    assert plan.options["num_warps"] == meta["num_warps"]
    defaulted = {k for k in plan.defaulted}
    assert all(meta[k] == option_default("hip", k, "3.5.1", "gfx942") for k in defaulted)
    assert "waves_per_eu" not in defaulted and not set(plan.options) & defaulted


def test_the_replaying_jit_marks_pointer_ranges_where_the_old_one_did_not(unpack_snapshot):
    _, old = _kernel(unpack_snapshot, "t3.5.1-gfx942", "add_kernel", "fp32")
    _, new = _kernel(unpack_snapshot, "t3.6.0-gfx942", "add_kernel", "fp32")
    source = Target("hip", "gfx942", 64)
    marked, changed = specialize_ttir(old, source, "3.5.1", PointerPlan(jit_marks_pointer_range("hip", "3.6.0")))
    head = next(line for line in marked.splitlines() if "tt.func public" in line)
    real = next(line for line in new.splitlines() if "tt.func public" in line)
    assert changed and head.count("tt.pointer_range = 32") == real.count("tt.pointer_range = 32") == 3
    # a TTIR whose release marked them already, or a target whose JIT does not, is left as it is
    assert specialize_ttir(new, source, "3.6.0", PointerPlan(True)) == (new, False)
    assert specialize_ttir(old, source, "3.5.1", PointerPlan(jit_marks_pointer_range("hip", "3.5.1"))) == (old, False)
    assert not jit_marks_pointer_range("cuda", "3.9.0")


def test_targets_are_read_as_the_compilers_name_them():
    assert parse_target("gfx942") == Target("hip", "gfx942", 64)
    assert parse_target("gfx1100") == Target("hip", "gfx1100", 32)
    assert parse_target("sm_90") == parse_target("90") == Target("cuda", "90", 32)
    with pytest.raises(UsageError):
        parse_target("h100")


def test_bisect_steps_from_a_to_b_and_names_the_first_release_that_differs():
    assert releases_between(RELEASES, "3.4.0", "3.7.1") == ["3.5.1", "3.6.0", "3.7.1"]
    assert releases_between(RELEASES, "3.8.0", "3.5.1") == ["3.7.1", "3.6.0", "3.5.1"]
    a = {"vgpr_count": 100, "occupancy": 4}
    steps = [
        Step("3.5.1", {"vgpr_count": 100, "occupancy": 4}),
        Step("3.6.0", None, "the compiler refused it"),
        Step("3.7.1", {"vgpr_count": 120, "occupancy": 4}),
    ]
    (change,) = first_changes(a, steps, {"vgpr_count": 120, "occupancy": 4})
    assert (change.figure, change.release, change.before, change.after) == ("vgpr_count", "3.7.1", 100, 120)
    assert change.uncertain == ("3.6.0",)  # the step that could not be replayed may hold the change
    # a figure no replay changed but B's own compile did: no release named, B's value said
    (late,) = first_changes(a, steps[:1], {"vgpr_count": 100, "occupancy": 3})
    assert (late.figure, late.release, late.after) == ("occupancy", None, 3)
