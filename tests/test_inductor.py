"""Real TorchInductor caches (corpus/inductor: H100, torch 2.11, Triton 3.6): ingest finds every kernel
folder and every best config, stores the tree byte for byte, and each link agrees with an oracle kdb did
not compute (corpus/inductor/make_caches.py recompiled every candidate and winner on the GPU).

One Inductor run compiles with two ptxas (its compile workers set torch's own, its parent process keeps
Triton's; the ptxas version is part of the folder name), so the best-config oracle
(corpus/inductor/oracle_toolchains.py) recompiled every winner once per toolchain."""

from __future__ import annotations

import ast
import json
import os
import posixpath
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_best_configs_link_the_recompiled_folder

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "inductor" / "h100-torch2.11-t3.6.0"
INDUCTOR = ["gpt2_train", "mlp_train_maxautotune", "resnet18_infer_maxautotune"]


def _kdb(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kdb", "--home", str(home), *args], capture_output=True, text=True, timeout=600
    )


def _sql(home: Path, sql: str) -> list[dict]:
    r = _kdb(home, "sql", sql, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, unpacked_archive, cached_home):
    """(root, home, summaries): root/<name> is each unpacked cache (links to the shared read-only copies), home
    holds them tagged <name>, ingested by `kdb ingest --no-sass -j 2 --format json` (whose printed summaries
    are kept): built once per inputs and kdb version, read-only."""
    from corpus_cache import summaries

    root = tmp_path_factory.mktemp("inductor")
    inputs = [(name, CORPUS / f"{name}.tar.xz") for name in [*INDUCTOR, "triton_autotune"]]
    for name, archive in inputs:
        (root / name).symlink_to(unpacked_archive(archive), target_is_directory=True)
    home = cached_home(inputs, sass=False, via_cli=True)
    return root, home, summaries(home)


def _function_source(path: Path, name: str) -> str | None:
    text = path.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return "\n".join(text.splitlines()[node.lineno - 1 : node.end_lineno])
    return None


def _kernel_dirs(cache: Path) -> set[str]:
    out = set()
    for d in cache.iterdir():
        names = {p.name for p in d.iterdir()}
        if any(n.endswith(".json") and n[: -len(".json")] + ".ttir" in names for n in names):
            out.add(d.name)
    return out


@pytest.mark.parametrize("name", INDUCTOR)
def test_ingest_finds_every_kernel_folder_and_best_config(ingested, name):
    root, home, summaries = ingested
    manifest = json.loads((CORPUS / "manifest.json").read_text())["scenarios"][name]
    on_disk = _kernel_dirs(root / name / "triton" / "0")
    assert len(on_disk) == manifest["triton_kernel_folders"]
    keys = {r["cache_key"] for r in _sql(home, f"SELECT cache_key FROM kernels WHERE tag = '{name}'")}
    assert keys == {f"triton/0/{d}" for d in on_disk}
    best = {str(p.relative_to(root / name)) for p in (root / name).glob("*/*.best_config")}
    assert len(best) == manifest["best_configs"]
    rows = _sql(home, f"SELECT path FROM autotune WHERE tag = '{name}' AND source = 'best_config'")
    assert {r["path"] for r in rows} == best
    found = summaries[name]["found"]
    assert found["kernel_folders"] == len(on_disk) and found["best_configs"] == len(best)
    assert found["triton_caches"] == 1 and found["kernel_perf"] == manifest["kernel_perf"]


@pytest.mark.parametrize("name", INDUCTOR)
def test_best_config_links_agree_with_the_oracle(ingested, name):
    """Every best config links the folder that recompiling its winner gives: the oracle recompiled each one
    once per ptxas an Inductor run uses (its compile workers': torch's; its parent's: Triton's), and
    exactly one of the two names is a folder of the cache."""
    root, home, _ = ingested
    oracle = json.loads((CORPUS / f"{name}.oracle.json").read_text())
    rows = _sql(home, f"SELECT * FROM autotune WHERE tag = '{name}' AND source = 'best_config'")
    checked = assert_best_configs_link_the_recompiled_folder(CORPUS, name, root / name, rows)
    assert checked == json.loads((CORPUS / "manifest.json").read_text())["scenarios"][name]["best_configs"]
    by_path = {r["path"]: r for r in rows}
    for entry in oracle:  # the module and kernel each best config tunes
        path = entry.get("best_config_path")
        if path:
            assert (by_path[path]["module_path"], by_path[path]["kernel_name"]) == (entry["module"], entry["kernel"])


