"""`kdb diff A B --why` on real corpus kernels, compiled for real by Triton 3.6.0 (the test extra's Triton: the
interpreter running the tests is the toolchain, so B is always a 3.6.0 snapshot).

Oracles: a swap through a kernel's own release must give the release's own files (its AMDGCN and code object byte
for byte; on NVIDIA its PTX byte for byte and its cubin's machine code); the swaps' figures must equal what LLVM's
own assembly (AMD: `.vgpr_count`, `; ScratchSize`, `; Occupancy`) or `ptxas -v` and `cuobjdump` (NVIDIA) say, and the
stage must follow from those figures. The pairs are the corpus's own (corpus/records name each folder's config on
both sides); the kernels were found, one per stage, among every changed kernel of the pairs (the counts are in the
commit that added this file), none was made for the test.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import CORPUS, ROOT
from elftools.elf.elffile import ELFFile
from helpers import kdb

from kdb.api._compare import DiffRequest, diff
from kdb.api._session import Session
from kdb.diff.render import render_diff
from kdb.diff.terminal import TableOptions
from kdb.replay.run import WORKER

pytestmark = [pytest.mark.triton, pytest.mark.slow]

TEST_RELEASE = "3.6.0"
SCHEMA = json.loads((ROOT / "docs" / "diff-json-schema.json").read_text())
# (A, B, the config of corpus/records, the stage the swap names): small kernels, one per stage, of one AMD and one
# NVIDIA pair whose B is 3.6.0 and which hold every stage (3.5.1 -> 3.6.0 holds no AMD `llvm` kernel: their LLVMs give
# the same code for every changed kernel).
AMD_CASES = [
    ("t3.3.1-gfx950", "t3.6.0-gfx950", "vector_add/fp32/b1024/w4", "triton"),
    ("t3.3.1-gfx950", "t3.6.0-gfx950", "matmul/fp16/m32n32k32/w4/s2", "llvm"),
    ("t3.3.1-gfx950", "t3.6.0-gfx950", "matmul/fp16/m128n128k64/w8/s2", "both"),
]
# (the same pair's `triton` and `both` kernels, softmax/fp16/b4096/w8 and softmax/fp32/b1024/w4, are left to AMD's
# cases: the suite's budget)
NVIDIA_CASES = [
    ("t3.2.0-sm90", "t3.6.0-sm90", "strided_copy/stride_any/b1024", "llvm"),
    ("t3.2.0-sm90", "t3.6.0-sm90", "attn_fwd/fp16/d64/m64n64/w4/s1", "ptxas"),
]
# LLVM's own words for the figures in the assembly it writes (AMD), as kdb names them
ASM_FIGURES = {
    "vgpr_count": r"^\s*\.vgpr_count:\s+(\d+)",
    "vgpr_spill_count": r"^\s*\.vgpr_spill_count:\s+(\d+)",
    "scratch_bytes": r"^; ScratchSize: (\d+)",
    "occupancy_llvm": r"^; Occupancy: (\d+)",
}


def _installed_release() -> str:
    import triton

    return str(triton.__version__)


def _record(snapshot: str, config: str) -> dict:
    (row,) = [r for r in json.loads((CORPUS / "records" / f"{snapshot}.json").read_text()) if r["config"] == config]
    return row


def _folder(unpack_snapshot, snapshot: str, config: str) -> tuple[Path, str]:
    row = _record(snapshot, config)
    return unpack_snapshot(snapshot) / row["cache_key"], row["kernel"]


@pytest.fixture
def why_home(ingested_copy, capsys):
    """A writable home holding A and B whose one toolchain is the interpreter running the tests (3.6.0)."""
    assert _installed_release() == TEST_RELEASE, "the test extra pins the Triton these tests compile with"

    def make(a: str, b: str) -> Path:
        home = ingested_copy([(a, a), (b, b)])
        added = kdb(capsys, home, "toolchain", "add", TEST_RELEASE, "--python", sys.executable)
        assert added.code == 0, added.err
        return home

    return make


def _explained(home: Path, a: str, b: str, config: str) -> tuple[dict, str, str]:
    """`kdb diff A B --why --kernel KEY` for the config's kernel of A (through the API, rendered in every format):
    its JSON document (checked against the schema), the table and the markdown."""
    key_a, key_b = _record(a, config)["cache_key"], _record(b, config)["cache_key"]
    session = Session.resolve(home, None, None, 600.0)
    outcome = diff(session, DiffRequest(a, b, kernel=key_a, limit=1, why=True, why_workers=2))
    doc = json.loads(render_diff(outcome.result, "json", outcome.views))
    jsonschema.validate(doc, SCHEMA)
    (kernel,) = [k for k in doc["kernels"] if k["a_cache_key"] == key_a]
    assert kernel["b_cache_key"] == key_b  # kdb paired the config's folders as the corpus build records them
    assert [k["a_cache_key"] for k in doc["kernels"] if "why" in k] == [key_a]  # --kernel: its kernel only
    table = render_diff(outcome.result, "table", outcome.views, TableOptions(width=160))
    markdown = render_diff(outcome.result, "markdown", outcome.views)
    return kernel, table, markdown


def _asm_figures(text: str) -> dict[str, int]:
    found = {name: re.search(pattern, text, re.MULTILINE) for name, pattern in ASM_FIGURES.items()}
    assert all(found.values()), [name for name, m in found.items() if m is None]
    return {name: int(m.group(1)) for name, m in found.items() if m is not None}


_TRANSLATE = """
import sys
from triton._C.libtriton import amd, llvm
llvm.init_targets()
sys.stdout.write(llvm.translate_to_asm(open(sys.argv[1]).read(), amd.TARGET_TRIPLE, sys.argv[2], "", [], True, False))
"""


def _llvm_asm(llir: Path, arch: str) -> str:
    """The test Triton's LLVM on an LLIR, called as Triton's make_amdgcn calls it (shared/reference)."""
    done = subprocess.run([sys.executable, "-c", _TRANSLATE, str(llir), arch], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _stage_of(a: dict, swap: dict, b: dict) -> str:
    changed = [name for name in a if a[name] != b[name]]
    assert changed
    if all(swap[n] == a[n] for n in changed):
        return "triton"
    return "llvm" if all(swap[n] == b[n] for n in changed) else "both"


@pytest.mark.parametrize(("a", "b", "config", "stage"), AMD_CASES, ids=[c[3] for c in AMD_CASES])
def test_why_names_the_stage_llvm_assembly_tells_amd(why_home, unpack_snapshot, a, b, config, stage):
    home = why_home(a, b)
    kernel, table, markdown = _explained(home, a, b, config)
    folder_a, name = _folder(unpack_snapshot, a, config)
    folder_b, _ = _folder(unpack_snapshot, b, config)
    arch = a.rsplit("-", 1)[1]
    oracle = {
        "a": _asm_figures((folder_a / f"{name}.amdgcn").read_text()),
        "swap_llvm": _asm_figures(_llvm_asm(folder_a / f"{name}.llir", arch)),
        "b": _asm_figures((folder_b / f"{name}.amdgcn").read_text()),
    }
    why = kernel["why"]
    got = {side: {n: why["figures"][side][n] for n in ASM_FIGURES} for side in oracle}
    assert got == oracle
    assert _stage_of(oracle["a"], oracle["swap_llvm"], oracle["b"]) == stage
    assert why["stage"] == stage, why["reason"]
    assert set(why["decided_by"]) <= {*ASM_FIGURES, "occupancy"}, why["decided_by"]
    assert f"Triton {TEST_RELEASE}" in why["reason"]
    _check_renderings(kernel, table, markdown, ["A", "B's LLVM on A's LLIR", "B"])


def _check_renderings(kernel: dict, table: str, markdown: str, columns: list[str]) -> None:
    """The table and markdown name the stage in the summary and in the deep view, with one column per set."""
    stage = kernel["why"]["stage"]
    assert re.search(rf"^why: {stage} 1 \(", table, re.MULTILINE), table[:600]
    assert f"\nwhy: {stage} — {kernel['why']['reason']}\n" in table
    head = next(line for line in table.splitlines() if line.startswith("fact ") and columns[1] in line)
    assert re.split(r"\s{2,}", head.strip()) == ["fact", *columns]
    assert f"**why:** {stage} — " in markdown
    assert "\n| " + " | ".join(["fact", *columns, ""]) + " |\n" in markdown


_PTXAS_FIGURES = {"registers": r"Used (\d+) registers", "stack_bytes": r"(\d+) bytes stack frame"}


def _ptxas_figures(ptx: Path, tmp_path: Path) -> dict[str, int]:
    """The test Triton's own ptxas on a PTX (its `-v` report), as Triton's make_cubin runs it for sm_90a."""
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    out = tmp_path / "oracle.cubin"
    done = subprocess.run(
        [str(ptxas), "-lineinfo", "-v", "--gpu-name=sm_90a", str(ptx), "-o", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {n: int(re.findall(p, done.stderr)[-1]) for n, p in _PTXAS_FIGURES.items()}


def _cuobjdump_figures(cuda_bin: Path, cubin: Path) -> dict[str, int]:
    done = subprocess.run(
        [str(cuda_bin / "cuobjdump"), "--dump-resource-usage", str(cubin)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return {
        "registers": int(re.search(r"REG:(\d+)", done.stdout).group(1)),  # type: ignore[union-attr]
        "stack_bytes": int(re.search(r"STACK:(\d+)", done.stdout).group(1)),  # type: ignore[union-attr]
    }


@pytest.mark.parametrize(("a", "b", "config", "stage"), NVIDIA_CASES, ids=[c[3] for c in NVIDIA_CASES])
def test_why_names_the_stage_ptxas_tells_nvidia(why_home, unpack_snapshot, cuda_bin, tmp_path, a, b, config, stage):
    home = why_home(a, b)
    kernel, table, markdown = _explained(home, a, b, config)
    folder_a, name = _folder(unpack_snapshot, a, config)
    folder_b, _ = _folder(unpack_snapshot, b, config)
    why = kernel["why"]
    oracle = {
        "a": _cuobjdump_figures(cuda_bin, folder_a / f"{name}.cubin"),
        "swap_ptxas": _ptxas_figures(folder_a / f"{name}.ptx", tmp_path),
        "b": _cuobjdump_figures(cuda_bin, folder_b / f"{name}.cubin"),
    }
    got = {side: {n: why["figures"][side][n] for n in _PTXAS_FIGURES} for side in oracle}
    assert got == oracle
    assert why["stage"] == stage, why["reason"]
    assert set(why["decided_by"]) <= {"registers", "stack_bytes", "local_bytes", "occupancy"}, why["decided_by"]
    decided = [n for n in why["decided_by"] if n in _PTXAS_FIGURES]
    llvm = {n: why["figures"]["swap_llvm"][n] for n in decided}
    a_values, b_values = ({n: oracle[s][n] for n in decided} for s in ("a", "b"))
    ptxas = {n: oracle["swap_ptxas"][n] for n in decided}
    # B's ptxas alone on A's PTX gives B's figures: ptxas; else the stage follows from B's LLVM and ptxas on A's LLIR
    expected = {
        "ptxas": ptxas == b_values,
        "triton": ptxas != b_values and llvm == a_values,
        "llvm": ptxas != b_values and llvm == b_values,
        "both": ptxas != b_values and llvm not in (a_values, b_values),
    }
    assert [name for name, holds in expected.items() if holds] == [stage]
    _check_renderings(kernel, table, markdown, ["A", "B's LLVM and ptxas on A's LLIR", "B's ptxas on A's PTX", "B"])


@pytest.mark.parametrize(
    ("snapshot", "config", "target", "outputs"),
    [
        ("t3.6.0-gfx942", "softmax/fp32/b1024/w4", ["hip", "gfx942", 64], ("amdgcn", "hsaco")),
        ("t3.6.0-sm90", "softmax/fp32/b1024/w4", ["cuda", 90, 32], ("ptx", "cubin")),
    ],
    ids=["amd", "nvidia"],
)
def test_stages_through_the_own_release_give_its_files(unpack_snapshot, tmp_path, snapshot, config, target, outputs):
    """A stored LLIR through its own release's later stages (in_toolchain.py's `stages` job) gives the files the
    release wrote: every later stage byte for byte, but a cubin, whose debug line table names ptxas's temporary
    input file: its machine code (the `.text` sections) byte for byte."""
    folder, name = _folder(unpack_snapshot, snapshot, config)
    meta = json.loads((folder / f"{name}.json").read_text())
    job = {
        "id": "own",
        "kind": "stages",
        "first": "llir",
        "input": str(folder / f"{name}.llir"),
        "name": name,
        "target": target,
        "options": {k: v for k, v in meta.items() if k != "extern_libs"},
        "metadata": meta,
        "cache_dir": str(tmp_path / "cache"),
        "log": str(tmp_path / "log"),
    }
    done = subprocess.run(
        [sys.executable, str(WORKER)], input=json.dumps({"jobs": [job]}), capture_output=True, text=True, timeout=300
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1]["ok"], (lines, (tmp_path / "log").read_text()[-2000:])
    swap = tmp_path / "cache" / "swap"
    assert (swap / f"{name}.llir").read_bytes() == (folder / f"{name}.llir").read_bytes()
    *texts, code_object = outputs
    for ext in texts:
        assert (swap / f"{ext}").with_name(f"{name}.{ext}").read_bytes() == (folder / f"{name}.{ext}").read_bytes()
    ours, theirs = (swap / f"{name}.{code_object}").read_bytes(), (folder / f"{name}.{code_object}").read_bytes()
    assert _compared_part(ours, code_object) == _compared_part(theirs, code_object) != {}
    written = json.loads((swap / f"{name}.json").read_text())
    assert written["shared"] == meta["shared"] and written["triton_version"] == TEST_RELEASE


def _compared_part(code_object: bytes, kind: str) -> dict[str, bytes]:
    """What of a code object a swap through its own release must reproduce: an HSACO whole; a cubin's `.text`
    sections (pyelftools), its debug line table naming ptxas's temporary input file."""
    if kind == "hsaco":
        return {"hsaco": code_object}
    elf = ELFFile(io.BytesIO(code_object))
    return {s.name: s.data() for s in elf.iter_sections() if s.name.startswith(".text")}


