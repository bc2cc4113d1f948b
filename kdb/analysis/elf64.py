"""The parts of a 64-bit little-endian ELF file kdb reads: header fields, section headers, symbols, notes.

kdb's one ELF reader, for AMD code objects and NVIDIA cubins alike. pyelftools parses every header and
symbol through `construct`, building its parser objects anew for each file: ~5 ms per AMD code object, a
quarter of a kernel's whole analysis in the profile of a first ingest (gfx942 mlp cache: 1.2 s of 3.7 s).
The three fixed-size records below, read with `struct`, cost ~0.1 ms. The records equal pyelftools' on
every corpus code object and cubin (tests/test_amd_analysis.py, tests/test_nvidia_analysis.py), and what kdb
derives from them equals llvm-readelf's and cuobjdump's output. Pure: bytes in, records out; malformed input
raises ParseError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kdb.errors import ParseError

# Elf64_Ehdr from e_type on (after the 16 bytes of e_ident)
_EHDR = struct.Struct("<HHIQQQIHHHHHH")
EI_OSABI, EI_ABIVERSION = 7, 8
# Elf64_Nhdr: namesz, descsz, type; then the name and the descriptor, each padded to 4 bytes
_NHDR = struct.Struct("<III")
NOTE_HEADER_SIZE = _NHDR.size
# Elf64_Shdr: name, type, flags, addr, offset, size, link, info, addralign, entsize
_SHDR = struct.Struct("<IIQQQQIIQQ")
# Elf64_Sym: name, info, other, shndx, value, size
_SYM = struct.Struct("<IBBHQQ")
SECTION_HEADER_SIZE, SYMBOL_SIZE = _SHDR.size, _SYM.size
PROGRAM_HEADER_SIZE = 56  # Elf64_Phdr, which kdb does not read
SHT_NULL, SHT_SYMTAB, SHT_STRTAB, SHT_NOTE, SHT_NOBITS, SHT_DYNSYM = 0, 2, 3, 7, 8, 11
STT_OBJECT, STT_FUNC = 1, 2
# st_shndx values that name no section (SHN_UNDEF, SHN_ABS, SHN_COMMON)
NO_SECTION = frozenset({0, 0xFFF1, 0xFFF2})
SHN_XINDEX = 0xFFFF
MAX_SECTIONS = 4096


@dataclass(frozen=True, slots=True)
class BitField:
    """Bits SHIFT .. SHIFT + WIDTH - 1 of a header or register word, under the name its owner's headers give it."""

    name: str
    shift: int
    width: int

    def get(self, word: int) -> int:
        return (word >> self.shift) & ((1 << self.width) - 1)

    def is_set(self, word: int) -> bool:
        return bool(self.get(word))


@dataclass(frozen=True, slots=True)
class Header:
    machine: int
    flags: int
    shoff: int
    shentsize: int
    shnum: int
    shstrndx: int
    os_abi: int  # e_ident[EI_OSABI]
    abi_version: int  # e_ident[EI_ABIVERSION]
    version: int  # e_version
    phoff: int
    phentsize: int
    phnum: int


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int
    flags: int
    info: int

    @property
    def nobits(self) -> bool:
        return self.type == SHT_NOBITS


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    type: int  # STT_*
    shndx: int
    value: int
    size: int
    other: int  # st_other, whole: visibility and any processor-specific bits


@dataclass(frozen=True, slots=True)
class Note:
    owner: bytes  # the name, without its terminating NULs
    type: int
    desc: bytes


def header(data: bytes) -> Header:
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ParseError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ParseError("not a 64-bit little-endian ELF")
    _, machine, version, _, phoff, shoff, flags, _, phentsize, phnum, shentsize, shnum, shstrndx = _EHDR.unpack_from(
        data, 16
    )
    return Header(
        machine,
        flags,
        shoff,
        shentsize,
        shnum,
        shstrndx,
        data[EI_OSABI],
        data[EI_ABIVERSION],
        version,
        phoff,
        phentsize,
        phnum,
    )


