"""pyelftools, an ELF reader independent of kdb's own (kdb/analysis/elf64.py), as the oracle for what it reads."""

from __future__ import annotations

import io

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from kdb.analysis import elf64

VISIBILITY = {0: "STV_DEFAULT", 1: "STV_INTERNAL", 2: "STV_HIDDEN", 3: "STV_PROTECTED"}
SYMBOL_TYPES = {elf64.STT_FUNC: "STT_FUNC", elf64.STT_OBJECT: "STT_OBJECT"}


def assert_elf64_reads_as_pyelftools(data: bytes, where: str) -> None:
    """The header fields, section headers and symbols elf64 reads from DATA are pyelftools' (pyelftools names
    some numbers: EV_CURRENT for e_version 1, STT_*, STV_*; those are compared by name)."""
    hdr = elf64.header(data)
    elf = ELFFile(io.BytesIO(data))
    theirs_hdr = elf.header
    version = {0: "EV_NONE", 1: "EV_CURRENT"}.get(hdr.version, hdr.version)
    assert (hdr.flags, hdr.abi_version, version, hdr.shoff, hdr.shnum, hdr.phoff, hdr.phnum) == (
        theirs_hdr["e_flags"],
        theirs_hdr["e_ident"]["EI_ABIVERSION"],
        theirs_hdr["e_version"],
        theirs_hdr["e_shoff"],
        theirs_hdr["e_shnum"],
        theirs_hdr["e_phoff"],
        theirs_hdr["e_phnum"],
    ), where
    ours = elf64.sections(data, hdr)
    theirs = list(elf.iter_sections())
    assert [(s.name, s.offset, s.size, s.addr, s.link, s.entsize, s.flags, s.info) for s in ours] == [
        (t.name, t["sh_offset"], t["sh_size"], t["sh_addr"], t["sh_link"], t["sh_entsize"], t["sh_flags"], t["sh_info"])
        for t in theirs
    ], where
    assert [elf64.section_data(data, s) for s in ours if not s.nobits] == [
        t.data() for t in theirs if t["sh_type"] != "SHT_NOBITS"
    ], where
    tables = [i for i, t in enumerate(theirs) if isinstance(t, SymbolTableSection)]
    assert tables, where
    for i in tables:
        table = theirs[i]
        assert isinstance(table, SymbolTableSection)
        expected = [
            (
                sym.name,
                sym["st_value"],
                sym["st_size"],
                sym["st_shndx"],
                sym["st_other"]["visibility"],
                sym["st_info"]["type"],
            )
            for sym in table.iter_symbols()
        ]
        got = [
            (sym.name, sym.value, sym.size, sym.shndx, VISIBILITY[sym.other & 3], SYMBOL_TYPES.get(sym.type))
            for sym in elf64.symbols(data, ours[i], ours)
        ]
        # pyelftools names SHN_UNDEF/SHN_ABS/SHN_COMMON: compared where it gives a number
        assert [g[:3] + g[4:5] for g in got] == [e[:3] + e[4:5] for e in expected], where
        assert [g[3] for g, e in zip(got, expected, strict=True) if isinstance(e[3], int)] == [
            e[3] for e in expected if isinstance(e[3], int)
        ], where
        assert [g[5] for g in got if g[5]] == [e[5] for e in expected if e[5] in SYMBOL_TYPES.values()], where
