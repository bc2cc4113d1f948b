"""Triton's own artifacts, as text and JSON: the kernel JSON parser, TTIR/TTGIR text facts, the cross-release
kernel identity, and stage-text normalisation and digests. Pure functions; no I/O.

May import: kdb.errors.
"""
