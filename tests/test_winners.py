"""Autotune winners in `kdb diff`, on a real hardware upgrade: the same MLP and GPT-2 training steps compiled
by the same torch 2.11 / Triton 3.6 on an H100 (A) and on an H200 (B) (corpus/inductor). Same torch, so the
generated modules and the `.best_config` files keep their paths; autotuning on the new GPU picks other
winners for some kernels.

The oracle of the flips is the `.best_config` files themselves, read here with `json` (not kdb): a flip is
a file on both sides whose config (block sizes, num_warps, num_stages) differs. `winner-spills` is checked
against the facts of the kernel folders each winner is linked to, read back through `kdb sql`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from helpers import assert_best_configs_link_the_recompiled_folder

from kdb.diff.model import Rule
from kdb.diff.rules import winner_rule_unknown
from kdb.diff.sides import Side
from kdb.diff.winners import compare_winners

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "inductor"
SIDES = {"a": "h100-torch2.11-t3.6.0", "b": "h200-torch2.11-t3.6.0"}
MODELS = ["gpt2_train", "mlp_train_maxautotune"]
SCHEMA = json.loads((ROOT / "docs" / "diff-json-schema.json").read_text())
# what the data shows (the test derives each from the files, these pin the figures)
FLIPS = {"gpt2_train": 7, "mlp_train_maxautotune": 9}
PAIRED = {"gpt2_train": 20, "mlp_train_maxautotune": 16}
# not config values: when and how the winner was found, and which folder it was compiled into
META = {"configs_hash", "found_by_coordesc", "time_taken_ms", "triton_cache_hash"}

pytestmark = pytest.mark.skipif(
    not all((CORPUS / d / f"{m}.tar.xz").is_file() for d in SIDES.values() for m in MODELS),
    reason="corpus/inductor H100/H200 caches not present",
)


def _kdb(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kdb", "--home", str(home), *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def caches(tmp_path_factory, unpacked_archive, cached_home):
    """(root, home): root/<side>_<model> is each unpacked cache (links to the shared read-only copies), home holds
    them tagged <side>_<model>, ingested --no-sass (built once per inputs and kdb version, read-only)."""
    root = tmp_path_factory.mktemp("winners")
    inputs = [
        (f"{side}_{model}", CORPUS / directory / f"{model}.tar.xz")
        for side, directory in SIDES.items()
        for model in MODELS
    ]
    for tag, archive in inputs:
        (root / tag).symlink_to(unpacked_archive(archive), target_is_directory=True)
    return root, cached_home(inputs, sass=False)


def _best_configs(directory: Path) -> dict[str, dict]:
    """path -> the winning config, as the file says it (without its metadata)."""
    out = {}
    for p in directory.glob("*/*.best_config"):
        raw = json.loads(p.read_text())
        out[str(p.relative_to(directory))] = {k: v for k, v in raw.items() if k not in META}
    return out


def _diff(home: Path, a: str, b: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    r = _kdb(home, "diff", a, b, "--format", "json", *extra)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    return r, doc


@pytest.mark.slow  # outside the inner loop: 6 s on 2 cores (bench/test_suite.py)
@pytest.mark.parametrize("model", MODELS)
def test_flips_are_exactly_the_best_configs_that_changed(caches, model):
    root, home = caches
    a, b = _best_configs(root / f"a_{model}"), _best_configs(root / f"b_{model}")
    oracle_flips = {p for p in a.keys() & b.keys() if a[p] != b[p]}
    assert len(oracle_flips) == FLIPS[model] and len(a.keys() & b.keys()) == PAIRED[model]
    r, doc = _diff(home, f"a_{model}", f"b_{model}", "--fail-on", "winner-flip")
    winners = doc["winners"]
    flips = [w for w in winners if w["status"] == "flip"]
    # paired by module + kernel, and the pairs are the same files on both sides
    assert all(w["a"]["path"] == w["b"]["path"] for w in winners if w["a"] and w["b"])
    assert {w["a"]["path"] for w in flips} == oracle_flips
    assert {w["a"]["path"] for w in winners if w["status"] == "same"} == (a.keys() & b.keys()) - oracle_flips
    assert {w["a"]["path"] for w in winners if w["status"] == "only_a"} == a.keys() - b.keys()
    assert {w["b"]["path"] for w in winners if w["status"] == "only_b"} == b.keys() - a.keys()
    for w in flips:  # both configs, as the files wrote them, and the tuning times
        path = w["a"]["path"]
        for side, configs in (("a", a), ("b", b)):
            config = w[side]["config"]
            assert {**config["kwargs"], **{k: v for k, v in config.items() if k != "kwargs"}} == configs[path]
            raw = json.loads((root / f"{side}_{model}" / path).read_text())
            assert w[side]["tuning_ms"] == raw["time_taken_ms"]
            assert w[side]["resources"] is not None and w[side]["resources"]["registers"] > 0
        assert w["fired_rules"] == ["winner-flip"]
    # exit 1, and the rule is listed with the fired rules
    assert r.returncode == 1 and doc["fired_rules"] == ["winner-flip"]
    assert not any("winner-flip" in k["fired_rules"] for k in doc["kernels"])
    table = _kdb(home, "diff", f"a_{model}", f"b_{model}", "--fail-on", "winner-flip", "--no-pager")
    assert table.returncode == 1
    assert f"fired winner-flip: {FLIPS[model]} autotune winners" in table.stdout
    assert f"{PAIRED[model]} paired, {FLIPS[model]} flipped" in table.stdout
    for w in flips:
        assert f"flip {w['kernel']}" in table.stdout
    md = _kdb(home, "diff", f"a_{model}", f"b_{model}", "--format", "markdown")
    assert md.returncode == 0 and "#### Autotune winners" in md.stdout


@pytest.mark.parametrize("model", MODELS)
def test_every_h200_best_config_links_the_folder_its_recompile_gives(caches, model):
    """The H200 side of the link oracle (the H100 side is in tests/test_inductor.py, with resnet18)."""
    root, home = caches
    r = _kdb(
        home, "sql", f"SELECT * FROM autotune WHERE tag = 'b_{model}' AND source = 'best_config'", "--format", "json"
    )
    assert r.returncode == 0, r.stderr
    checked = assert_best_configs_link_the_recompiled_folder(
        CORPUS / SIDES["b"], model, root / f"b_{model}", json.loads(r.stdout)
    )
    assert (
        checked == json.loads((CORPUS / SIDES["b"] / "manifest.json").read_text())["scenarios"][model]["best_configs"]
    )


@pytest.mark.browser
def test_diff_report_shows_both_sides_winners(caches, tmp_path):
    """`kdb report` of an upgrade with autotuned kernels: every winner pair in the section's table, flips
    first, and one point per winner with a time and a linked folder on each side."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from test_report import _browser_page

    _, home = caches
    model = "mlp_train_maxautotune"
    out = tmp_path / "winners.html"
    r = _kdb(home, "report", f"a_{model}", f"b_{model}", "-o", str(out))
    assert r.returncode == 0, r.stderr
    _, doc = _diff(home, f"a_{model}", f"b_{model}")
    drawn = {}
    for side in ("a", "b"):
        q = (
            "SELECT count(*) AS n FROM autotune a JOIN kernels k USING (tag, cache_key) "
            f"WHERE a.tag = '{side}_{model}' AND a.time_ms IS NOT NULL AND k.registers IS NOT NULL"
        )
        drawn[side.upper()] = json.loads(_kdb(home, "sql", q, "--format", "json").stdout)[0]["n"]
    assert all(drawn.values())  # this model's kernel_perf files time some winners on both sides
    with sync_api.sync_playwright() as p:
        browser, page, problems, _ = _browser_page(p)
        page.goto(out.as_uri())
        page.wait_for_function("document.querySelectorAll('#plot-autotune-registers .main-svg').length >= 1")
        traces = page.evaluate("document.getElementById('plot-autotune-registers').data.map(t => [t.name, t.x.length])")
        assert dict(traces) == {"A winners": drawn["A"], "B winners": drawn["B"]}
        statuses = page.locator("#autotune-table tbody tr td:nth-child(1)").all_inner_texts()
        assert statuses == [w["status"] for w in doc["winners"]]
        assert statuses.count("flip") == FLIPS[model] and statuses[: FLIPS[model]] == ["flip"] * FLIPS[model]
        browser.close()
    assert problems == [], problems


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
@pytest.mark.parametrize("model", MODELS)
def test_the_same_cache_against_itself_has_no_flip(caches, model):
    _, home = caches
    r, doc = _diff(home, f"a_{model}", f"a_{model}", "--fail-on", "winner-flip,winner-spills")
    assert r.returncode == 0 and doc["fired_rules"] == []
    assert doc["winners"] and {w["status"] for w in doc["winners"]} == {"same"}
    assert not any(w["worse"] for w in doc["winners"])


