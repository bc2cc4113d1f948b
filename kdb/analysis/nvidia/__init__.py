"""NVIDIA: cubins, PTX, occupancy tables, nvdisasm/cuobjdump, and the per-folder analysis.

May import: kdb.errors, kdb.triton, kdb.analysis.model.
"""