@pytest.mark.parametrize("name", INDUCTOR)
def test_kernel_folders_link_to_the_module_the_oracle_compiled_them_from(ingested, name):
    root, home, _ = ingested
    oracle = json.loads((CORPUS / f"{name}.oracle.json").read_text())
    folders = set(os.listdir(root / name / "triton" / "0"))
    links = {
        r["cache_key"].rsplit("/", 1)[-1]: r for r in _sql(home, f"SELECT * FROM inductor_kernels WHERE tag = '{name}'")
    }
    assert all(r["link"] == "source_file" for r in links.values())
    checked = 0
    for entry in oracle:
        for c in entry.get("compiled") or []:
            if c["cache_key"] not in folders:
                continue
            row = links[c["cache_key"]]
            assert row["kernel_name"] == c["kernel_name"]
            if row["module_path"] != entry["module"]:  # Triton keys folders by source: an identical kernel
                a = _function_source(root / name / row["module_path"], c["kernel_name"])
                assert a is not None and a == _function_source(root / name / entry["module"], c["kernel_name"])
            checked += 1
    assert checked > 0
    meta = _sql(
        home,
        f"SELECT inductor_meta, size_hints FROM inductor_kernels WHERE tag = '{name}' AND heuristic <> 'template' LIMIT 1",
    )[0]
    assert json.loads(meta["inductor_meta"])["kernel_name"] and json.loads(meta["size_hints"])


def test_autotune_json_timings_winners_and_folders(ingested):
    root, home, summaries = ingested
    assert summaries["triton_autotune"]["found"]["autotune_files"] == 4
    rows = _sql(home, "SELECT * FROM autotune WHERE tag = 'triton_autotune' ORDER BY path, entry")
    for path in {r["path"] for r in rows}:
        raw = json.loads((root / "triton_autotune" / path).read_text())
        mine = [r for r in rows if r["path"] == path]
        assert len(mine) == len(raw["configs_timings"])
        medians = [t[0] for _, t in raw["configs_timings"]]
        assert [r["time_ms"] for r in mine] == medians
        assert [r["is_best"] for r in mine] == [m == min(medians) for m in medians]
    # the oracle: the autotuner's run repeated on an H100, Triton's compile() recording each config's folder
    oracle = json.loads((CORPUS / "triton_autotune.oracle.json").read_text())["records"]
    for r in rows:
        cfg = json.loads(r["config"])
        folders = {
            o["folder"]
            for o in oracle
            if (o["kernel"], o["num_warps"], o["num_stages"]) == (r["kernel_name"], cfg["num_warps"], cfg["num_stages"])
            and all(o["constants"].get(k) == v for k, v in cfg["kwargs"].items())
        }
        assert len(folders) == 1, r  # one folder per config: a link is expected for every entry
        cache_root = posixpath.dirname(posixpath.dirname(r["path"]))
        assert (r["link"], r["cache_key"]) == ("config", posixpath.join(cache_root, folders.pop())), r
    kernels = _sql(home, "SELECT cache_key, is_autotune_best FROM kernels WHERE tag = 'triton_autotune'")
    best = {r["cache_key"] for r in rows if r["is_best"] and r["cache_key"]}
    flagged = {r["cache_key"] for r in kernels if r["is_autotune_best"]}
    assert best == flagged


def test_export_is_byte_for_byte(ingested, tmp_path):
    root, home, _ = ingested
    dest = tmp_path / "out"
    r = _kdb(home, "export", "gpt2_train", str(dest), "--verbatim")
    assert r.returncode == 0, r.stderr
    src = root / "gpt2_train"

    def tree(base: Path) -> dict[str, bytes]:
        return {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*") if p.is_file()}

    assert tree(dest) == tree(src)


def test_show_refuses_a_key_prefix_that_several_kernels_share(ingested):
    """Kernel folders of an Inductor directory are keyed by their path (`triton/0/<hash>`): `triton` is a
    prefix of every one of them, so `show --kernel triton` must refuse it rather than pick one."""
    _, home, _ = ingested
    tag = INDUCTOR[0]
    keys = [r["cache_key"] for r in _sql(home, f"SELECT cache_key FROM kernels WHERE tag = '{tag}'")]
    assert len(keys) > 1 and all(k.startswith("triton/") for k in keys)
    proc = _kdb(home, "show", tag, "--kernel", "triton")
    assert proc.returncode == 2 and "ambiguous" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    one = _kdb(home, "show", tag, "--kernel", keys[0][: len("triton/0/") + 8])
    assert one.returncode == 0 and keys[0] in one.stdout, one.stderr


@pytest.mark.nvidia_tools
def test_a_real_cache_ingests_whole_with_sass(ingested, tmp_path):
    """With SASS (the default), loop rows included, a real cache ingests whole: the staging file's checkpoint
    once failed to pin a block under its 64 MB limit on mlp_train_maxautotune (exit 7, nothing recorded)."""
    root, _, summaries = ingested
    home = tmp_path / "home"
    for name in ("mlp_train_maxautotune",):
        r = _kdb(home, "ingest", str(root / name), "--tag", name, "--format", "json", "-j", "2")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["kernels"] == summaries[name]["kernels"] > 0
        rows = _sql(home, f"SELECT instr_source, count(*) AS n FROM kernels WHERE tag = '{name}' GROUP BY ALL")
        assert rows == [{"instr_source": "sass", "n": summaries[name]["kernels"]}]
