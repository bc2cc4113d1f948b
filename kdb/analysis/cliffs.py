"""How far a kernel sits from an occupancy cliff, in registers (issue 28), for either vendor.

Given the occupancy a kernel would have with ``r`` registers per thread (AMD: VGPRs per lane, NVIDIA:
registers per thread), everything else held as compiled:

- ``registers_to_cliff``: the largest ``k >= 0`` such that ``registers + k`` registers give the same
  occupancy, with ``registers + k`` at most the architecture's per-thread maximum (a kernel at the maximum
  has 0; one whose occupancy never drops up to the maximum has ``maximum - registers``);
- ``registers_to_gain``: the smallest ``k > 0`` such that ``registers - k`` registers (at least one) give a
  higher occupancy; None when no register count would (another resource limits, or already at the maximum).

Occupancy never rises with more registers (register files are allocated in granules, and every other
resource is held), so both are found by bisection: a handful of occupancy evaluations per kernel.
"""

from __future__ import annotations

from collections.abc import Callable


def register_cliffs(occupancy_at: Callable[[int], int], registers: int, most: int) -> tuple[int, int | None]:
    """(registers_to_cliff, registers_to_gain) of a kernel using REGISTERS, whose occupancy with r registers
    is ``occupancy_at(r)`` (non-increasing in r); MOST: the per-thread register maximum. Definitions in the
    module docstring."""
    current = occupancy_at(registers)
    # registers_to_cliff: the last count in [registers, most] that keeps `current`
    top = max(most, registers)
    same, drops = registers, top  # occupancy_at(same) == current; occupancy_at(drops) < current (unless top)
    if occupancy_at(top) == current:
        same = top
    while drops - same > 1:
        mid = (same + drops) // 2
        if occupancy_at(mid) == current:
            same = mid
        else:
            drops = mid
    to_cliff = same - registers
    # registers_to_gain: the last count in [1, registers - 1] above `current`
    if registers <= 1 or occupancy_at(1) <= current:
        return to_cliff, None
    higher, not_higher = 1, registers  # occupancy_at(higher) > current; occupancy_at(not_higher) == current
    while not_higher - higher > 1:
        mid = (higher + not_higher) // 2
        if occupancy_at(mid) > current:
            higher = mid
        else:
            not_higher = mid
    return to_cliff, registers - higher
