"""The per-backend analyses, in the order a folder is offered to them.

A backend claims a kernel folder when the Triton JSON names it, or when the folder holds its code
object; the first that claims it analyses it. A new backend is one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kdb.analysis.amd.analyze import analyze_amd
from kdb.analysis.model import AnalysisOptions, FolderAnalysis, FolderFile, first_file
from kdb.analysis.nvidia.analyze import analyze_nvidia
from kdb.triton.kernel_json import KernelMeta

Analyze = Callable[[FolderAnalysis, dict[str, Any], str, KernelMeta, list[FolderFile], AnalysisOptions], None]


@dataclass(frozen=True)
class Backend:
    name: str  # Triton's backend name in the kernel JSON
    code_object_kind: str  # walker kind of its code object
    analyze: Analyze


BACKENDS: tuple[Backend, ...] = (
    Backend("hip", "hsaco", analyze_amd),
    Backend("cuda", "cubin", analyze_nvidia),
)


def backend_for(meta: KernelMeta, files: list[FolderFile]) -> Backend | None:
    for backend in BACKENDS:
        if meta.backend == backend.name or first_file(files, backend.code_object_kind, meta.name):
            return backend
    return None
