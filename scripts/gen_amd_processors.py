#!/usr/bin/env python3
"""Regenerate kdb/analysis/amd/processors.json from LLVM's own AMDGPU backend (no GPU, no LLVM sources).

    python scripts/gen_amd_processors.py                 # LLVM 22 at /usr/lib/llvm-22/bin (or --llvm-bin DIR)

Every processor that ``llc -march=amdgcn -mcpu=help`` lists under a ``gfx`` name (the generic targets
included; the marketing aliases such as ``tahiti`` name the same processors) is probed by compiling small
LLVM IR kernels with ``llc -mtriple=amdgcn-amd-amdhsa -mcpu=gfxN`` and reading what LLVM writes about them:

- ``.wavefront_size`` of a kernel without attributes: LLVM's default wave size; kernels asking for
  ``+wavefrontsize32`` / ``+wavefrontsize64`` that LLVM drops: wave sizes the processor does not have.
- kernels clobbering ``v0`` … ``v255`` (one per count, one wave per workgroup): ``.vgpr_count`` against
  ``; Occupancy:`` for each wave size; AGPR targets also ``v255`` + ``a0`` … ``a255``; processors that
  allocate past ``v255`` (gfx1250) also kernels holding N loaded values live. The VGPR allocation granule
  and budget are the only (granule, budget) pair of LLVM's rule (``getNumWavesPerEUWithNumVGPRs``:
  max waves below one granule, else ``min(max(budget // roundup(n, granule), 1), max waves)``) that
  reproduces every point; the generator refuses to write a processor where none does, or where several do
  that disagree on some count a wave can hold (gfx10.1: budgets 1,024 and 1,032 agree on 1..256).
- a kernel holding 300, then 1,100 values live: the most VGPRs (AGPRs included) LLVM gives one wave.
- kernels clobbering ``s0`` … up to the limit LLVM's error states: ``.sgpr_count`` against ``; Occupancy:``
  (the SGPR thresholds, or none when SGPRs never lower occupancy).
- a kernel with 4 MiB of static LDS: LLVM's error states the LDS limit of a workgroup; one-wave kernels with
  ~200 fractions of it: how much LDS LLVM's occupancy model shares among how many SIMDs (its CU, or the WGP
  in WGP mode); a two-wave workgroup: whether the workgroup cap lowers occupancy (then its value).
- the same kernels assembled by ``llvm-mc``: ELF ``e_flags`` (the processor's machine number) and the
  kernel descriptor's GRANULATED_WORKITEM_VGPR_COUNT / GRANULATED_WAVEFRONT_SGPR_COUNT against
  ``.amdhsa_next_free_vgpr`` and ``.sgpr_count`` (the descriptor's encoding granules).
- a kernel compiled for a non-HSA triple: the LDS_SIZE field LLVM writes into COMPUTE_PGM_RSRC2
  (the LDS allocation granule LLVM programs).

What no compile shows is taken from shared/reference/amd-occupancy.md and says so in the file (the LDS a
launch rounds to on the processors it names, the workgroup cap where it never binds; gfx940/gfx941, which
LLVM no longer accepts, as the reference's copies of gfx942): each
processor's ``provenance`` names, per field, ``llc-probe: …`` or ``reference: …``. The test suite
(tests/test_amd_processors.py) recompiles a sample of kernels per processor and checks kdb's occupancy
against LLVM's ``; Occupancy:``; tests/test_amd_analysis.py checks it on every AMD kernel of the corpus.
About 150 s of CPU in all, processors in parallel (--jobs, default one per core): ~2 minutes on two idle
cores (10 minutes beside a corpus build). ``--only gfx942 gfx1250`` probes a few and prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT_DEFAULT = ROOT / "kdb" / "analysis" / "amd" / "processors.json"
LLVM_BIN_DEFAULT = Path(os.environ.get("KDB_LLVM_BIN", "/usr/lib/llvm-22/bin"))
TIMEOUT_S = 300
REFERENCE = "reference: shared/reference/amd-occupancy.md"

# ---- reading what llc writes ---------------------------------------------------------------------------------

# "; Occupancy: 8", "; NumVgprs: 180", "; ScratchSize: 0"
COMMENT_RE = re.compile(r"^; (?P<key>[A-Za-z]+): (?P<value>-?\d+)")
LABEL_RE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*):")
META_KEY_RE = re.compile(r"^\s*-?\s*\.(?P<key>[a-z_]+):\s+(?P<value>\S+)\s*$")
DIRECTIVE_RE = re.compile(r"^\s*\.amdhsa_(?P<key>[a-z_0-9]+)\s+(?P<value>-?\d+)")
LIMIT_RE = re.compile(
    r"(?P<what>[a-z ]+) \((?P<got>\d+)\) exceeds limit \((?P<limit>\d+)\) in function '(?P<fn>[^']+)'"
)


class ProbeError(RuntimeError):
    pass


def run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def llc_asm(bin_dir: Path, cpu: str, ir: str, triple: str = "amdgcn-amd-amdhsa") -> tuple[str, str]:
    proc = run([str(bin_dir / "llc"), f"-mtriple={triple}", f"-mcpu={cpu}", "-o", "-"], ir)
    return proc.stdout, proc.stderr if proc.returncode else ""


def kernels_of(asm: str) -> dict[str, dict[str, int]]:
    """Per kernel: the `; Key: N` comments LLVM prints after it (`Occupancy`, `NumVgprs`, …), its `.amdhsa_*`
    directives (`amdhsa.next_free_vgpr`, …) and the scalar keys of its metadata map (`meta.vgpr_count`, …).
    Kernels LLVM dropped (a wave size the processor lacks) are absent."""
    out: dict[str, dict[str, int]] = {}
    current: str | None = None  # the function whose comments follow
    descriptor: str | None = None  # inside `.amdhsa_kernel NAME` … `.end_amdhsa_kernel`
    in_meta = False
    meta: dict[str, int] = {}
    meta_name: str | None = None

    def flush() -> None:
        if meta_name is not None:
            out.setdefault(meta_name, {}).update({f"meta.{k}": v for k, v in meta.items()})

    for line in asm.splitlines():
        if line.startswith("\t.amdgpu_metadata"):
            in_meta = True
        elif in_meta:
            if line.startswith("  - .") or not line.startswith("    "):
                flush()
                meta, meta_name = {}, None
            if (line.startswith("  - .") or line.startswith("    .")) and (match := META_KEY_RE.match(line)):
                key, value = match.group("key"), match.group("value")
                if key == "name":
                    meta_name = value
                elif value.lstrip("-").isdigit():
                    meta[key] = int(value)
        elif line.startswith("\t.amdhsa_kernel "):
            descriptor = line.split()[1]
        elif line.startswith("\t.end_amdhsa_kernel"):
            descriptor = None
        elif descriptor is not None and (match := DIRECTIVE_RE.match(line)):
            out.setdefault(descriptor, {})[f"amdhsa.{match.group('key')}"] = int(match.group("value"))
        elif (match := LABEL_RE.match(line)) and not line.startswith(".L"):
            current = match.group("name")
        elif current is not None and (match := COMMENT_RE.match(line)):
            out.setdefault(current, {})[match.group("key")] = int(match.group("value"))
    flush()
    return {name: info for name, info in out.items() if "meta.wavefront_size" in info}


# ---- IR kernels ------------------------------------------------------------------------------------------------


def attrs(index: int, wave: int | None, wg: tuple[int, int]) -> str:
    parts = [f'"amdgpu-flat-work-group-size"="{wg[0]},{wg[1]}"']
    if wave is not None:
        parts.append(f'"target-features"="+wavefrontsize{wave}"')
    return f"attributes #{index} = {{ {' '.join(parts)} }}"


def clobber_kernel(name: str, regs: list[str], attr: int = 0) -> str:
    clobbers = ",".join(f"~{{{r}}}" for r in regs)
    return f'define amdgpu_kernel void @{name}() #{attr} {{\n  call void asm sideeffect "", "{clobbers}"()\n  ret void\n}}\n'


def live_kernel(name: str, count: int, attr: int = 0) -> str:
    """A kernel holding `count` values loaded from LDS live at once (LDS offsets need no address registers)."""
    lines = [
        f"@lds.{name} = internal addrspace(3) global [{count} x i32] poison, align 4",
        f"define amdgpu_kernel void @{name}() #{attr} {{",
    ]
    for i in range(count):
        lines.append(f"  %g{i} = getelementptr inbounds [{count} x i32], ptr addrspace(3) @lds.{name}, i32 0, i32 {i}")
        lines.append(f"  %x{i} = load volatile i32, ptr addrspace(3) %g{i}")
    for i in range(count):
        lines.append(f"  store volatile i32 %x{i}, ptr addrspace(3) %g{count - 1 - i}")
    lines += ["  ret void", "}"]
    return "\n".join(lines) + "\n"


def lds_kernel(name: str, size: int, attr: int = 0) -> str:
    return (
        f"@lds.{name} = internal addrspace(3) global [{size} x i8] poison, align 4\n"
        f"define amdgpu_kernel void @{name}() #{attr} {{\n"
        f"  store volatile i8 0, ptr addrspace(3) @lds.{name}\n  ret void\n}}\n"
    )


# ---- derivations -----------------------------------------------------------------------------------------------


def waves_by_vgprs(count: int, granule: int, budget: int, max_waves: int) -> int:
    if count < granule:
        return max_waves
    rounded = -(-count // granule) * granule
    return min(max(budget // rounded, 1), max_waves)


def fit_vgprs(points: list[tuple[int, int]], max_waves: int, max_vgprs: int) -> tuple[int, int, str]:
    """The (granule, budget) of LLVM's rule that reproduces every (vgpr_count, occupancy) point."""
    fits: list[tuple[int, int]] = []
    for granule in range(1, 65):
        lo, hi = 1, 1 << 16
        ok = True
        for count, occ in points:
            if count < granule:
                ok = occ == max_waves
            else:
                rounded = -(-count // granule) * granule
                if occ == max_waves:
                    lo = max(lo, max_waves * rounded)
                elif occ == 1:
                    hi = min(hi, 2 * rounded - 1)
                else:
                    lo, hi = max(lo, occ * rounded), min(hi, (occ + 1) * rounded - 1)
            if not ok or lo > hi:
                ok = False
                break
        if ok:
            # every budget in [lo, hi] fits these points; LLVM's budgets are multiples of the granule
            budgets = [b for b in range(lo, hi + 1) if b % granule == 0]
            fits += [(granule, b) for b in budgets]
    if not fits:
        raise ProbeError(f"no (granule, budget) reproduces LLVM's occupancy on {len(points)} points")
    granule, budget = fits[0]
    how = f"llc-probe: the (granule, budget) of LLVM's rule reproducing {len(points)} `; Occupancy:` points"
    if len(fits) > 1:
        # Several pairs fit: accepted only when they give the same occupancy for every count a wave can hold,
        # so that the choice (the smallest) changes no figure.
        same = all(
            waves_by_vgprs(n, g, b, max_waves) == waves_by_vgprs(n, granule, budget, max_waves)
            for g, b in fits
            for n in range(1, max_vgprs + 1)
        )
        if not same:
            raise ProbeError(f"several (granule, budget) pairs reproduce LLVM's occupancy: {fits[:6]}")
        how += f" (also {', '.join(f'{g}/{b}' for g, b in fits[1:])}: the same occupancy for 1..{max_vgprs} VGPRs)"
    return granule, budget, how


def sgpr_steps(points: list[tuple[int, int]], max_waves: int) -> list[list[int]] | None:
    """[[most SGPRs, waves], …] ascending, the last one open-ended; None when SGPRs never lower occupancy."""
    if all(occ == max_waves for _, occ in points):
        return None
    steps: dict[int, int] = {}
    for count, occ in sorted(points):
        steps[occ] = max(steps.get(occ, 0), count)
    ordered = sorted(steps.items(), key=lambda item: -item[0])
    previous = -1
    for _, most in ordered:
        if most <= previous:
            raise ProbeError(f"SGPR occupancy is not monotonic: {ordered}")
        previous = most
    return [[most, occ] for occ, most in ordered]


def encoding_granule(pairs: list[tuple[int, int]], blocks_minus_one: bool = True) -> int | None:
    """The granule g with field == ceil(max(n, 1) / g) - 1 (or ceil(n / g)) for every (n, field) pair."""
    for granule in (1, 2, 4, 8, 12, 16, 24, 32, 64, 128, 256, 512, 1024, 2048, 4096):
        if all((-(-max(n, 1) // granule)) - (1 if blocks_minus_one else 0) == field for n, field in pairs):
            return granule
    return None


def generation_of(name: str) -> int:
    match = re.match(r"^gfx(\d+?)(?:\d{2}|[0-9a-f]{2})?(?:-|$)", name)
    generic = re.match(r"^gfx(\d+)-", name)
    if generic:
        return int(generic.group(1))
    if match is None:
        raise ProbeError(f"cannot read a generation from {name!r}")
    digits = re.match(r"^gfx(\d+)", name)
    assert digits is not None
    text = digits.group(1)
    # gfx600..gfx950 / gfx90a: one digit; gfx1010..gfx1251: two
    return int(text[:2]) if len(text) == 4 else int(text[0])


# ---- the object file -------------------------------------------------------------------------------------------


def descriptors(bin_dir: Path, obj_path: Path) -> dict[str, bytes]:
    """Kernel descriptors by kernel name, located through llvm-readelf's symbol table and section headers."""
    data = obj_path.read_bytes()
    sections: dict[int, int] = {}
    for line in run([str(bin_dir / "llvm-readelf"), "-S", "--wide", str(obj_path)]).stdout.splitlines():
        match = re.match(r"^\s*\[\s*(\d+)\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s", line)
        if match:
            sections[int(match.group(1))] = int(match.group(3), 16)
    out = {}
    for line in run([str(bin_dir / "llvm-readelf"), "-s", "--wide", str(obj_path)]).stdout.splitlines():
        match = re.match(r"^\s*\d+:\s+([0-9a-f]+)\s+64\s+OBJECT\s+\S+\s+\S+\s+(\d+)\s+(\S+)\.kd$", line)
        if match:
            offset = sections[int(match.group(2))] + int(match.group(1), 16)
            out[match.group(3)] = data[offset : offset + 64]
    return out


def assembled(bin_dir: Path, cpu: str, asm: str, stem: Path) -> tuple[bytes, list[tuple[dict[str, int], int]]]:
    """llvm-mc's object of an llc listing, and per kernel (llc's facts, the descriptor's COMPUTE_PGM_RSRC1)."""
    src, obj = stem.with_suffix(".s"), stem.with_suffix(".o")
    src.write_text(asm)
    cmd = [
        str(bin_dir / "llvm-mc"),
        "-triple=amdgcn-amd-amdhsa",
        f"-mcpu={cpu}",
        "-filetype=obj",
        str(src),
        "-o",
        str(obj),
    ]
    proc = run(cmd)
    if proc.returncode:
        raise ProbeError(f"llvm-mc: {proc.stderr.strip()[:300]}")
    found = kernels_of(asm)
    fields = [(found[name], struct.unpack_from("<I", kd, 48)[0]) for name, kd in descriptors(bin_dir, obj).items()]
    return obj.read_bytes(), fields


# ---- one processor ---------------------------------------------------------------------------------------------


class Probe:
    """The facts of one processor, each with its provenance, from llc and llvm-mc."""

    def __init__(self, bin_dir: Path, cpu: str, work_root: Path) -> None:
        self.bin_dir, self.cpu = bin_dir, cpu
        self.work = work_root / cpu
        self.work.mkdir(parents=True, exist_ok=True)
        self.prov: dict[str, str] = {"generation": "processor name (gfx9xx: 9, gfx10xx: 10, …)"}
        self.facts: dict[str, Any] = {"name": cpu, "generation": generation_of(cpu)}
        self.sweep_asm: dict[int, str] = {}
        self.has_agprs = False
        self.max_waves = self.max_vgprs = 0

    def compile(self, ir: str, what: str, triple: str = "amdgcn-amd-amdhsa") -> str:
        asm, err = llc_asm(self.bin_dir, self.cpu, ir, triple)
        if err:
            raise ProbeError(f"llc ({what}): {err.strip()[:300]}")
        return asm

    def run(self) -> dict[str, Any]:
        self.waves()
        self.agprs()
        per_wave = self.vgpr_sweeps()
        self.vgprs(per_wave)
        self.sgprs()
        self.lds()
        self.lds_granule()
        self.descriptor_granules()
        self.facts["provenance"] = self.prov
        return self.facts

    def waves(self) -> None:
        # wave sizes
        ir = clobber_kernel("wdefault", ["v3"]) + clobber_kernel("w32", ["v3"], 1) + clobber_kernel("w64", ["v3"], 2)
        ir += "\n".join([attrs(0, None, (1, 32)), attrs(1, 32, (1, 32)), attrs(2, 64, (1, 64))]) + "\n"
        asm, err = llc_asm(self.bin_dir, self.cpu, ir)
        if err:
            raise ProbeError(f"llc: {err.strip()[:300]}")
        found = kernels_of(asm)
        self.facts["default_wave"] = found["wdefault"]["meta.wavefront_size"]
        self.facts["wave_sizes"] = sorted(w for w in (32, 64) if found.get(f"w{w}", {}).get("meta.wavefront_size") == w)
        self.prov["default_wave"] = (
            "llc-probe: .wavefront_size of a kernel without attributes (Triton uses the same: wave64 on gfx9, wave32 on gfx10+)"
        )
        self.prov["wave_sizes"] = "llc-probe: kernels asking +wavefrontsize32/64 that llc keeps"

    @property
    def one_wave(self) -> int:
        return int(self.facts["default_wave"])

    def agprs(self) -> None:
        # AGPRs: does llc accept a clobber of a0, and does the descriptor carry ACCUM_OFFSET (unified file)?
        asm_a, err_a = llc_asm(self.bin_dir, self.cpu, clobber_kernel("a", ["a0"]) + attrs(0, None, (1, 64)) + "\n")
        info_a = kernels_of(asm_a).get("a", {}) if not err_a else {}
        self.has_agprs = has_agprs = "NumAgprs" in info_a
        unified = has_agprs and "amdhsa.accum_offset" in info_a
        self.facts["agprs"] = "unified" if unified else "separate" if has_agprs else "none"
        self.prov["agprs"] = (
            "llc-probe: `; NumAgprs` of a kernel clobbering a0; unified when the descriptor has .amdhsa_accum_offset"
        )

    def vgpr_sweeps(self) -> dict[int, list[tuple[int, int]]]:
        per_wave: dict[int, list[tuple[int, int]]] = {}
        max_waves = None
        for wave in self.facts["wave_sizes"]:
            parts = [clobber_kernel("v0", [])]
            parts += [clobber_kernel(f"v{n}", [f"v{n - 1}"]) for n in range(1, 257)]
            if self.has_agprs:
                parts += [clobber_kernel(f"a{n}", ["v255", f"a{n - 1}"]) for n in range(1, 257)]
            ir = "".join(parts) + attrs(0, wave, (1, wave)) + "\n"
            asm, err = llc_asm(self.bin_dir, self.cpu, ir)
            if err:
                raise ProbeError(f"llc (VGPR sweep, wave{wave}): {err.strip()[:300]}")
            self.sweep_asm[wave] = asm
            found = kernels_of(asm)
            points = [(info["meta.vgpr_count"], info["Occupancy"]) for info in found.values() if "Occupancy" in info]
            per_wave[wave] = points
            waves = found["v0"]["Occupancy"]
            if max_waves is not None and waves != max_waves:
                raise ProbeError(f"max waves differ between wave sizes: {max_waves} vs {waves}")
            max_waves = waves
        assert max_waves is not None
        self.max_waves = self.facts["max_waves_per_simd"] = max_waves
        self.prov["max_waves_per_simd"] = "llc-probe: `; Occupancy:` of a kernel using no VGPR"

        # the most VGPRs (AGPRs included) one wave gets: values held live until llc spills
        one_wave = self.facts["default_wave"]
        max_vgprs = 0
        for count in (300, 1100):
            asm, err = llc_asm(
                self.bin_dir, self.cpu, live_kernel("live", count) + attrs(0, None, (1, one_wave)) + "\n"
            )
            if err:
                raise ProbeError(f"llc (live values): {err.strip()[:300]}")
            info = kernels_of(asm)["live"]
            max_vgprs = info["meta.vgpr_count"]
            if info.get("ScratchSize", 0) > 0 or info.get("NumVgprs", 0) + info.get("NumAgprs", 0) < count:
                break
        self.max_vgprs = self.facts["max_vgprs_per_wave"] = max_vgprs
        self.prov["max_vgprs_per_wave"] = (
            "llc-probe: .vgpr_count of a one-wave kernel holding 300 (then 1,100) values live, where llc starts spilling"
        )

        # past v255 (gfx1250's 1,024 VGPRs): kernels holding N values live, for the occupancy fit
        if not self.has_agprs and max_vgprs > 256:
            counts = list(range(264, max_vgprs, 40)) + [max_vgprs - 8]
            ir = "".join(live_kernel(f"l{n}", n) for n in counts) + attrs(0, None, (1, one_wave)) + "\n"
            asm, err = llc_asm(self.bin_dir, self.cpu, ir)
            if err:
                raise ProbeError(f"llc (live sweep): {err.strip()[:300]}")
            for info in kernels_of(asm).values():
                if info.get("ScratchSize", 0) == 0:
                    per_wave[one_wave].append((info["meta.vgpr_count"], info["Occupancy"]))
        return per_wave

    def vgprs(self, per_wave: dict[int, list[tuple[int, int]]]) -> None:
        for wave, points in per_wave.items():
            granule, budget, how = fit_vgprs(points, self.max_waves, self.max_vgprs)
            self.facts[f"vgpr_granule_w{wave}"] = granule
            self.facts[f"vgpr_budget_w{wave}"] = budget
            self.prov[f"vgpr_granule_w{wave}"] = self.prov[f"vgpr_budget_w{wave}"] = how
        for wave in (32, 64):
            if wave not in per_wave:
                self.facts[f"vgpr_granule_w{wave}"] = self.facts[f"vgpr_budget_w{wave}"] = None
                self.prov[f"vgpr_granule_w{wave}"] = self.prov[f"vgpr_budget_w{wave}"] = (
                    f"llc-probe: no wave{wave} on this processor"
                )

    def sgprs(self) -> None:
        # SGPRs: clobber s0..sN up to what llc accepts
        one_wave = self.one_wave
        names = [f"s{n}" for n in range(1, 107)]
        limit = None
        for _ in range(3):
            ir = (
                "".join(clobber_kernel(n, [f"s{int(n[1:]) - 1}"]) for n in names) + attrs(0, None, (1, one_wave)) + "\n"
            )
            asm, err = llc_asm(self.bin_dir, self.cpu, ir)
            if not err:
                break
            bad = {m.group("fn") for m in LIMIT_RE.finditer(err)}
            limits = [int(m.group("limit")) for m in LIMIT_RE.finditer(err)]
            if not bad:
                raise ProbeError(f"llc (SGPR sweep): {err.strip()[:300]}")
            limit = min(limits)
            names = [n for n in names if n not in bad]
        else:
            raise ProbeError("llc (SGPR sweep) kept failing")
        found = kernels_of(asm)
        sgpr_points = [(info["meta.sgpr_count"], info["Occupancy"]) for info in found.values()]
        self.facts["sgpr_waves"] = sgpr_steps(sgpr_points, self.max_waves)
        self.facts["max_sgprs"] = max(count for count, _ in sgpr_points)
        self.prov["sgpr_waves"] = (
            f"llc-probe: .sgpr_count against `; Occupancy:` of {len(sgpr_points)} kernels clobbering s0..sN"
        )
        self.prov["max_sgprs"] = "llc-probe: the largest .sgpr_count llc accepts" + (
            f" (its error: limit {limit})" if limit is not None else " (s0..s105 all accepted)"
        )

    def lds(self) -> None:
        # LDS: the limit llc states, then how its occupancy model shares it
        one_wave, max_waves = self.one_wave, self.max_waves
        _, err = llc_asm(self.bin_dir, self.cpu, lds_kernel("big", 4 << 20) + attrs(0, None, (1, one_wave)) + "\n")
        match = LIMIT_RE.search(err)
        if not match or match.group("what").strip() != "local memory":
            raise ProbeError(f"no LDS limit in llc's error: {err.strip()[:200]}")
        lds = int(match.group("limit"))
        self.facts["lds_per_workgroup"] = lds
        self.prov["lds_per_workgroup"] = "llc-probe: 'local memory (N) exceeds limit (L)' for 4 MiB of static LDS"
        # many fractions of the limit, and odd fractions of twice it: (per-CU LDS, SIMDs) pairs with the same ratio
        # differ only in how the remainders round
        sizes = sorted(
            {lds // d for d in range(2, 41)}
            | {lds // d + 1 for d in range(2, 41)}
            | {2 * lds // d for d in range(3, 82, 2)}
            | {4 * lds // d for d in range(5, 162, 2)}
        )
        ir = "".join(lds_kernel(f"x{size}", size) for size in sizes)
        ir += clobber_kernel("wg2", ["v3"], 1) + attrs(0, None, (one_wave, one_wave)) + "\n"
        ir += attrs(1, None, (2 * one_wave, 2 * one_wave)) + "\n"
        asm, err = llc_asm(self.bin_dir, self.cpu, ir)
        if err:
            raise ProbeError(f"llc (LDS occupancy): {err.strip()[:300]}")
        found = kernels_of(asm)
        observed = {size: found[f"x{size}"]["Occupancy"] for size in sizes}

        def lds_model(per_cu: int, simds: int, size: int) -> int:
            groups = min(max_waves * simds, per_cu // size)
            return 1 if groups == 0 else min(max(-(-groups // simds), 1), max_waves)

        fits = [
            (per_cu, simds)
            for per_cu in (lds // 2, lds, 2 * lds, 4 * lds)
            for simds in (1, 2, 4, 8)
            if all(lds_model(per_cu, simds, size) == occ for size, occ in observed.items())
        ]
        if len(fits) != 1:
            raise ProbeError(f"LDS occupancy of one-wave kernels fits {fits or 'no'} (LDS per CU, SIMDs): {observed}")
        self.facts["lds_per_cu_llvm"], self.facts["simds_per_cu"] = fits[0]
        self.prov["simds_per_cu"] = self.prov["lds_per_cu_llvm"] = (
            f"llc-probe: `; Occupancy:` of one-wave kernels with {len(sizes)} amounts of static LDS: LLVM shares this"
            " much LDS among this many SIMDs (a CU; in WGP mode, the WGP)"
        )
        simds = [self.facts["simds_per_cu"]]
        wg2 = found["wg2"]["Occupancy"]
        self.facts["workgroup_cap_binding"] = wg2 < max_waves
        if wg2 < max_waves:
            self.facts["workgroups_per_cu"] = wg2 * simds[0] // 2
            self.prov["workgroups_per_cu"] = "llc-probe: `; Occupancy:` of a two-wave workgroup (the cap binds here)"

    def lds_granule(self) -> None:
        # LDS allocation granule LLVM programs (LDS_SIZE of COMPUTE_PGM_RSRC2, non-HSA triple)
        sizes = [1, 200, 300, 600, 1100, 2100, 4200]
        one_wave = self.one_wave
        ir = "".join(lds_kernel(f"g{s}", s) for s in sizes) + attrs(0, None, (1, one_wave)) + "\n"
        asm, err = llc_asm(self.bin_dir, self.cpu, ir, triple="amdgcn--")
        fields = [int(v) for v in re.findall(r"\.long\t47180\n\t\.long\t(\d+)", asm)]
        if not err and len(fields) == len(sizes):
            granule = encoding_granule([(s, (f >> 15) & 0x1FF) for s, f in zip(sizes, fields, strict=True)], False)
            self.facts["lds_encoding_granule"] = granule
            self.prov["lds_encoding_granule"] = (
                "llc-probe: LDS_SIZE field of COMPUTE_PGM_RSRC2 for static LDS of 1..4200 bytes"
            )
        else:
            self.facts["lds_encoding_granule"] = None
            self.prov["lds_encoding_granule"] = "llc-probe: no .AMDGPU.config for a non-HSA triple"

    def descriptor_granules(self) -> None:
        # e_flags and the descriptor's encoding granules, from llvm-mc assembling the sweeps
        for wave, asm in self.sweep_asm.items():
            data, fields = assembled(self.bin_dir, self.cpu, asm, self.work / f"w{wave}")
            self.facts["mach"] = struct.unpack_from("<I", data, 48)[0] & 0xFF
            self.prov["mach"] = "llvm-mc: e_flags & 0xff of an assembled object"
            pairs = [(info["amdhsa.next_free_vgpr"], rsrc1 & 0x3F) for info, rsrc1 in fields]
            self.facts[f"descriptor_vgpr_granule_w{wave}"] = encoding_granule(pairs)
            self.prov[f"descriptor_vgpr_granule_w{wave}"] = (
                f"llvm-mc: GRANULATED_WORKITEM_VGPR_COUNT against .amdhsa_next_free_vgpr of {len(pairs)} kernels"
            )
        # llvm-mc refuses some counts llc writes (gfx6: .amdhsa_next_free_sgpr past 96): the counts up to 96 do
        ir = "".join(clobber_kernel(f"s{n}", [f"s{n - 1}"]) for n in range(1, 97)) + attrs(0, None, (1, self.one_wave))
        _, fields = assembled(self.bin_dir, self.cpu, self.compile(ir + "\n", "SGPR descriptor"), self.work / "sgpr")
        sgpr_pairs = [(info["meta.sgpr_count"], (rsrc1 >> 6) & 0xF) for info, rsrc1 in fields]
        if all(field == 0 for _, field in sgpr_pairs):
            self.facts["descriptor_sgpr_granule"] = None
            self.prov["descriptor_sgpr_granule"] = "llvm-mc: GRANULATED_WAVEFRONT_SGPR_COUNT is written as 0"
        else:
            granule = encoding_granule(sgpr_pairs)
            self.facts["descriptor_sgpr_granule"] = granule
            self.prov["descriptor_sgpr_granule"] = (
                f"llvm-mc: GRANULATED_WAVEFRONT_SGPR_COUNT against .sgpr_count of {len(sgpr_pairs)} kernels"
                if granule
                else "llvm-mc: GRANULATED_WAVEFRONT_SGPR_COUNT is ceil(n / g) - 1 of no .sgpr_count n (it counts"
                " reserved SGPRs .sgpr_count leaves out)"
            )
        for wave in (32, 64):
            if wave not in self.sweep_asm:
                self.facts[f"descriptor_vgpr_granule_w{wave}"] = None
                self.prov[f"descriptor_vgpr_granule_w{wave}"] = f"llc-probe: no wave{wave} on this processor"


# ---- what llc cannot show ------------------------------------------------------------------------------------


# shared/reference/amd-occupancy.md: LDS per CU (gfx9) or WGP (gfx10+, WGP mode, 4 SIMD32 and 128 KiB), the
# LDS a launch rounds to (512 B on gfx9, 1 KiB on gfx10.3 and later), the workgroup cap (16 per CU, 32 per WGP).
def add_reference_facts(facts: dict[str, Any]) -> None:
    prov = facts["provenance"]
    name, generation = facts["name"], facts["generation"]
    facts["lds_per_cu"] = facts["lds_per_cu_llvm"]
    prov["lds_per_cu"] = "llc-probe: lds_per_cu_llvm (LLVM's occupancy model)"
    # The reference's LDS rounding: 512 B on gfx9, 1 KiB on gfx10.3 and later (the RDNA parts it names, whose
    # workgroups get 64 KiB); llc programs 512 B blocks on RDNA (lds_encoding_granule), and names its own
    # granule for the processors the reference does not cover (gfx6-8, gfx10.1, gfx1250).
    gfx10_1 = generation == 10 and re.match(r"^gfx10(1\d|-1-)", name) is not None
    rdna_64k = generation >= 10 and facts["lds_per_workgroup"] == 64 * 1024 and not gfx10_1
    if generation == 9 or rdna_64k:
        facts["lds_alloc_granule"] = 512 if generation == 9 else 1024
        prov["lds_alloc_granule"] = REFERENCE + " (512 B on gfx9, 1 KiB on gfx10.3 and later)"
    else:
        facts["lds_alloc_granule"] = facts["lds_encoding_granule"]
        prov["lds_alloc_granule"] = "llc-probe: lds_encoding_granule (the reference names none here)"
    if "workgroups_per_cu" not in facts:
        facts["workgroups_per_cu"] = 32 if generation >= 10 else 16
        prov["workgroups_per_cu"] = REFERENCE + " (16 per CU, 32 per WGP; never binding here: llc shows max waves)"


# Processors current LLVM no longer accepts, kept from the reference so that their code objects still get figures:
# "gfx940/gfx941 are no longer known to current LLVM; their constants equal gfx942's" (ELF machine numbers from
# shared/reference/amd-code-objects.md).
DROPPED = {"gfx940": ("gfx942", 0x40), "gfx941": ("gfx942", 0x4B)}


def add_dropped(table: dict[str, Any]) -> None:
    for name, (like, mach) in DROPPED.items():
        if name in table or like not in table:
            continue
        facts = json.loads(json.dumps(table[like]))
        facts["name"], facts["mach"] = name, mach
        facts["provenance"] = {
            key: f"reference: shared/reference/amd-occupancy.md ({name} = {like}; LLVM no longer accepts {name})"
            for key in facts["provenance"]
        }
        facts["provenance"]["mach"] = "reference: shared/reference/amd-code-objects.md"
        table[name] = facts


def occupancy_model(facts: dict[str, Any]) -> None:
    name = facts["name"]
    if name.endswith("-generic"):
        facts["occupancy_model"] = False
        facts["reason"] = (
            "generic target: its code runs on several processors whose register files differ, so kdb computes no "
            "occupancy (LLVM's `; Occupancy:` comment, when present, is for the generic feature set)"
        )
    else:
        facts["occupancy_model"] = True
        facts["reason"] = None


def processors(bin_dir: Path) -> list[str]:
    out = (
        run([str(bin_dir / "llc"), "-march=amdgcn", "-mcpu=help"]).stdout
        + run([str(bin_dir / "llc"), "-march=amdgcn", "-mcpu=help"]).stderr
    )
    cpus = out.split("Available CPUs", 1)[-1].split("Available features", 1)[0]
    names = sorted({m.group(1) for m in re.finditer(r"^\s+(gfx[0-9a-z-]+)\s+-", cpus, re.MULTILINE)})
    if not names:
        raise ProbeError("llc -mcpu=help lists no gfx processor")
    return names


def llvm_version(bin_dir: Path) -> str:
    match = re.search(r"LLVM version (\S+)", run([str(bin_dir / "llc"), "--version"]).stdout)
    return match.group(1) if match else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--llvm-bin", type=Path, default=LLVM_BIN_DEFAULT)
    parser.add_argument("--output", type=Path, default=OUT_DEFAULT)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--only", nargs="*", help="probe only these processors (prints, writes nothing)")
    args = parser.parse_args(argv)
    for tool in ("llc", "llvm-mc", "llvm-readelf"):
        if not (args.llvm_bin / tool).exists():
            print(f"{args.llvm_bin / tool} missing (apt-get install llvm-22, or --llvm-bin)", file=sys.stderr)
            return 2
    names = args.only or processors(args.llvm_bin)
    started = time.monotonic()
    table: dict[str, Any] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="kdb-amd-probe-") as tmp, ThreadPoolExecutor(args.jobs) as pool:

        def one(cpu: str) -> tuple[str, dict[str, Any] | None, str | None]:
            try:
                facts = Probe(args.llvm_bin, cpu, Path(tmp)).run()
            except (ProbeError, KeyError, subprocess.TimeoutExpired) as exc:
                return cpu, None, f"{type(exc).__name__}: {exc}"
            add_reference_facts(facts)
            occupancy_model(facts)
            return cpu, facts, None

        for cpu, facts, error in pool.map(one, names):
            if facts is None:
                failed[cpu] = error or "?"
                print(f"{cpu}: FAILED {error}", file=sys.stderr)
            else:
                table[cpu] = facts
                print(f"{cpu}: ok", file=sys.stderr)
    print(f"{len(table)} processors probed, {len(failed)} failed, {time.monotonic() - started:.0f} s", file=sys.stderr)
    if args.only:
        print(json.dumps(table, indent=1, sort_keys=True))
        return 1 if failed else 0
    if failed:
        partial = args.output.with_suffix(".partial.json")
        partial.write_text(json.dumps({"processors": table, "failed": failed}, indent=1, sort_keys=True) + "\n")
        print(f"refusing to write a table with failed processors (the others: {partial})", file=sys.stderr)
        return 1
    add_dropped(table)
    document = {
        "generator": "scripts/gen_amd_processors.py",
        "llvm_version": llvm_version(args.llvm_bin),
        "processors": table,
    }
    args.output.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
