"""Occupancy cliffs (issue 28): `registers_to_cliff` / `registers_to_gain` of every real corpus kernel checked
against the vendors' own occupancy figures, and `kdb diff --fail-on headroom-below:N` on real upgrades.

The definitions (kdb/analysis/cliffs.py), against the launch `occupancy` kdb records: registers_to_cliff is the
largest k >= 0 such that registers + k (at most the per-thread maximum) give the same occupancy;
registers_to_gain the smallest k > 0 such that registers - k (at least one) give a higher one, else None.

Oracles, each evaluated here at the register counts in question (never kdb's search or occupancy code):

- NVIDIA: ``cuda_occupancy.h`` compiled on its own (the calculator fixture of tests/test_nvidia_occupancy.py),
  asked for every register count 1..255 of each kernel set up as ``kernel_occupancy`` sets it up (Triton's
  launcher; the cubin's static shared size less the driver's reservation, measured on an H200), both ways
  kdb computes it (the calculator's defaults, and the cubin's barriers and virtual resources); the per-thread
  maximum is the Programming Guide's 255 (arch_traits.h, in the generated table). The definitions are then
  evaluated literally on those answers.
- AMD: LLVM 22's own ``; Occupancy:`` from llc for kernels built here with exactly the VGPR count in question
  (inline-asm clobbers; on gfx1250 past v255, N values held live), the kernel's SGPR count, wave size, and,
  where the descriptor shows a `waves_per_eu` floor, the kernel's own ``amdgpu-waves-per-eu`` and
  ``amdgpu-flat-work-group-size`` from its ``.llir`` (LLVM then allocates its own floor). The launch figure
  is LLVM's figure bounded by what does not depend on registers: LDS and whole workgroups, kdb's launch
  estimate (no tool states it), taken as `launch_occupancy` at one VGPR and one SGPR. With LLVM's figure
  non-increasing in VGPRs, each figure is checked at its boundary: the counts where it must still hold and
  where it must no longer. Each built kernel's VGPR/SGPR counts are read back from llc's metadata, and at
  the kernel's own count LLVM must give the occupancy the real kernel's asm states.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import oracle_cache
import pytest
import sampling
from conftest import LLVM_BIN, archive_of, compiled_kernels, load_manifest
from helpers import kdb
from test_nvidia_occupancy import calculator, needs_calculator  # noqa: F401  (calculator: a module fixture)

from kdb.analysis.amd.occupancy import ARCHES, WaveResources, launch_occupancy
from kdb.analysis.cliffs import register_cliffs
from kdb.analysis.folder import analyze_folder
from kdb.analysis.model import AnalysisOptions, FolderFile, LaunchShape
from kdb.analysis.nvidia import occupancy as nv
from kdb.analysis.nvidia.cubin import parse_cubin
from kdb.diff.rules import parse_rules
from kdb.errors import ExitCode, UsageError
from kdb.ingest.walker import classify as classify_file

LLC = LLVM_BIN / "llc"
needs_llc = pytest.mark.skipif(not LLC.exists(), reason="LLVM 22's llc missing (apt-get install llvm-22)")


def _snapshots(backend: str) -> list[str]:
    try:
        return sorted(n for n, e in load_manifest()["snapshots"].items() if e.get("backend") == backend)
    except FileNotFoundError:
        return []


HIP_SNAPSHOTS, CUDA_SNAPSHOTS = _snapshots("hip"), _snapshots("cuda")


@dataclass(frozen=True)
class Analysed:
    """One corpus kernel: its folder and the analysis row kdb records for it."""

    folder: Path
    name: str
    meta: dict[str, Any]
    row: dict[str, Any]

    def text(self, suffix: str) -> str | None:
        path = self.folder / f"{self.name}.{suffix}"
        return path.read_text() if path.exists() else None


def _analyse(code: Path) -> Analysed:
    files = [
        FolderFile(f"key/{p.name}", classify_file(p.name), p.read_bytes())
        for p in sorted(code.parent.iterdir())
        if p.is_file()
    ]
    json_file = next(f for f in files if f.rel == f"key/{code.stem}.json")
    out = analyze_folder("key", "digest", json_file, files, AnalysisOptions(sass=False))
    meta = json.loads(json_file.data)
    return Analysed(code.parent, code.stem, meta, out.rows["kernel_analysis"][0])


@pytest.fixture(scope="module")
def analysed(unpack_snapshot) -> Callable[[str], list[Analysed]]:
    """snapshot -> the kernels of it an oracle check runs on (every kernel in the sweep, every family otherwise:
    tests/sampling.py) with their analysis rows (computed once per module)."""
    found: dict[str, list[Analysed]] = {}

    def of(snapshot: str) -> list[Analysed]:
        if snapshot not in found:
            suffix = ".hsaco" if snapshot in HIP_SNAPSHOTS else ".cubin"
            codes = sampling.kernels(
                compiled_kernels(unpack_snapshot(snapshot), suffix),
                snapshot,
                folder=lambda p: p.parent,
                name=lambda p: p.stem,
            )
            found[snapshot] = [_analyse(p) for p in codes]
        return found[snapshot]

    return of


# ---- the definitions, evaluated literally on an oracle's answers -----------------------------------------


def literal_cliffs(occupancy_at: Callable[[int], int], registers: int, most: int) -> tuple[int, int | None]:
    """The definitions word for word: every count from one to the maximum, no assumption of monotony."""
    current = occupancy_at(registers)
    to_cliff = max(k for k in range(0, max(most - registers, 0) + 1) if occupancy_at(registers + k) == current)
    to_gain = next((k for k in range(1, registers) if occupancy_at(registers - k) > current), None)
    return to_cliff, to_gain


# ---- NVIDIA: the calculator at every register count ------------------------------------------------------


def _calculator_static(lim: nv.SmLimits, static: int) -> int:
    """The static size the driver charges for a cubin's `.nv.shared.<kernel>` (tests/test_nvidia_occupancy.py:
    Triton's 1 KiB on sm90 is the reservation itself, measured on an H200)."""
    assert static in (0, lim.shared_reserved_per_block) or static > lim.shared_reserved_per_block, static
    return 0 if static <= lim.shared_reserved_per_block else static - lim.shared_reserved_per_block


