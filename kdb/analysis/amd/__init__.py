"""AMD: HSACO code objects, amdgcn asm listings, occupancy tables, llvm-objdump, and the per-folder analysis.

May import: kdb.errors, kdb.triton, kdb.analysis.model.
"""
