"""kdb/identity.py on the real corpus TTIRs: stable across releases, blind to paths and SSA names, no collisions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import CORPUS, snapshot_names

from kdb.errors import ParseError
from kdb.triton.defaults import option_default
from kdb.triton.identity import kernel_identity, options_compatible, ttir_facts
from kdb.triton.kernel_json import parse_kernel_json


def kernel_folders(cache: Path) -> dict[str, tuple[str, object]]:
    out = {}
    for folder in sorted(p for p in cache.iterdir() if p.is_dir()):
        ttirs = list(folder.glob("*.ttir"))
        metas = [
            p
            for p in folder.glob("*.json")
            if not p.name.startswith("__grp__") and not p.name.endswith(".autotune.json")
        ]
        if ttirs and metas:
            out[folder.name] = (ttirs[0].read_text(), parse_kernel_json(metas[0].read_bytes()))
    return out


def records(name: str) -> list[dict]:
    return json.loads((CORPUS / "records" / f"{name}.json").read_text())


@pytest.mark.parametrize("name", snapshot_names())
def test_identity_separates_every_config_of_a_snapshot(name, unpack_snapshot):
    """Folders of one snapshot never share identity AND compatible options, unless the build reused the folder."""
    folders = kernel_folders(unpack_snapshot(name))
    ids = {k: kernel_identity(t, m) for k, (t, m) in folders.items()}
    assert all(v is not None for v in ids.values())
    by_id: dict[str, list[str]] = {}
    for key, ident in ids.items():
        by_id.setdefault(ident["identity"], []).append(key)
    for keys in by_id.values():
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                compatible, _ = options_compatible(ids[a]["parts"]["options"], ids[b]["parts"]["options"])
                assert not compatible, f"{a} and {b} collide"
    # The target is in `identity` only.
    for ident in ids.values():
        assert ident["parts"]["target"].count(":") == 2
        assert ident["identity"] != ident["identity_any_target"]


@pytest.mark.parametrize("name", snapshot_names())
def test_identity_ignores_paths_and_ssa_names(name, unpack_snapshot):
    for key, (ttir, meta) in list(kernel_folders(unpack_snapshot(name)).items())[:12]:
        base = kernel_identity(ttir, meta)
        moved = ttir.replace("/var/tmp/kdb-corpus/", "/home/someone/else/").replace("%arg", "%zz_renamed")
        assert kernel_identity(moved, meta)["identity"] == base["identity"], key


@pytest.mark.parametrize("name", snapshot_names())
def test_identity_components_match_the_build_records(name, unpack_snapshot):
    """Argument types, divisibility and integer constants agree with what the build asked for."""
    cache = unpack_snapshot(name)
    f = cache
    folders = kernel_folders(cache)
    checked = 0
    for rec in records(name):
        if rec["cache_key"] not in folders or not rec.get("divisible_by_16"):
            continue
        ttir, meta = folders[rec["cache_key"]]
        stem = next((f / rec["cache_key"]).glob("*.ttir")).stem  # 2.3 names the kernel <function>_<suffix>
        parts = kernel_identity(ttir, meta, stem)["parts"]
        assert parts["name"] == rec["kernel"]
        assert parts["num_warps"] == rec["applied_options"]["num_warps"]
        divisible = sum(1 for a in parts["args"] if a["attrs"].get("tt.divisibility") == "16")
        assert divisible == len(rec["divisible_by_16"]), rec["config"]
        consts = {int(c.split(":")[0]) for c in parts["int_constants"]}
        for value in rec["constexprs"].values():
            if isinstance(value, int) and not isinstance(value, bool) and value > 1:
                # a BLOCK-like constexpr shows up as a shape or a constant (or value-1 in a ceil-div)
                shapes = {int(d) for s in parts["tensor_shapes"] for d in s.split("x")}
                assert value in consts | shapes or value - 1 in consts, (rec["config"], value)
        checked += 1
    assert checked > 10


def test_use_lines_are_relative_to_the_def_line(unpack_snapshot):
    name = "t3.4.0-gfx942"
    folders = kernel_folders(unpack_snapshot(name))
    ttir, _meta = next(v for v in folders.values() if v[1].name == "add_kernel")
    base = ttir_facts(ttir)
    shifted = re.sub(r'(kernels/vector_add\.py":)(\d+)', lambda m: f"{m.group(1)}{int(m.group(2)) + 40}", ttir)
    assert ttir_facts(shifted)["args"] == base["args"]
    assert any(a["use_lines"] for a in base["args"])
    assert all(min(a["use_lines"], default=1) > 0 for a in base["args"])


def test_defaults_and_options_rule():
    assert option_default("hip", "num_stages", "3.0-3.1") == 0
    assert option_default("hip", "num_stages", "3.3.1") == 2
    assert option_default("hip", "waves_per_eu", "3.5.0") == 1
    assert option_default("hip", "waves_per_eu", "3.6.0") == 0
    assert option_default("cuda", "num_stages", "3.4.0") == 3
    old = {"backend": "hip", "triton_version": None, "values": {"num_stages": 0, "kpack": 1}}
    new = {"backend": "hip", "triton_version": "3.3.1", "values": {"num_stages": 2, "kpack": 1}}
    assert options_compatible(old, new, version_a="3.0-3.1") == (True, [])
    assert options_compatible(old, {**new, "values": {"num_stages": 3, "kpack": 1}}, version_a="3.0-3.1")[0] is False
    assert options_compatible(new, {**new, "values": {"num_stages": 2, "kpack": 2}}) == (False, ["kpack"])


def test_none_and_malformed():
    meta = parse_kernel_json(b'{"name": "k", "target": {"backend": "hip", "arch": "gfx942", "warp_size": 64}}')
    assert kernel_identity(None, meta) is None
    for bad in ("", "module {\n}\n", "module {\n  tt.func public @k(%arg0: i32 loc(#loc9)) {\n"):
        with pytest.raises(ParseError):
            kernel_identity(bad, meta)


@pytest.mark.slow  # every kernel of the corpus: ~13 s of CPU
def test_match_rate_over_records_is_reported(unpack_snapshot, capsys):
    """Identity of the same config id across every pair of snapshots of the same backend (any target)."""
    names = snapshot_names()
    idents = {n: {k: kernel_identity(t, m) for k, (t, m) in kernel_folders(unpack_snapshot(n)).items()} for n in names}
    hits = total = 0
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ra = {r["config"]: r["cache_key"] for r in records(a)}
            rb = {r["config"]: r["cache_key"] for r in records(b)}
            for cfg in set(ra) & set(rb):
                ia, ib = idents[a].get(ra[cfg]), idents[b].get(rb[cfg])
                if ia and ib and ia["parts"]["options"]["backend"] == ib["parts"]["options"]["backend"]:
                    total += 1
                    hits += ia["identity_any_target"] == ib["identity_any_target"]
    with capsys.disabled():
        print(f"\nidentity_any_target equal for the same config: {hits}/{total}")
    assert total > 0 and hits / total > 0.8
