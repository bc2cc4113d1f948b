"""Analysis of one kernel folder's bytes into catalog rows (kdb.analysis.folder), with one subpackage per
GPU vendor behind a small registry (kdb.analysis.registry): kdb.analysis.amd (code object, asm listing,
occupancy tables, llvm-objdump) and kdb.analysis.nvidia (cubin, PTX, occupancy tables, nvdisasm/cuobjdump).
Parsers are pure functions of bytes that raise only kdb.errors.ParseError; only amd.disasm and
nvidia.tools run external programs. Code objects and cubins alike are read through kdb.analysis.elf64 (three
fixed ELF64 records with struct; pyelftools, ~5 ms a file, is left to the tests as an oracle).

May import: kdb.errors, kdb.triton. Never the store, the catalog, ingest or diff.
"""
