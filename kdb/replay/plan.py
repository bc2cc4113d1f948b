"""What a replay asks the other release for, per kernel (pure): the target and the options.

An option's value is kept when the user set it (it differs from what the kernel's own release applies by default);
an option at its release's default is left out, so the release replayed with applies its own default (copying it
verbatim gave the wrong occupancy on 16 of 28 kernels from 3.2.0 to 3.8.0: shared/reference/replay-and-cache-
keys.md); an option whose default kdb does not know is kept and said. `num_warps` and `num_ctas` are the
specialization itself: always kept. Options the other release lacks are dropped by the toolchain (in_toolchain.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kdb.errors import UsageError
from kdb.triton.defaults import UNKNOWN, option_default
from kdb.triton.options import TUNING_OPTIONS

ALWAYS_KEPT = ("num_warps", "num_ctas")
# Pointer arguments in a TTIR function's signature: `%x: !tt.ptr<f16>` and its attributes ` {tt.divisibility = 16 : i32}`
_POINTER_ARG = re.compile(r"(%[\w.$-]+: !tt\.ptr<[^>]*>)( \{([^{}]*)\})?")
_POINTER_RANGE = "tt.pointer_range = 32 : i32"
# Inductor's generated kernels: pointwise, persistent and looped reductions, templates, foreach
_INDUCTOR_KERNEL = re.compile(r"triton_(?:poi|per|red|tem|for)_")


@dataclass(frozen=True)
class Target:
    backend: str
    arch: str  # gfx942, or a CUDA capability as digits (90)
    warp_size: int

    def as_job(self) -> list[Any]:
        return [self.backend, self.arch, self.warp_size]


@dataclass(frozen=True)
class OptionPlan:
    options: dict[str, Any]
    defaulted: list[str] = field(default_factory=list)  # at their release's default: the replaying release's applies
    assumed: list[str] = field(default_factory=list)  # default unknown to kdb: kept as if the user had set them


def parse_target(text: str) -> Target:
    """`--target`: gfx942, gfx1100, sm90, sm_90 or 90."""
    low = text.strip().lower()
    if re.fullmatch(r"gfx[0-9a-f]+", low):
        # wave64 on the GCN/CDNA families (gfx9: MI100-MI355), wave32 as Triton compiles RDNA (gfx10-gfx12)
        return Target("hip", low, 64 if low.startswith("gfx9") else 32)
    if m := re.fullmatch(r"(?:sm_?)?(\d{2,3})[a-z]?", low):
        return Target("cuda", m.group(1), 32)
    raise UsageError(f"--target {text!r}: expected an AMD gfx name (gfx942) or a CUDA capability (sm90)")


def kernel_target(meta: Mapping[str, Any], row: Mapping[str, Any]) -> Target | None:
    """The target a kernel was compiled for, from Triton's JSON (3.x: `target`), else the catalog's row."""
    target = meta.get("target")
    if isinstance(target, dict) and target.get("backend") and target.get("arch") is not None:
        return Target(str(target["backend"]), str(target["arch"]), int(target.get("warp_size") or 32))
    if row.get("backend") and row.get("arch"):
        return Target(str(row["backend"]), str(row["arch"]), int(row.get("warp_size") or 32))
    return None


def plan_options(meta: Mapping[str, Any], source: Target, triton_version: str | None) -> OptionPlan:
    """The options to compile a kernel of `triton_version` (its JSON `meta`, for `source`) with another release."""
    options: dict[str, Any] = {k: meta[k] for k in ALWAYS_KEPT if meta.get(k) is not None}
    defaulted, assumed = [], []
    for name in TUNING_OPTIONS.get(source.backend, ()):
        if name not in meta or meta[name] is None:
            continue
        default = option_default(source.backend, name, triton_version, source.arch)
        if default is UNKNOWN:
            options[name] = meta[name]
            assumed.append(name)
        elif meta[name] == default:
            defaulted.append(name)
        else:
            options[name] = meta[name]
    return OptionPlan(options, defaulted, assumed)


def _release(version: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version or "")[:2])


def jit_marks_pointer_range(backend: str, version: str | None) -> bool:
    """Whether a release's JIT puts `tt.pointer_range = 32` on every pointer argument under 2 GB: on AMD in 3.2
    (HIPAttrsDescriptor) and from 3.6 (buffer ops on by default); never on NVIDIA (corpus/README.md, records)."""
    release = _release(version)
    return backend == "hip" and (release[:2] == (3, 2) or release >= (3, 6))


def specialize_ttir(ttir: str, source: Target, source_version: str | None, plan: PointerPlan) -> tuple[str, bool]:
    """The TTIR as the replaying release's JIT would have specialised it. A TTIR of a release whose JIT does not
    mark pointer ranges, replayed for one whose JIT does, gains `tt.pointer_range = 32` on every pointer argument
    (kdb cannot see the tensors: each is assumed under 2 GB, as nearly all are, and said). A TTIR with the mark
    already (Inductor adds it itself on ROCm) is left as it is, and so is an Inductor kernel's: Inductor compiles
    without Triton's JIT, its marks are torch's under every release (none on a kernel with atomics: 9 of gpt2_train's
    125, which a mark turned into buffer ops the real 3.6.0 compile does not have). Returns (TTIR, whether it was
    changed)."""
    if not plan.target_marks or jit_marks_pointer_range(source.backend, source_version):
        return ttir, False
    head_at = ttir.find("tt.func public @")
    if head_at < 0 or _INDUCTOR_KERNEL.match(ttir, head_at + len("tt.func public @")):
        return ttir, False
    end = ttir.find("\n", head_at)
    end = len(ttir) if end < 0 else end
    head = ttir[head_at:end]
    if _POINTER_RANGE in head or "!tt.ptr<" not in head:
        return ttir, False

    def mark(m: re.Match[str]) -> str:
        attrs = m.group(3)
        return f"{m.group(1)} {{{attrs + ', ' if attrs else ''}{_POINTER_RANGE}}}"

    return ttir[:head_at] + _POINTER_ARG.sub(mark, head) + ttir[end:], True


@dataclass(frozen=True)
class PointerPlan:
    target_marks: bool  # the replaying release's JIT marks pointer ranges for the replayed target
