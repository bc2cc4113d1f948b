"""Which kernel folder of a snapshot a profiled launch ran: pure functions of the launch and the folders' facts.

A launch is linked to a folder only on evidence, in this order, and counted under a reason otherwise (never
guessed):

1. the name: the folders of the snapshot whose kernel has the launch's name (a Triton kernel's name is its
   Python function's, Inductor's `triton_poi_fused_add_0`; Proton and torch.profiler both record it);
2. the launch record, where the profiler kept one (torch.profiler: CUPTI's): the device's backend is the
   folder's (a CUDA block of 128 threads is also 2 AMD waves of 64: only the vendor tells them apart), the block
   is Triton's (num_warps × warp size, 1, 1), the dynamic shared memory is the folder's `shared`, and the
   registers per thread are the folder's — or, for a CUDA folder only, the CUDA driver's floor above them
   (DRIVER_REGISTER_FLOORS);
3. TorchInductor's autotuning: of the folders one generated module compiled, Inductor launches only the
   autotune winner (`.best_config`), so a module whose winner fits stands for its winner alone;
4. the grid, where kdb can tell the grid Inductor launches a folder with (a `Grid1D` kernel whose `xnumel` is a
   literal of its module and whose `XBLOCK` is its config's);
5. the same binary: folders whose code objects are byte-identical (one kernel compiled twice, e.g. by Inductor's
   compile workers and by its parent process) ran the same code; the launch is linked to the first of them by
   cache key, and the others are named in the link's detail.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import ceil

from kdb.profile.formats import Launches

NOT_TRITON = "not a Triton kernel"
NO_KERNEL = "no kernel of that name"
NO_FIT = "no folder of that name fits the launch"
# The CUDA driver launches a kernel with at least 16 registers per thread, and one that calls into the driver
# (`__assertfail` of `tl.device_assert`, `vprintf`) with at least 32, whatever its cubin's EIATTR_REGCOUNT says:
# CUPTI (so torch.profiler) records that figure. Measured on an H100 (CUDA 13 driver) against cuobjdump on every
# Triton launch of corpus/profiles (8 → 16, 14 → 16, 24 → 32 with `__assertfail`, 18 → 18).
DRIVER_REGISTER_FLOORS = (16, 32)
# Kernel libraries whose kernels are not Triton's, by name prefix (cuBLAS / cuBLASLt, cuDNN, CUTLASS, NCCL).
LIBRARY_PREFIXES = (
    "nvjet_",
    "cudnn",
    "cutlass",
    "cublas",
    "sm80_xmma",
    "sm90_xmma",
    "sm100_xmma",
    "ampere_",
    "hopper_",
    "volta_",
    "turing_",
    "nccl",
    "gemv",
    "gemmk",
    "splitKreduce",
    "Kernel2",
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Link rules, as the catalog records them (profile_kernel_times.link)
BY_NAME = "name"
BY_LAUNCH = "launch record"
BY_WINNER = "autotune winner"
BY_GRID = "grid"
BY_BINARY = "same binary"


@dataclass(frozen=True)
class Folder:
    """What the linker knows of one kernel folder of the snapshot."""

    cache_key: str
    num_warps: int | None = None
    warp_size: int | None = None
    registers: int | None = None
    shared: int | None = None
    is_best: bool | None = None  # the kernels view's is_autotune_best
    module: str | None = None  # the Inductor generated module it was compiled from (kernels.inductor_module)
    code_hash: str | None = None  # the blob hash of its code object (cubin / hsaco)
    grid: tuple[int, int, int] | None = None  # the grid Inductor launches it with, where known
    backend: str | None = None  # 'cuda' | 'hip' (kernels.backend)


@dataclass(frozen=True)
class Link:
    cache_key: str | None  # None: not linked, `reason` says why
    rules: tuple[str, ...] = ()
    reason: str | None = None
    detail: str | None = None


def not_triton(name: str) -> bool:
    """A name no Triton kernel has: Triton names a kernel after its Python function (an identifier, never
    mangled: `_Z…` is C++), or one of a vendor library's kernels (LIBRARY_PREFIXES)."""
    return not _IDENTIFIER.match(name) or name.startswith("_Z") or name.startswith(LIBRARY_PREFIXES)