def nvidia_oracle(kernels: list[Analysed], calculator) -> dict[int, tuple[int, int, int | None]]:  # noqa: F811
    """index -> (warps/SM, registers_to_cliff, registers_to_gain) by the calculator, for each kernel whose
    figures both ways agree at its own register count (kdb records an occupancy for no other)."""
    setups = []
    for i, k in enumerate(kernels):
        cubin = parse_cubin((k.folder / f"{k.name}.cubin").read_bytes())
        kernel = next(c for c in cubin.kernels if c.is_entry)
        attrs = {a.name: a.value for a in kernel.attributes}
        lim = nv.limits_for(cubin.arch)
        warps = k.meta["num_warps"]
        static = _calculator_static(lim, kernel.static_shared)
        ways = [
            (1, 0),
            (attrs.get("EIATTR_NUM_BARRIERS") or kernel.barriers, attrs.get("EIATTR_VRC_CTA_INIT_COUNT") or 0),
        ]
        most = nv.table()["architectures"][str(cubin.arch)]["device"]["max_registers_per_thread"]
        setups.append((i, cubin.arch, warps, kernel.registers, static, k.meta["shared"], ways, most))
    points = [
        (arch, warps, regs, static, dyn, barriers, vres)
        for _, arch, warps, _, static, dyn, ways, most in setups
        for barriers, vres in ways
        for regs in range(0, most + 1)
    ]
    answers = iter(calculator(points))
    out = {}
    for i, _, warps, registers, _, _, ways, most in setups:
        blocks = [{regs: next(answers)[0] for regs in range(0, most + 1)} for _ in ways]
        if blocks[0][registers] != blocks[1][registers]:
            continue
        both = [literal_cliffs(way.__getitem__, registers, most) for way in blocks]
        assert both[0][0] == both[1][0], (kernels[i].folder.name, both)  # fewer blocks at the same count
        out[i] = (blocks[0][registers] * warps, both[0][0], both[0][1] if both[0][1] == both[1][1] else None)
    return out