def test_why_without_a_toolchain_for_b_says_what_to_run(ingested_copy, capsys):
    """No toolchain registered for B's release: every changed kernel is `unknown`, the reason names the command."""
    a, b = AMD_CASES[0][:2]
    home = ingested_copy([(a, a), (b, b)])
    r = kdb(capsys, home, "diff", a, b, "--why", "--format", "json")
    assert r.code == 0, r.err
    doc = r.json()
    jsonschema.validate(doc, SCHEMA)
    changed = [k for k in doc["kernels"] if k["status"] == "changed"]
    assert changed and all(k["why"]["stage"] == "unknown" for k in changed)
    assert all(f"kdb toolchain add {TEST_RELEASE}" in k["why"]["reason"] for k in changed)
    assert all(k["why"]["figures"]["swap_llvm"] is None for k in changed)
    assert all("why" not in k for k in doc["kernels"] if k["status"] != "changed")


def test_a_release_family_takes_its_one_registered_toolchain():
    """Triton 3.0-3.2 write no version in their JSON (kdb records the family their cache names): the one registered
    toolchain of the family compiles B's stages; several, or none, leave the stage unknown with the reason."""
    from kdb.replay.why import _toolchain_of

    chains = dict.fromkeys(["3.0.0", "3.1.0", "3.2.0", "3.6.0"])
    assert _toolchain_of("3.2", chains) == ("3.2.0", None)  # type: ignore[arg-type]
    assert _toolchain_of("3.6.0", chains) == ("3.6.0", None)  # type: ignore[arg-type]
    release, problem = _toolchain_of("3.0-3.1", chains)  # type: ignore[arg-type]
    assert release is None and "3.0.0, 3.1.0 fit it" in str(problem)
    release, problem = _toolchain_of("3.7.1", chains)  # type: ignore[arg-type]
    assert release is None and "`kdb toolchain add 3.7.1`" in str(problem)
