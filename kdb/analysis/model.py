"""What per-backend analysis works on and returns: a folder's files, the rows for one folder, options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, overload


@dataclass
class FolderFile:
    rel: str
    kind: str
    data: bytes


@dataclass(frozen=True)
class SassRequest:
    """A kernel's SASS, left to be disassembled with other folders' kernels in one nvdisasm process."""

    path: str  # the cubin, relative to the cache
    arch: str  # as `nvdisasm -b` spells it: SM90a
    code: bytes  # the kernel's raw .text section


@dataclass
class FolderAnalysis:
    kernel: dict[str, Any] | None = None  # a kernel_folders row
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # analysis table -> rows
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (path, stage, reason)
    sass: SassRequest | None = None  # filled by kdb.analysis.folder.analyze_folders

    def add(self, table: str, **row: Any) -> None:
        self.rows.setdefault(table, []).append(row)


@dataclass(frozen=True)
class AnalysisOptions:
    # nvdisasm costs ~0.25 s of CPU per cubin, more than the rest of an NVIDIA kernel's analysis; the
    # PTX mix is always recorded, so SASS can be skipped (`kdb ingest --no-sass`) on large caches.
    sass: bool = True


DEFAULT_OPTIONS = AnalysisOptions()


@overload
def text_of(f: FolderFile) -> str: ...
@overload
def text_of(f: None) -> None: ...
@overload
def text_of(f: FolderFile | None) -> str | None: ...
def text_of(f: FolderFile | None) -> str | None:
    return None if f is None else f.data.decode("utf-8", "replace")


def first_file(files: list[FolderFile], kind: str, name: str) -> FolderFile | None:
    """The folder's file of this kind for kernel NAME (`NAME.kind`), else any of that kind."""
    of_kind = [f for f in files if f.kind == kind]
    for f in of_kind:
        if f.rel.rsplit("/", 1)[-1].rsplit(".", 1)[0] == name:
            return f
    return of_kind[0] if of_kind else None


def add_problem(out: FolderAnalysis, f: FolderFile | None, stage: str, reason: str) -> None:
    out.problems.append((f.rel if f else "", stage, reason))
