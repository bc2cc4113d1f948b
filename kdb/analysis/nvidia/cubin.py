"""NVIDIA cubin (CUDA ELF) parser: architecture and per-kernel resource usage.

Pure: bytes in, frozen dataclasses out. Every malformed input raises ``kdb.errors.ParseError``.

Where each figure lives in a cubin written by ptxas (checked against ``cuobjdump -elf`` and
``cuobjdump --dump-resource-usage`` on Triton 3.4/3.6 caches for sm80..sm120):

- architecture: ``e_flags``. ELF ABI version 7 (CUDA <= 12.x for sm < 100) keeps the SM number in
  bits 7:0, the virtual (PTX) SM in bits 23:16, and the ``a`` (arch-specific) variant in bit 11
  (0x800). ABI version 8 (Blackwell, and everything CUDA 13 writes, sm_90 included) moves the SM to
  bits 15:8; the ``a`` variant is then the ``.nv.compat`` section's ``EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET``
  (= 1), which is what cuobjdump 13.5 names the cubin by (``sm=100a``), whatever e_flags bit 3 (LLVM's
  ``EF_CUDA_ACCELERATORS``) says: ptxas 13.4 writes 0x09006402 for sm_100a; the virtual SM is the
  ``.note.nv.cuinfo`` note's (e_flags bits 23:16 are 0 there). ``.note.nv.tkinfo`` names the assembler
  and its command line (``ptxas-blackwell``, ``-arch sm_100a``).
- registers per thread: ``EIATTR_REGCOUNT`` in the global ``.nv.info`` section (keyed by the
  function's symbol index), else bits 31:24 of ``sh_info`` of ``.text.<name>``.
- stack/frame per thread: ``EIATTR_FRAME_SIZE`` / ``EIATTR_MIN_STACK_SIZE`` /
  ``EIATTR_MAX_STACK_SIZE`` in ``.nv.info``; register spills land in the frame.
- static shared memory: size of the NOBITS section ``.nv.shared.<name>`` (Triton's shared memory
  is dynamic, so this is normally 0; the JSON ``shared`` is the real footprint).
- constant bank 0: size of ``.nv.constant0.<name>`` (kernel parameters start at 0x160 / 0x210).
- per-kernel attributes: ``.nv.info.<name>`` (records decoded in kdb.analysis.nvidia.nvinfo).

The ELF itself is read by kdb.analysis.elf64, the reader AMD code objects go through too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kdb.analysis import elf64
from kdb.analysis.elf64 import BitField
from kdb.analysis.nvidia.nvinfo import (
    EIATTR_CRS_STACK_SIZE,
    EIATTR_FRAME_SIZE,
    EIATTR_MAX_STACK_SIZE,
    EIATTR_MAX_THREADS,
    EIATTR_MAXREG_COUNT,
    EIATTR_MIN_STACK_SIZE,
    EIATTR_NUM_MBARRIERS,
    EIATTR_REGCOUNT,
    EIATTR_REQNTID,
    EICOMPAT_CUDA_ACCELERATOR_TARGET,
    EICOMPAT_NAMES,
    EIFMT_SVAL,
    NvInfoAttr,
    decode_nv_info,
)
from kdb.errors import ParseError

EM_CUDA = 190
# st_other bit 4 marks a kernel entry point (``.entry`` in PTX) as opposed to a ``.func``.
STO_CUDA_ENTRY = 0x10
# e_flags of a CUDA ELF, by EI_ABIVERSION (module docstring)
EF_CUDA_SM_V7 = BitField("EF_CUDA_SM (ABI 7)", 0, 8)
EF_CUDA_ARCH_SPECIFIC_V7 = BitField("EF_CUDA_ARCH_SPECIFIC (ABI 7)", 11, 1)
EF_CUDA_SM_V8 = BitField("EF_CUDA_SM (ABI 8)", 8, 8)
EF_CUDA_ACCELERATORS_V8 = BitField("EF_CUDA_ACCELERATORS (ABI 8)", 3, 1)
EF_CUDA_VIRTUAL_SM = BitField("EF_CUDA_VIRTUAL_SM", 16, 8)
# .text.<kernel>: registers per thread in sh_info, named barriers in sh_flags
TEXT_INFO_REGISTERS = BitField("sh_info registers", 24, 8)
TEXT_FLAGS_BARRIERS = BitField("sh_flags barriers", 20, 7)

# Owner of the .note.nv.* notes and their types (cuobjdump: "NVIDIA CUDA Information" / "Toolkit Information").
NV_NOTE_OWNER = b"NVIDIA Corp"
NT_CUDA_INFO = 1000
NT_CUDA_TKINFO = 2000
# Attributes of the global ``.nv.info`` whose SVAL payload is ``symbol index:u32, value:u32``.
_PER_FUNCTION_GLOBAL = frozenset(
    {EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE, EIATTR_CRS_STACK_SIZE}
)

# The exceptions struct and the decoders can raise on a damaged file; all become ParseError.
_ELF_ERRORS = (
    struct.error,
    IndexError,
    KeyError,
    ValueError,
    TypeError,
    AttributeError,
    AssertionError,
    ZeroDivisionError,
    OverflowError,
    UnicodeDecodeError,
    RecursionError,
)


@dataclass(frozen=True)
class CubinKernel:
    name: str
    is_entry: bool  # a kernel (.entry) rather than a device function (.func)
    registers: int  # per thread
    frame_size: int  # bytes per thread: local variables and register spills
    min_stack_size: int  # bytes per thread
    max_stack_size: int | None  # bytes per thread, call-graph depth included; only when present
    stack_size: int  # what cuobjdump reports as STACK: max(frame, min stack, max stack)
    local_size: int  # size of .nv.local.<name> (cuobjdump LOCAL); 0 for ptxas output
    static_shared: int  # bytes, .nv.shared.<name>
    const0_size: int  # bytes, .nv.constant0.<name>
    code_size: int  # bytes of SASS in .text.<name>
    barriers: int  # named barriers used: sh_flags bits 26:20 of .text.<name>
    max_threads: tuple[int, int, int] | None  # EIATTR_MAX_THREADS (.maxntid)
    req_threads: tuple[int, int, int] | None  # EIATTR_REQNTID (.reqntid)
    max_reg_count: int | None  # EIATTR_MAXREG_COUNT (.maxnreg), 0xff when unset
    num_mbarriers: int | None  # EIATTR_NUM_MBARRIERS (sm90 TMA/wgmma pipelines)
    attributes: tuple[NvInfoAttr, ...]  # .nv.info.<name>, in file order
    code: bytes = field(default=b"", repr=False, compare=False)  # the raw .text.<name> section (SASS encodings)


@dataclass(frozen=True)
class Cubin:
    arch: int  # SM number: 80, 86, 89, 90, 100, 120 ...
    arch_name: str  # cuobjdump's spelling: "sm_90a", "sm_80", "sm_100a"
    arch_specific: bool  # the "a" variant (sm_90a, sm_100a): features that run on this SM only
    virtual_arch: int | None  # PTX target SM: e_flags (ABI 7) or the .note.nv.cuinfo note (ABI 8); None if neither
    abi_version: int  # EI_ABIVERSION: 7 (old layout) or 8 (Blackwell / CUDA 13 layout)
    toolkit_version: int  # e_version, e.g. 128 for CUDA 12.8 ("toolkit=128" in cuobjdump -elf)
    kernels: tuple[CubinKernel, ...]  # sorted by name
    compat: tuple[NvInfoAttr, ...] = ()  # the .nv.compat records (ABI 8), in file order
    tool: str | None = None  # .note.nv.tkinfo: the assembler ("ptxas-blackwell")
    tool_version: str | None = None  # "Cuda compilation tools, release 13.4, V13.4.59"
    tool_arguments: str | None = None  # its command line ("-v  -lineinfo  -arch sm_100a")

    @property
    def raw_arch(self) -> str:
        """The architecture as ``nvdisasm -b`` spells it: ``SM90a``, ``SM80``."""
        return f"SM{self.arch}{'a' if self.arch_specific else ''}"


def decode_arch(e_flags: int, abi_version: int) -> tuple[int, bool, int | None]:
    """(sm, arch_specific, virtual_sm) from the ELF header.

    ABI 7: SM in bits 7:0, virtual SM in 23:16, ``a`` in bit 11 (sm_90a: 0x5a0d5a).
    ABI 8: SM in bits 15:8, ``a`` in bit 3 (sm_100a: 0x0900640a).
    """
    virtual = EF_CUDA_VIRTUAL_SM.get(e_flags) or None
    if abi_version >= 8:
        return EF_CUDA_SM_V8.get(e_flags), EF_CUDA_ACCELERATORS_V8.is_set(e_flags), virtual
    return EF_CUDA_SM_V7.get(e_flags), EF_CUDA_ARCH_SPECIFIC_V7.is_set(e_flags), virtual


def decode_notes(data: bytes) -> list[elf64.Note]:
    """The ELF notes of a SHT_NOTE section body, every byte of it a whole record."""
    records, stop = elf64.notes(data)
    if stop < len(data):
        if len(data) - stop < elf64.NOTE_HEADER_SIZE:
            raise ParseError(f"truncated ELF note at offset {stop}")
        raise ParseError(f"ELF note at offset {stop} overruns its section")
    return records


def _tkinfo(desc: bytes) -> tuple[str, str, str]:
    """(tool, version, arguments) of a .note.nv.tkinfo descriptor: version:u32, 0:u32, then four u32 offsets
    (name, version, branch, arguments) into the NUL-terminated strings that follow (checked against
    cuobjdump 13.5's reading of ptxas 13.4 cubins)."""
    if len(desc) < 24:
        raise ParseError(f".note.nv.tkinfo descriptor of {len(desc)} bytes, expected at least 24")
    offsets = struct.unpack_from("<4I", desc, 8)
    strings = desc[24:]

    def at(offset: int) -> str:
        if offset >= len(strings):
            raise ParseError(f".note.nv.tkinfo string offset {offset} outside its {len(strings)} bytes")
        end = strings.find(b"\0", offset)
        return strings[offset : end if end >= 0 else len(strings)].decode("utf-8", "replace").strip()

    return at(offsets[0]), at(offsets[1]), at(offsets[3])


def _dim3(attrs: dict[int, NvInfoAttr], attr: int) -> tuple[int, int, int] | None:
    rec = attrs.get(attr)
    if rec is None:
        return None
    if len(rec.payload) != 12:
        raise ParseError(f"{rec.name} payload is {len(rec.payload)} bytes, expected 12")
    x, y, z = struct.unpack("<III", rec.payload)
    return (x, y, z)


def _checked_header(data: bytes) -> elf64.Header:
    """The ELF header of a CUDA ELF whose section and program header tables lie inside the file."""
    hdr = elf64.header(data)
    if hdr.machine != EM_CUDA:
        raise ParseError(f"ELF machine {hdr.machine} is not EM_CUDA (190)")
    if (
        hdr.shnum == 0
        or hdr.shentsize != elf64.SECTION_HEADER_SIZE
        or hdr.shoff + hdr.shnum * elf64.SECTION_HEADER_SIZE > len(data)
    ):
        raise ParseError("section header table missing or outside the file")
    if hdr.phnum and (
        hdr.phentsize != elf64.PROGRAM_HEADER_SIZE or hdr.phoff + hdr.phnum * elf64.PROGRAM_HEADER_SIZE > len(data)
    ):
        raise ParseError("program header table outside the file (truncated?)")
    return hdr


def parse_cubin(data: bytes) -> Cubin:
    """Parse a cubin. Raises ParseError on anything that is not a well-formed CUDA ELF."""
    hdr = _checked_header(data)
    try:
        return _parse(data, hdr)
    except ParseError:
        raise
    except _ELF_ERRORS as exc:
        raise ParseError(
            f"malformed cubin: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc


def _parse(data: bytes, hdr: elf64.Header) -> Cubin:
    sm, specific, virtual = decode_arch(hdr.flags, hdr.abi_version)
    if sm == 0:
        raise ParseError(f"e_flags 0x{hdr.flags:x} name no SM architecture")
    all_sections = elf64.sections(data, hdr)
    sections = _by_name(data, all_sections)
    symtab = next((sec for sec in reversed(all_sections) if sec.type == elf64.SHT_SYMTAB), None)
    if symtab is None:
        raise ParseError("cubin has no symbol table")
    if symtab.entsize != elf64.SYMBOL_SIZE:
        raise ParseError("symbol table is malformed")
    per_symbol = _per_symbol_figures(sections.get(".nv.info"), data)
    kernels = [
        _kernel(data, sections, sym, per_symbol.get(index, {}))
        for index, sym in enumerate(elf64.symbols(data, symtab, all_sections))
        # an external (undefined) function such as vprintf has no body here
        if sym.type == elf64.STT_FUNC and f".text.{sym.name}" in sections
    ]
    kernels.sort(key=lambda k: k.name)

    compat_sec = sections.get(".nv.compat")
    compat = decode_nv_info(elf64.section_data(data, compat_sec), EICOMPAT_NAMES) if compat_sec is not None else ()
    accelerator = next((a.value for a in compat if a.attr == EICOMPAT_CUDA_ACCELERATOR_TARGET), None)
    if hdr.abi_version >= 8 and accelerator is not None:
        specific = accelerator == 1
    tool = tool_version = tool_arguments = None
    for note_name in (".note.nv.cuinfo", ".note.nv.tkinfo"):
        note_sec = sections.get(note_name)
        if note_sec is None or note_sec.type != elf64.SHT_NOTE:
            continue
        for note in decode_notes(elf64.section_data(data, note_sec)):
            if note.owner != NV_NOTE_OWNER:
                continue
            if note.type == NT_CUDA_INFO and len(note.desc) >= 4 and virtual is None:
                # version:u16, virtual SM:u16, toolkit:u32 ("CUDA Virtual SM: sm_100", "CUDA Tool Kit Version: 13.4")
                virtual = struct.unpack_from("<H", note.desc, 2)[0] or None
            elif note.type == NT_CUDA_TKINFO:
                tool, tool_version, tool_arguments = _tkinfo(note.desc)
    return Cubin(
        arch=sm,
        arch_name=f"sm_{sm}{'a' if specific else ''}",
        arch_specific=specific,
        virtual_arch=virtual,
        abi_version=hdr.abi_version,
        # EV_NONE and EV_CURRENT are no toolkit version (pyelftools, which kdb read cubins with, named them)
        toolkit_version=hdr.version if hdr.version > 1 else 0,
        kernels=tuple(kernels),
        compat=compat,
        tool=tool,
        tool_version=tool_version,
        tool_arguments=tool_arguments,
    )


def _by_name(data: bytes, sections: list[elf64.Section]) -> dict[str, elf64.Section]:
    """Sections by name; a cubin names each section once (kernels are found by their sections' names)."""
    by_name: dict[str, elf64.Section] = {}
    for sec in sections:
        # elf64 has refused every other section type whose bytes lie past the end
        if not sec.nobits and sec.offset + sec.size > len(data):
            raise ParseError(f"section {sec.name!r} extends past the end of the file (truncated?)")
        if sec.name in by_name:
            raise ParseError(f"duplicate section {sec.name}")
        by_name[sec.name] = sec
    return by_name


def _per_symbol_figures(glob: elf64.Section | None, data: bytes) -> dict[int, dict[int, int]]:
    """The global .nv.info's per-function figures (registers, frame, stacks), keyed by symbol index."""
    per_symbol: dict[int, dict[int, int]] = {}
    for rec in decode_nv_info(elf64.section_data(data, glob)) if glob is not None else ():
        if rec.attr in _PER_FUNCTION_GLOBAL and rec.fmt == EIFMT_SVAL:
            if len(rec.payload) != 8:
                raise ParseError(f"{rec.name} payload is {len(rec.payload)} bytes, expected 8")
            sym_index, value = struct.unpack("<II", rec.payload)
            per_symbol.setdefault(sym_index, {})[rec.attr] = value
    return per_symbol


def _kernel(data: bytes, sections: dict[str, elf64.Section], sym: elf64.Symbol, figures: dict[int, int]) -> CubinKernel:
    name = sym.name
    text = sections[f".text.{name}"]
    info_sec = sections.get(f".nv.info.{name}")
    attrs = decode_nv_info(elf64.section_data(data, info_sec)) if info_sec is not None else ()
    by_id: dict[int, NvInfoAttr] = {}
    for rec in attrs:
        by_id.setdefault(rec.attr, rec)
    regs = figures.get(EIATTR_REGCOUNT)
    frame = figures.get(EIATTR_FRAME_SIZE, 0)
    min_stack = figures.get(EIATTR_MIN_STACK_SIZE, 0)
    max_stack = figures.get(EIATTR_MAX_STACK_SIZE)
    maxreg = by_id.get(EIATTR_MAXREG_COUNT)
    mbar = by_id.get(EIATTR_NUM_MBARRIERS)
    return CubinKernel(
        name=name,
        is_entry=bool(sym.other & STO_CUDA_ENTRY),
        registers=TEXT_INFO_REGISTERS.get(text.info) if regs is None else regs,
        frame_size=frame,
        min_stack_size=min_stack,
        max_stack_size=max_stack,
        stack_size=max(frame, min_stack, max_stack or 0),
        local_size=_size(sections, f".nv.local.{name}"),
        static_shared=_size(sections, f".nv.shared.{name}"),
        const0_size=_size(sections, f".nv.constant0.{name}"),
        code_size=text.size,
        barriers=TEXT_FLAGS_BARRIERS.get(text.flags),
        max_threads=_dim3(by_id, EIATTR_MAX_THREADS),
        req_threads=_dim3(by_id, EIATTR_REQNTID),
        max_reg_count=maxreg.value if maxreg is not None else None,
        num_mbarriers=mbar.value if mbar is not None else None,
        attributes=attrs,
        code=elf64.section_data(data, text),
    )


def _size(sections: dict[str, elf64.Section], name: str) -> int:
    sec = sections.get(name)
    return sec.size if sec is not None else 0