# ---- AMD: LLVM's `; Occupancy:` at the counts in question ---------------------------------------------

OCCUPANCY_RE = re.compile(r"^; Occupancy: (\d+)$", re.MULTILINE)
FUNCTION_RE = re.compile(r"^(k\w+):", re.MULTILINE)
META_RE = re.compile(r"^    \.(name|vgpr_count|sgpr_count|private_segment_fixed_size):\s+(\S+)$", re.MULTILINE)
WAVES_PER_EU_RE = re.compile(r'"amdgpu-waves-per-eu"="([^"]*)"')
FLAT_SIZE_RE = re.compile(r'"amdgpu-flat-work-group-size"="([^"]*)"')


def _clobbers(name: str, vgprs: int, sgprs: int | None) -> str:
    regs = [f"v{vgprs - 1}"] if vgprs <= 256 else ["v255", f"a{vgprs - 257}"]  # past v255: the AGPR half
    regs += [f"s{sgprs - 1}"] if sgprs else []
    constraint = ",".join(f"~{{{r}}}" for r in regs)
    return (
        f'define amdgpu_kernel void @{name}() #0 {{\n  call void asm sideeffect "", "{constraint}"()\n  ret void\n}}\n'
    )


def _live(name: str, values: int, sgprs: int | None) -> str:
    """A kernel holding VALUES loaded from LDS live at once (gfx1250 past v255: no clobber reaches there)."""
    lines = [f"@lds.{name} = internal addrspace(3) global [{values} x i32] poison, align 4"]
    lines.append(f"define amdgpu_kernel void @{name}() #0 {{")
    for i in range(values):
        lines.append(f"  %g{i} = getelementptr inbounds [{values} x i32], ptr addrspace(3) @lds.{name}, i32 0, i32 {i}")
        lines.append(f"  %x{i} = load volatile i32, ptr addrspace(3) %g{i}")
    if sgprs:
        lines.append(f'  call void asm sideeffect "", "~{{s{sgprs - 1}}}"()')
    lines += [f"  store volatile i32 %x{i}, ptr addrspace(3) %g{values - 1 - i}" for i in range(values)]
    return "\n".join([*lines, "  ret void", "}"]) + "\n"


def _llc(cpu: str, wave: int, attrs: str, kernels: dict[str, str]) -> dict[str, tuple[int, int, int, int]]:
    """name -> (.vgpr_count, .sgpr_count, LLVM's occupancy, scratch bytes) of kernels compiled together."""
    attributes = f'"target-features"="+wavefrontsize{wave}" {attrs}'
    ir = "".join(kernels.values()) + f"attributes #0 = {{ {attributes} }}\n"
    cmd = [str(LLC), "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={cpu}", "-o", "-"]
    asm = oracle_cache.run(cmd, input=ir, check=True, timeout=600).stdout
    body, _, metadata = asm.partition(".amdgpu_metadata")
    order, occupancy = FUNCTION_RE.findall(body), [int(v) for v in OCCUPANCY_RE.findall(body)]
    assert len(order) == len(occupancy) == len(kernels), (cpu, len(order), len(occupancy), len(kernels))
    facts = {}
    for block in re.split(r"^  - ", metadata, flags=re.MULTILINE)[1:]:
        found = dict(META_RE.findall("    " + block))
        if "name" in found:
            facts[found["name"]] = found
    return {
        n: (int(facts[n]["vgpr_count"]), int(facts[n]["sgpr_count"]), occ, int(facts[n]["private_segment_fixed_size"]))
        for n, occ in zip(order, occupancy, strict=True)
    }


