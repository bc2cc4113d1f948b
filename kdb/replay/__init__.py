"""Replay: what another Triton release does to a snapshot's kernels, before the upgrade, offline.

toolchains (the interpreters kdb compiles with) -> plan (target and options per kernel) -> run (compile every
stored TTIR in the toolchain's own process, `in_toolchain.py`, and ingest the result) -> bisect (the first
release where each figure changed) and why (which stage carries a change: the LLIR or PTX swap)."""