def _folder_facts(home: Path, tag: str) -> dict[str, dict]:
    r = _kdb(
        home,
        "sql",
        f"SELECT cache_key, local_bytes, stack_bytes, occupancy FROM kernels WHERE tag = '{tag}'",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    return {row["cache_key"]: row for row in json.loads(r.stdout)}


@pytest.mark.slow  # outside the inner loop: 5 s on 2 cores (bench/test_suite.py)
@pytest.mark.parametrize("model", MODELS)
def test_winner_spills_follows_the_linked_folders_facts(caches, model):
    _, home = caches
    fa, fb = _folder_facts(home, f"a_{model}"), _folder_facts(home, f"b_{model}")
    r, doc = _diff(home, f"a_{model}", f"b_{model}", "--fail-on", "winner-spills")
    expected = {}
    for w in doc["winners"]:
        if not (w["a"] and w["b"]):
            continue
        assert w["a"]["cache_key"] and w["b"]["cache_key"], w  # every winner of this corpus is linked
        ka, kb = fa[w["a"]["cache_key"]], fb[w["b"]["cache_key"]]
        # no winner of either GPU spills: NVIDIA spills go to local memory, and there is none
        assert ka["local_bytes"] == kb["local_bytes"] == 0 and ka["stack_bytes"] == kb["stack_bytes"] == 0
        if kb["occupancy"] < ka["occupancy"]:
            expected[w["kernel"]] = [f"occupancy {ka['occupancy']}→{kb['occupancy']}"]
    fired = {w["kernel"]: w["worse"] for w in doc["winners"] if "winner-spills" in w["fired_rules"]}
    assert fired == expected
    assert {w["kernel"]: w["worse"] for w in doc["winners"] if w["worse"]} == expected
    if model == "mlp_train_maxautotune":
        # what the data shows: one flipped winner (XBLOCK 1/16 warps -> XBLOCK 2/4 warps) needs 27 -> 56
        # registers per thread on the H200, which limits it to 36 warps per SM instead of 64
        assert expected == {"triton_per_fused__to_copy_native_layer_norm_0": ["occupancy 64→36"]}
        w = next(w for w in doc["winners"] if w["kernel"] in expected)
        assert w["status"] == "flip"
        assert (w["a"]["resources"]["registers"], w["b"]["resources"]["registers"]) == (27, 56)
        assert r.returncode == 1 and doc["fired_rules"] == ["winner-spills"]
    else:
        assert expected == {} and r.returncode == 0 and doc["fired_rules"] == []


class _Store:
    pass


def _side(label: str, kernels: list[dict], winners: list[dict]) -> Side:
    return Side(label, _Store(), label, None, kernels, winners=winners)  # type: ignore[arg-type]


def _winner_row(config: dict, cache_key: str | None, link: str = "config") -> dict:
    return {
        "source": "best_config",
        "path": "ab/x.best_config",
        "module_path": "ab/cab.py",
        "kernel_name": "triton_red_fused_0",
        "config": json.dumps(config),
        "cache_key": cache_key,
        "link": link,
        "link_detail": None if cache_key else "none of the 3 folders of triton_red_fused_0 fits this config",
    }


def _amd_kernel(key: str, spills: int, occupancy: int) -> dict:
    return {
        "cache_key": key,
        "name": "triton_red_fused_0",
        "backend": "hip",
        "arch": "gfx942",
        "warp_size": 64,
        "vgpr_count": 128,
        "vgpr_spill_count": spills,
        "sgpr_spill_count": 0,
        "scratch_bytes": 4 * spills,
        "occupancy": occupancy,
    }


def test_a_winner_without_a_linked_folder_is_said_and_not_judged():
    cfg_a = {"kwargs": {"XBLOCK": 8, "R0_BLOCK": 64}, "num_warps": 4, "num_stages": 1}
    cfg_b = {"kwargs": {"XBLOCK": 8, "R0_BLOCK": 128}, "num_warps": 4, "num_stages": 1}
    rules = [Rule("winner-flip", "winner-flip"), Rule("winner-spills", "winner-spills")]
    sa = _side("A", [_amd_kernel("c/1", 0, 4)], [_winner_row(cfg_a, "c/1")])
    sb = _side("B", [], [_winner_row(cfg_b, None, "missing")])
    (w,) = compare_winners(sa, sb, rules)
    assert w.status == "flip" and w.worse == () and w.fired_rules == ("winner-flip",)
    assert w.unchecked and "B's winner has no linked kernel folder (missing" in w.unchecked
    assert winner_rule_unknown(rules[1], w)  # not judged, so winner-spills fails closed (exit 8)
    # an AMD winner whose folder now spills and loses occupancy fires winner-spills, even unflipped
    sb = _side("B", [_amd_kernel("c/2", 6, 2)], [_winner_row(cfg_a, "c/2")])
    (w,) = compare_winners(sa, sb, rules)
    assert w.status == "same" and w.fired_rules == ("winner-spills",)
    assert not winner_rule_unknown(rules[1], w)
    assert w.worse == ("spills 0→6", "scratch 0→24 bytes", "occupancy 4→2")