def sections(data: bytes, hdr: Header) -> list[Section]:
    """Every section header, named from the section-name table; a section whose bytes lie past the end
    of the file is refused."""
    if hdr.shoff == 0:
        return []
    if hdr.shentsize != _SHDR.size:
        raise ParseError(f"section header size {hdr.shentsize} is not {_SHDR.size}")
    if hdr.shoff + _SHDR.size > len(data):
        raise ParseError("section headers run past the end of the file")
    first = _SHDR.unpack_from(data, hdr.shoff)
    # extended numbering: the count is section 0's sh_size, the name table's index its sh_link
    count = hdr.shnum or first[5]
    names_index = first[6] if hdr.shstrndx == SHN_XINDEX else hdr.shstrndx
    if count > MAX_SECTIONS:
        raise ParseError(f"implausible section count {count}")
    if hdr.shoff + count * _SHDR.size > len(data):
        raise ParseError("section headers run past the end of the file")
    raw = list(_SHDR.iter_unpack(data[hdr.shoff : hdr.shoff + count * _SHDR.size]))
    for _, kind, _, _, offset, size, *_ in raw:
        if kind not in (SHT_NULL, SHT_NOBITS) and offset + size > len(data):
            raise ParseError("a section extends past the end of the file")
    names = b""
    if names_index >= count:
        raise ParseError(f"section-name table {names_index} does not exist")
    if names_index:
        _, _, _, _, offset, size, *_ = raw[names_index]
        names = data[offset : offset + size]
    return [
        Section(_string(names, name), kind, addr, offset, size, link, entsize, flags, info)
        for name, kind, flags, addr, offset, size, link, info, _, entsize in raw
    ]


def section_data(data: bytes, sec: Section) -> bytes:
    """A section's bytes (none for SHT_NOBITS); `sections` has checked that they lie inside the file."""
    return b"" if sec.nobits else data[sec.offset : sec.offset + sec.size]


def symbols(data: bytes, table: Section, all_sections: list[Section]) -> list[Symbol]:
    """The symbols of a SHT_SYMTAB/SHT_DYNSYM section, named from its linked string table."""
    if table.entsize != _SYM.size:
        raise ParseError(f"symbol entry size {table.entsize} is not {_SYM.size}")
    if table.size % _SYM.size:
        raise ParseError("symbol table size is not a multiple of its entry size")
    if not 0 <= table.link < len(all_sections) or all_sections[table.link].type != SHT_STRTAB:
        raise ParseError("symbol table without a string table")
    strings = all_sections[table.link]
    names = data[strings.offset : strings.offset + strings.size]
    return [
        Symbol(_string(names, name), info & 0xF, shndx, value, size, other)
        for name, info, other, shndx, value, size in _SYM.iter_unpack(data[table.offset : table.offset + table.size])
    ]


def notes(blob: bytes) -> tuple[list[Note], int]:
    """The records of a SHT_NOTE section body, and the offset where reading stopped: the end of the body, or
    the first record that does not fit in it (a tail shorter than a note header, or one whose descriptor runs
    past the body). Whether such a stop is an error is the caller's to say."""
    out: list[Note] = []
    pos = 0
    while pos + _NHDR.size <= len(blob):
        namesz, descsz, note_type = _NHDR.unpack_from(blob, pos)
        name_start = pos + _NHDR.size
        desc_start = name_start + _align4(namesz)
        if desc_start + descsz > len(blob):
            return out, pos
        out.append(
            Note(
                blob[name_start : name_start + namesz].rstrip(b"\0"), note_type, blob[desc_start : desc_start + descsz]
            )
        )
        pos = desc_start + _align4(descsz)
    return out, pos


def _align4(value: int) -> int:
    return (value + 3) & ~3


def _string(table: bytes, offset: int) -> str:
    """The NUL-terminated name at OFFSET; a name outside its table is empty (as pyelftools read it): the
    section or symbol is then not found by name."""
    end = table.find(b"\0", offset)
    if offset >= len(table) or end < 0:
        return ""
    return table[offset:end].decode("utf-8", "replace")