def link_launches(launch: Launches, folders: Sequence[Folder]) -> Link:
    """The folder among `folders` (every folder of the snapshot whose kernel has the launch's name) that ran."""
    if not folders:
        return Link(None, reason=NOT_TRITON if not_triton(launch.name) else NO_KERNEL)
    rules: list[str] = []
    fitting = [f for f in folders if _fits(launch, f)]
    if not fitting:
        return Link(None, reason=NO_FIT, detail=_record(launch))
    if len(fitting) < len(folders):
        rules.append(BY_LAUNCH)
    for rule, step in ((BY_WINNER, _winners), (BY_GRID, lambda fs: _grid(launch, fs))):
        if len(fitting) > 1:
            narrowed = step(fitting)
            if len(narrowed) < len(fitting):
                fitting = narrowed
                rules.append(rule)
    if len(fitting) == 1:
        return Link(fitting[0].cache_key, tuple(rules) or (BY_NAME,))
    hashes = {f.code_hash for f in fitting}
    if len(hashes) == 1 and None not in hashes:
        first, *others = sorted(f.cache_key for f in fitting)
        return Link(first, (*rules, BY_BINARY), detail="identical code object in " + ", ".join(others))
    return Link(
        None, reason=f"ambiguous: {len(fitting)} folders fit", detail=", ".join(sorted(f.cache_key for f in fitting))
    )


def _fits(launch: Launches, folder: Folder) -> bool:
    """The launch record agrees with the folder's facts (a fact either side lacks does not exclude it). Each
    vendor's rule holds for its own backend only: the driver's register floor is CUDA's."""
    if launch.backend is not None and folder.backend is not None and launch.backend != folder.backend:
        return False
    threads = None if folder.num_warps is None or folder.warp_size is None else folder.num_warps * folder.warp_size
    if launch.block is not None and threads is not None and launch.block != (threads, 1, 1):
        return False
    if launch.shared is not None and folder.shared is not None and launch.shared != folder.shared:
        return False
    recorded, own = launch.registers, folder.registers
    if recorded is not None and own is not None and recorded != own:
        return folder.backend == "cuda" and own < recorded and recorded in DRIVER_REGISTER_FLOORS
    return True


def _winners(folders: list[Folder]) -> list[Folder]:
    """Each generated module's folders reduced to its autotune winner, where that winner is among them."""
    out: list[Folder] = []
    by_module: dict[str, list[Folder]] = {}
    for f in folders:
        if f.module is None:
            out.append(f)
        else:
            by_module.setdefault(f.module, []).append(f)
    for group in by_module.values():
        best = [f for f in group if f.is_best]
        out += best if len(best) == 1 else group
    return sorted(out, key=lambda f: f.cache_key)


def _grid(launch: Launches, folders: list[Folder]) -> list[Folder]:
    """The folders whose launch grid is the launch's, and those whose grid kdb cannot tell."""
    if launch.grid is None or all(f.grid is None for f in folders):
        return folders
    kept = [f for f in folders if f.grid is None or f.grid == launch.grid]
    return kept or folders


def _record(launch: Launches) -> str:
    parts = []
    if launch.block is not None:
        parts.append(f"block {launch.block[0]}×{launch.block[1]}×{launch.block[2]}")
    if launch.registers is not None:
        parts.append(f"{launch.registers} registers")
    if launch.shared is not None:
        parts.append(f"{launch.shared} B shared")
    return "launched with " + ", ".join(parts) if parts else "no launch record"


def inductor_grid(
    module_source: str, kernel_name: str, grid_type: str | None, kwargs: dict
) -> tuple[int, int, int] | None:
    """The grid Inductor launches a kernel of a generated module with, for a config's block sizes (`kwargs`):
    only for `Grid1D` kernels (ceil(xnumel / XBLOCK), 1, 1) whose `xnumel` is an integer literal assigned at the
    top of the kernel's body (static shapes); None otherwise."""
    if grid_type != "Grid1D":
        return None
    xblock = kwargs.get("XBLOCK", 1)
    if not isinstance(xblock, int) or xblock <= 0:
        return None
    xnumel = _literal_numel(module_source, kernel_name, "xnumel")
    return None if xnumel is None else (ceil(xnumel / xblock), 1, 1)


def _literal_numel(source: str, kernel_name: str, variable: str) -> int | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == kernel_name:
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and [getattr(t, "id", None) for t in stmt.targets] == [variable]
                    and isinstance(stmt.value, ast.Constant)
                    and type(stmt.value.value) is int
                ):
                    return stmt.value.value
    return None


def with_grid(folder: Folder, grid: tuple[int, int, int] | None) -> Folder:
    return replace(folder, grid=grid)