@dataclass
class AmdCase:
    kernel: Analysed
    arch: str
    wave: int
    vgprs: int
    sgprs: int
    attrs: str  # the function attributes LLVM compiles the probes with
    floor: int | None  # the descriptor's allocation where it shows a waves_per_eu floor
    bound: int  # waves per SIMD that LDS and whole workgroups allow (kdb's launch estimate)
    counts: set[int]


def _amd_case(k: Analysed) -> AmdCase:
    row = k.row
    arch, wave, vgprs = row["co_arch"], row["wavefront_size"], row["vgpr_count"]
    spec = ARCHES[arch]
    allocated = json.loads(row["descriptor"])["descriptor_vgprs"]
    granule = spec.descriptor_vgpr_granule(wave) or 1
    floor = allocated if allocated > -(-vgprs // granule) * granule else None
    attrs = f'"amdgpu-flat-work-group-size"="1,{wave}"'
    if floor is not None:  # LLVM allocates its own floor from the kernel's request, as the compile did
        llir = k.text("llir") or ""
        request, flat = WAVES_PER_EU_RE.search(llir), FLAT_SIZE_RE.search(llir)
        assert request and flat, (k.folder.name, "a floor without amdgpu-waves-per-eu in the LLIR")
        attrs = f'"amdgpu-flat-work-group-size"="{flat.group(1)}" "amdgpu-waves-per-eu"="{request.group(1)}"'
    lds = row["lds_static"] + (k.meta.get("shared") or 0)
    bound = launch_occupancy(LaunchShape(arch, k.meta.get("num_warps") or 1, 1, 0, lds), WaveResources(wave, 1))[0]
    return AmdCase(k, arch, wave, vgprs, row["sgpr_count"], attrs, floor, bound, set())


def _sgpr_clobbers(cpu: str, wave: int, attrs: str) -> dict[int, int]:
    """.sgpr_count -> the SGPR clobber giving it (LLVM adds VCC, flat scratch, XNACK as the processor needs)."""
    probes = {f"kp{n}": _clobbers(f"kp{n}", 1, n) for n in range(1, 103)}  # s0 … s101: gfx9's most
    found: dict[int, int] = {}
    for name, (_, sgprs, _, _) in _llc(cpu, wave, attrs, probes).items():
        found.setdefault(sgprs, int(name[2:]))
    return found


def llvm_occupancy(cases: list[AmdCase]) -> dict[tuple[int, int], int]:
    """(case index, VGPR count) -> LLVM's occupancy of a kernel with that count and the case's SGPRs."""
    groups: dict[tuple[str, int, str], list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault((c.arch, c.wave, c.attrs), []).append(i)

    def compile_group(key: tuple[str, int, str]) -> dict[tuple[int, int], int]:
        cpu, wave, attrs = key
        by_sgprs = _sgpr_clobbers(cpu, wave, attrs)
        probes, live, wanted = {}, {}, {}
        for i in groups[key]:
            c = cases[i]
            near = max((s for s in by_sgprs if s <= c.sgprs), default=None)
            clobber = by_sgprs[near] if near is not None else None
            for x in c.counts:
                name = f"k{x}_{c.sgprs}"
                wanted[(i, x)] = name
                if x <= 256 or ARCHES[cpu].unified_agprs:
                    probes[name] = _clobbers(name, x, clobber)
                else:
                    live[name] = _live(name, x - 1, clobber)
        got = _llc(cpu, wave, attrs, probes) if probes else {}
        if live:
            # A waves_per_eu request keeps LLVM's allocator within its budget (it spills instead): past the
            # floor the request changes no allocation, so those counts compile without it.
            first = _llc(cpu, wave, attrs, live)
            again = {n: ir for n, ir in live.items() if first[n][0] != int(n[1:].split("_")[0]) or first[n][3]}
            got |= {n: v for n, v in first.items() if n not in again}
            if again:
                got |= _llc(cpu, wave, f'"amdgpu-flat-work-group-size"="1,{wave}"', again)
                for i in groups[key]:
                    floor = cases[i].floor
                    assert floor is None or all(x > floor for x in cases[i].counts if wanted[(i, x)] in again)
        out = {}
        for (i, x), name in wanted.items():
            vgprs, sgprs, occ, scratch = got[name]
            c = cases[i]
            assert (vgprs, scratch) == (x, 0), (c.kernel.folder.name, x, vgprs, scratch)
            # SGPRs as the kernel has them, or (s0 … s101 plus what LLVM adds reach no further) as many as
            # LLVM allows: then in the same SGPR step on every processor where SGPRs limit
            assert sgprs == c.sgprs or (sgprs < c.sgprs and sgprs >= max(by_sgprs)), (c.kernel.folder.name, sgprs)
            out[(i, x)] = occ
        return out

    with ThreadPoolExecutor(max_workers=2) as pool:
        return {k: v for part in pool.map(compile_group, list(groups)) for k, v in part.items()}


def amd_mismatches(kernels: list[Analysed]) -> tuple[int, list[tuple]]:
    """(kernels checked, mismatches) of every kernel's recorded figures against LLVM."""
    cases = [_amd_case(k) for k in kernels]
    for c in cases:
        cliff, gain = c.kernel.row["registers_to_cliff"], c.kernel.row["registers_to_gain"]
        top = ARCHES[c.arch].max_vgprs_per_wave
        c.counts = {c.vgprs, c.vgprs + cliff} | ({c.vgprs + cliff + 1} if c.vgprs + cliff < top else set())
        c.counts |= {c.vgprs - gain, c.vgprs - gain + 1} if gain is not None else {1}
    llvm = llvm_occupancy(cases)
    mismatches: list[tuple[Any, ...]] = []
    for i, c in enumerate(cases):
        row = c.kernel.row
        launch = row["occupancy"]
        top = ARCHES[c.arch].max_vgprs_per_wave

        def at(x: int, i: int = i, c: AmdCase = c) -> int:
            return min(llvm[(i, x)], c.bound)

        # the probe is the kernel as far as occupancy goes: LLVM's figure and the launch figure at its count
        if llvm[(i, c.vgprs)] != row["occupancy_llvm"] or at(c.vgprs) != launch:
            mismatches.append((c.kernel.folder.name, "probe", llvm[(i, c.vgprs)], row["occupancy_llvm"], launch))
            continue
        v, cliff, gain = c.vgprs, row["registers_to_cliff"], row["registers_to_gain"]
        cliff_ok = at(v + cliff) == launch and (v + cliff == top or at(v + cliff + 1) < launch)
        gain_ok = (at(v - gain) > launch and at(v - gain + 1) <= launch) if gain is not None else at(1) <= launch
        if not (cliff_ok and gain_ok):
            mismatches.append((c.kernel.folder.name, c.arch, v, launch, cliff, gain, cliff_ok, gain_ok))
    return len(cases), mismatches


# ---- every corpus kernel against its vendor's figures ------------------------------------------------


@pytest.mark.slow
@needs_calculator
@pytest.mark.parametrize("snapshot", CUDA_SNAPSHOTS or ["<no corpus>"])
def test_nvidia_cliffs_equal_the_calculators(snapshot: str, analysed, calculator) -> None:  # noqa: F811
    kernels = analysed(snapshot)
    oracle = nvidia_oracle(kernels, calculator)
    mismatches = []
    for i, k in enumerate(kernels):
        row = k.row
        recorded = (row.get("occupancy"), row.get("registers_to_cliff"), row.get("registers_to_gain"))
        if recorded[0] is None:  # unknown occupancy (sm_100: barriers and virtual resources disagree)
            assert recorded == (None, None, None), (k.folder.name, recorded)
            continue
        if recorded != oracle.get(i):
            mismatches.append((k.folder.name, k.name, row["registers"], recorded, oracle[i]))
    assert mismatches == [], mismatches[:10]
    assert oracle, snapshot  # every snapshot has kernels with a known occupancy


@pytest.mark.slow
@pytest.mark.llvm
@needs_llc
@pytest.mark.parametrize("snapshot", HIP_SNAPSHOTS or ["<no corpus>"])
def test_amd_cliffs_agree_with_llvm(snapshot: str, analysed) -> None:
    kernels = analysed(snapshot)
    assert all(k.row["occupancy"] is not None for k in kernels)  # every corpus processor has a model
    checked, mismatches = amd_mismatches(kernels)
    assert checked == len(kernels) and mismatches == [], mismatches[:10]


def test_definitions_are_what_the_search_finds() -> None:
    """The bisection (kdb/analysis/cliffs.py) against the definitions word for word, on kdb's own occupancy
    over a sweep of inputs of both vendors (the oracles above check the occupancy itself)."""
    for warps in (1, 2, 4, 8, 16, 32):
        for arch in (80, 90, 100, 120):
            for dyn in (0, 40 * 1024, 100 * 1024):
                for regs in (1, 24, 40, 64, 96, 128, 168, 200, 255):

                    def nv_at(r: int, a: int = arch, w: int = warps, d: int = dyn) -> int:
                        return nv.occupancy(LaunchShape(a, w, r, 0, d))[0]

                    assert register_cliffs(nv_at, regs, 255) == literal_cliffs(nv_at, regs, 255)
    for processor, wave in (("gfx942", 64), ("gfx90a", 64), ("gfx908", 64), ("gfx1100", 32), ("gfx1250", 32)):
        top = ARCHES[processor].max_vgprs_per_wave
        for warps, lds in ((1, 0), (4, 0), (8, 65536), (4, 20000)):
            for vgprs in (1, 17, 64, 100, 128, 200, 256, top):

                def amd_at(x: int, a: str = processor, w: int = wave, n: int = warps, s: int = lds) -> int:
                    return launch_occupancy(LaunchShape(a, n, x, 0, s), WaveResources(w, 30))[0]

                assert register_cliffs(amd_at, vgprs, top) == literal_cliffs(amd_at, vgprs, top)


# ---- --fail-on headroom-below:N on real upgrades -------------------------------------------------------


def test_rule_parses_and_refuses_a_zero_threshold() -> None:
    (rule,) = parse_rules(["headroom-below:8"])
    assert (rule.text, rule.kind, rule.threshold) == ("headroom-below:8", "headroom-below", 8)
    with pytest.raises(UsageError, match="greater than 0"):
        parse_rules(["headroom-below:0"])
    with pytest.raises(UsageError, match="headroom-below:N"):
        parse_rules(["headroom-below:-1"])


# The real upgrades the rule is tried on: one target each, the same kernels compiled by two releases.
AMD_PAIR = ("t3.8.0-gfx942", "t3.9.0-gfx942")
NVIDIA_PAIR = ("t3.6.0-sm80", "t3.8.0-sm80")
UNKNOWN_PAIR = ("t3.8.0-sm100", "t3.9.0-sm100")  # sm_100 kernels whose occupancy kdb cannot know


def _pair_home(cached_home, pair: tuple[str, str]) -> Path:
    return cached_home([(tag, archive_of(tag)) for tag in pair], sass=False)


def _cliffs(capsys, home: Path, pair: tuple[str, str]) -> dict[str, tuple[int | None, int | None]]:
    """b_cache_key -> (A's, B's registers_to_cliff) of every paired kernel, as `kdb diff --format json` has them."""
    doc = kdb(capsys, home, "diff", *pair, "--format", "json").json()
    return {
        k["b_cache_key"]: (k["loops"]["a"]["registers_to_cliff"], k["loops"]["b"]["registers_to_cliff"])
        for k in doc["kernels"]
        if k["a_cache_key"] and k["b_cache_key"]
    }


def _expected(cliffs: dict[str, tuple[int | None, int | None]], n: int) -> tuple[set[str], set[str]]:
    """(fired, unknown) b_cache_keys of `headroom-below:N` by its definition."""
    fired = {key for key, (a, b) in cliffs.items() if a is not None and b is not None and b < n <= a}
    unknown = {key for key, (a, b) in cliffs.items() if a is None or b is None}
    return fired, unknown


def _gate(capsys, home: Path, pair: tuple[str, str], n: int, *extra: str) -> tuple[int, set[str], set[str]]:
    """(exit code of the table output, fired b_cache_keys, unknown b_cache_keys) of `--fail-on headroom-below:N`."""
    rule = f"headroom-below:{n}"
    code = kdb(capsys, home, "diff", *pair, "--fail-on", rule, "--no-pager", *extra).code
    doc = kdb(capsys, home, "diff", *pair, "--fail-on", rule, "--format", "json", *extra).json()
    fired = {k["b_cache_key"] for k in doc["kernels"] if rule in k["fired_rules"]}
    unknown = {k["b_cache_key"] for k in doc["kernels"] if rule in k["unknown_rules"]}
    assert doc["fired_rules"] == ([rule] if fired else []) and doc["unknown_rules"] == ([rule] if unknown else [])
    return code, fired, unknown


def _closest_call(cliffs: dict[str, tuple[int | None, int | None]]) -> tuple[str, int, int]:
    """The paired kernel the upgrade brought closest to its cliff without reaching it, by the recorded figures
    (the largest fall among the closest): (b_cache_key, A, B)."""
    shrunk = [(b, b - a, key) for key, (a, b) in cliffs.items() if a is not None and b is not None and 0 < b < a]
    assert shrunk, "no paired kernel came closer to its cliff"
    b, fall, key = min(shrunk)
    return key, b - fall, b


def _check_rule_on(capsys, home: Path, pair: tuple[str, str], cliffs: dict, key: str, a: int, b: int) -> None:
    n = b + 1  # B is below it, A (further from the cliff) is not
    code, fired, unknown = _gate(capsys, home, pair, n)
    assert (fired, unknown) == _expected(cliffs, n) and key in fired
    assert code == ExitCode.FINDINGS == 1
    # one register less: B is no longer below it (the kernel does not fire; others may)
    code, fired, unknown = _gate(capsys, home, pair, n - 1)
    assert key not in fired and (fired, unknown) == _expected(cliffs, n - 1)
    assert code == (ExitCode.FINDINGS if fired else ExitCode.OK)
    # past every A figure: every kernel was within N registers already, nothing was brought there
    beyond = max(max(a_b) for a_b in cliffs.values()) + 1
    assert _gate(capsys, home, pair, beyond) == (ExitCode.OK, set(), set())


@pytest.mark.slow
@pytest.mark.llvm
@needs_llc
def test_headroom_rule_fires_on_a_real_amd_upgrade(capsys, cached_home, unpack_snapshot) -> None:
    home = _pair_home(cached_home, AMD_PAIR)
    cliffs = _cliffs(capsys, home, AMD_PAIR)
    key, a, b = _closest_call(cliffs)
    # the two figures the threshold is derived from, against LLVM (the kernel in A: the one paired with B's)
    doc = kdb(capsys, home, "diff", *AMD_PAIR, "--format", "json").json()
    kd = next(k for k in doc["kernels"] if k["b_cache_key"] == key)
    sides = [
        _analyse(unpack_snapshot(tag) / cache_key / f"{kd['name']}.hsaco")
        for tag, cache_key in zip(AMD_PAIR, (kd["a_cache_key"], key), strict=True)
    ]
    assert [s.row["registers_to_cliff"] for s in sides] == [a, b]
    assert amd_mismatches(sides) == (2, [])
    _check_rule_on(capsys, home, AMD_PAIR, cliffs, key, a, b)


@pytest.mark.slow
@needs_calculator
def test_headroom_rule_fires_on_a_real_nvidia_upgrade(capsys, cached_home, unpack_snapshot, calculator) -> None:  # noqa: F811
    home = _pair_home(cached_home, NVIDIA_PAIR)
    cliffs = _cliffs(capsys, home, NVIDIA_PAIR)
    key, a, b = _closest_call(cliffs)
    doc = kdb(capsys, home, "diff", *NVIDIA_PAIR, "--format", "json").json()
    kd = next(k for k in doc["kernels"] if k["b_cache_key"] == key)
    sides = [
        _analyse(unpack_snapshot(tag) / cache_key / f"{kd['name']}.cubin")
        for tag, cache_key in zip(NVIDIA_PAIR, (kd["a_cache_key"], key), strict=True)
    ]
    oracle = nvidia_oracle(sides, calculator)
    assert [s.row["registers_to_cliff"] for s in sides] == [oracle[0][1], oracle[1][1]] == [a, b]
    _check_rule_on(capsys, home, NVIDIA_PAIR, cliffs, key, a, b)


@pytest.mark.slow
def test_headroom_rule_fails_closed_where_the_occupancy_is_unknown(capsys, cached_home) -> None:
    home = _pair_home(cached_home, UNKNOWN_PAIR)
    cliffs = _cliffs(capsys, home, UNKNOWN_PAIR)
    known = [b for a, b in cliffs.values() if a is not None and b is not None]
    assert known and len(known) < len(cliffs)  # some kernels known on both sides, some not
    n = 1  # 1 fires only on a kernel at 0 in B and not in A: none on these two snapshots, by the figures
    fired, unknown = _expected(cliffs, n)
    assert fired == set() and unknown
    assert _gate(capsys, home, UNKNOWN_PAIR, n) == (ExitCode.UNKNOWN, set(), unknown)
    assert ExitCode.UNKNOWN == 8
    code, _, _ = _gate(capsys, home, UNKNOWN_PAIR, n, "--allow-unknown")
    assert code == ExitCode.OK
    # each unknown figure is an unknown occupancy, which kdb records with the reason
    doc = kdb(capsys, home, "diff", *UNKNOWN_PAIR, "--format", "json").json()
    for k in doc["kernels"]:
        if k["b_cache_key"] in unknown:
            assert None in (k["metrics"]["occupancy"]["a"], k["metrics"]["occupancy"]["b"]), k["name"]


@pytest.mark.slow
@pytest.mark.parametrize("pair", [AMD_PAIR, NVIDIA_PAIR])
def test_diff_warns_when_an_upgrade_brings_a_kernel_near_a_cliff(capsys, cached_home, pair) -> None:
    """Every paired kernel whose registers_to_cliff fell below NEAR_CLIFF (checked against LLVM and the calculator
    above) carries the warning in its reason and the JSON; no other kernel does; the table says how many."""
    from kdb.diff.verdict import NEAR_CLIFF

    home = _pair_home(cached_home, pair)
    doc = kdb(capsys, home, "diff", *pair, "--format", "json").json()
    near = {
        k["b_cache_key"]
        for k in doc["kernels"]
        if k["a_cache_key"]
        and k["b_cache_key"]
        and None not in (a := k["loops"]["a"]["registers_to_cliff"], b := k["loops"]["b"]["registers_to_cliff"])
        and b < NEAR_CLIFF <= a
    }
    assert near, pair  # each upgrade brings some kernel there
    unit = "VGPR" if pair == AMD_PAIR else "register"
    for k in doc["kernels"]:
        if k["b_cache_key"] in near:
            b = k["loops"]["b"]["registers_to_cliff"]
            assert len(k["warnings"]) == 1 and k["warnings"][0] in k["reason"], k["reason"]
            assert f"{b} {unit}" in k["warnings"][0] if b else "no " + unit in k["warnings"][0]
        else:
            assert k["warnings"] == [], (k["name"], k["warnings"])
    table = kdb(capsys, home, "diff", *pair, "--no-pager").out
    assert f"warning: {len(near)} kernel{'s' * (len(near) != 1)} now within {NEAR_CLIFF} registers" in table
