"""The per-backend analyses, in the order a folder is offered to them.

A backend claims a kernel folder when the Triton JSON names it, or when the folder holds its code
object; the first that claims it analyses it. A new backend is one entry here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from kdb.figures import FigureRoles, Wording, load_roles, wording_for

if TYPE_CHECKING:
    from kdb.analysis.model import FolderAnalysis, FolderFile, KernelFolder
    from kdb.triton.kernel_json import KernelMeta

Analyze = Callable[["FolderAnalysis", dict[str, Any], "KernelFolder"], None]
# (arch, occupancy limiter) -> what one workgroup/block may have of that resource, where the backend knows it
LaunchGrant = Callable[[str | None, str | None], int | None]


@dataclass(frozen=True)
class Backend:
    name: str  # Triton's backend name in the kernel JSON
    code_object_kind: str  # walker kind of its code object
    analyze: Analyze
    roles: FigureRoles  # what its figures mean, and the words its reports use (kdb/figures.py)
    launch_grant: LaunchGrant  # the limit a launch occupancy of 0 exceeded (LDS / shared memory per workgroup)


# Each vendor's analysis and occupancy tables are imported when first used: a diff or a report reads the roles
# only, and importing every analyser cost `kdb diff` ~40% of its kdb imports.
def _analyze_amd(out: FolderAnalysis, row: dict[str, Any], folder: KernelFolder) -> None:
    from kdb.analysis.amd.analyze import analyze_amd

    analyze_amd(out, row, folder)


def _analyze_nvidia(out: FolderAnalysis, row: dict[str, Any], folder: KernelFolder) -> None:
    from kdb.analysis.nvidia.analyze import analyze_nvidia

    analyze_nvidia(out, row, folder)


def _amd_launch_grant(arch: str | None, limiter: str | None) -> int | None:
    from kdb.analysis.amd import occupancy

    return occupancy.launch_grant(arch, limiter)


def _nvidia_launch_grant(arch: str | None, limiter: str | None) -> int | None:
    from kdb.analysis.nvidia import occupancy

    return occupancy.launch_grant(arch, limiter)


def _roles(vendor: str) -> FigureRoles:
    return load_roles(resources.files(f"kdb.analysis.{vendor}").joinpath("figures.json").read_text())


AMD_ROLES, NVIDIA_ROLES = _roles("amd"), _roles("nvidia")
BACKENDS: tuple[Backend, ...] = (
    Backend("hip", "hsaco", _analyze_amd, AMD_ROLES, _amd_launch_grant),
    Backend("cuda", "cubin", _analyze_nvidia, NVIDIA_ROLES, _nvidia_launch_grant),
)
_ROLES = {b.name: b.roles for b in BACKENDS}
# A kernel whose backend kdb does not know: no register file, scratch or expected figure can be judged on it (a rule
# that reads one is unknown, never a pass); tables and reports word it as the first backend's.
UNKNOWN_ROLES = dataclasses.replace(
    BACKENDS[0].roles,
    backend="",
    vendor="unknown",
    register_rules=(),
    spill_counts=(),
    spill_memory=("local_bytes",),
    scratch=(),
    compiler_occupancy=None,
    expected=(),
)


def roles_of(backend: str | None) -> FigureRoles:
    """The figure roles of a backend named in the catalog (`hip`, `cuda`); UNKNOWN_ROLES for any other."""
    return _ROLES.get(backend or "", UNKNOWN_ROLES)


def launch_grant(backend: str | None, arch: str | None, limiter: str | None) -> int | None:
    """What the GPU grants one workgroup/block of the resource that stops a kernel launching (`lds` on gfx942:
    65536 B), as the backend declares it; None where it declares none."""
    for b in BACKENDS:
        if b.name == backend:
            return b.launch_grant(arch, limiter)
    return None


def wording_of(backends: Iterable[str | None]) -> Wording:
    """The words of a report over kernels of these backends (an unknown one worded as the first backend)."""
    present = {_ROLES.get(b or "", BACKENDS[0].roles).backend for b in backends}
    return wording_for([b.roles for b in BACKENDS if b.name in present], BACKENDS[0].roles)


def backend_for(meta: KernelMeta, files: list[FolderFile]) -> Backend | None:
    from kdb.analysis.model import first_file

    for backend in BACKENDS:
        if meta.backend == backend.name or first_file(files, backend.code_object_kind, meta.name):
            return backend
    return None
