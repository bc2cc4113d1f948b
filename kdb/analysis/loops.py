"""Loops from a kernel's machine code: basic blocks, the control-flow graph, dominators and natural loops, and
each instruction's loop depth. Pure: a sequence of steps in, depths out; the per-ISA parsers (AMD asm,
NVIDIA SASS and PTX) say what each instruction does to control flow.

What counts as a loop is what LLVM's LoopInfo counts (and what its asm printer annotates as
`; =>This Inner Loop Header: Depth=N` / `; in Loop: Header=… Depth=N`): natural loops, one per header
(back edges to the same header make one loop), nested by containment. A cycle entered at two places
(irreducible) is no natural loop: LoopInfo ignores it, and so does kdb, which counts such cycles apart.

Cost weighting: an instruction at loop depth d weighs LOOP_WEIGHT**d. LOOP_WEIGHT = 32 is what LLVM itself
assumes of a loop it knows nothing about: its static branch-probability heuristic gives a back edge 124
against 4 for the exit (BranchProbabilityInfo.cpp, LBH_TAKEN_WEIGHT / LBH_NONTAKEN_WEIGHT), i.e. 1/(4/128)
= 32 iterations expected per entry.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LOOP_WEIGHT = 32


class Flow(enum.Enum):
    NEXT = "next"  # falls through to the next instruction
    BRANCH = "branch"  # conditional: to its target, or falls through
    JUMP = "jump"  # unconditional: to its target only
    EXIT = "exit"  # ends the thread (s_endpgm, EXIT, ret): no successor
    INDIRECT = "indirect"  # to a place the code does not name (computed jump): successors unknown


@dataclass(frozen=True)
class Step:
    """One instruction as control flow sees it."""

    flow: Flow = Flow.NEXT
    target: str | None = None  # the label (or address text) a BRANCH/JUMP goes to


NEXT = Step()


@dataclass(frozen=True)
class LoopNest:
    depths: tuple[int, ...]  # loop depth of each instruction, in order (0: in no loop)
    blocks: int
    loops: int  # natural loops (one per header)
    max_depth: int
    irreducible: int  # cycles entered other than through a header that dominates them (no natural loop)
    unresolved: int  # branches whose target is no label of the code, and indirect jumps (successors unknown)


def weight(depth: int) -> int:
    return int(LOOP_WEIGHT**depth)


def loop_nest(steps: Sequence[Step], labels: Mapping[str, int]) -> LoopNest:
    """Depth of every instruction. `labels` maps a label to the index of the instruction it precedes (an index
    equal to len(steps) is the end of the code)."""
    n = len(steps)
    if n == 0:
        return LoopNest((), 0, 0, 0, 0, 0)
    starts = _leaders(steps, labels)
    block_of = [0] * n
    for b, start in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else n
        for i in range(start, end):
            block_of[i] = b
    succs, unresolved = _successors(steps, labels, starts, block_of)
    preds: list[list[int]] = [[] for _ in starts]
    for b, out in enumerate(succs):
        for s in out:
            preds[s].append(b)
    order = _reverse_postorder(succs)
    idom = _dominators(order, preds)
    headers: dict[int, set[int]] = {}  # header -> body
    irreducible = 0
    position = {b: i for i, b in enumerate(order)}
    for b in order:
        for s in succs[b]:
            if position[s] > position[b]:
                continue  # a forward edge in reverse postorder
            if _dominates(idom, s, b):
                headers.setdefault(s, {s}).update(_reaching(b, s, preds, idom))
            else:
                irreducible += 1
    depth_of_block = [0] * len(starts)
    for body in headers.values():
        for b in body:
            depth_of_block[b] += 1
    depths = tuple(depth_of_block[block_of[i]] for i in range(n))
    return LoopNest(
        depths=depths,
        blocks=len(starts),
        loops=len(headers),
        max_depth=max(depth_of_block, default=0),
        irreducible=irreducible,
        unresolved=unresolved,
    )


def _leaders(steps: Sequence[Step], labels: Mapping[str, int]) -> list[int]:
    """First instruction of every basic block. A block ends at a label or after its terminator; a conditional
    branch and the unconditional jump right after it end one block together, as they are the terminator pair of
    one LLVM machine block (an exit after a conditional branch starts a block of its own)."""
    n = len(steps)
    leaders = {0}
    leaders.update(i for i in labels.values() if 0 <= i < n)
    for i in range(n - 1):
        flow = steps[i].flow
        if flow is not Flow.NEXT and not (flow is Flow.BRANCH and steps[i + 1].flow is Flow.JUMP):
            leaders.add(i + 1)
    return sorted(leaders)


def _successors(
    steps: Sequence[Step], labels: Mapping[str, int], starts: list[int], block_of: list[int]
) -> tuple[list[list[int]], int]:
    n = len(steps)
    succs: list[list[int]] = []
    unresolved = 0
    for b, start in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else n
        out: list[int] = []
        falls = True
        for i in range(start, end):
            step = steps[i]
            if step.flow is Flow.NEXT:
                continue
            if step.flow in (Flow.BRANCH, Flow.JUMP):
                where = labels.get(step.target or "")
                if where is None:
                    unresolved += 1
                elif where < n:
                    out.append(block_of[where])
            elif step.flow is Flow.INDIRECT:
                unresolved += 1
            falls = step.flow is Flow.BRANCH
        if falls and end < n:
            out.append(block_of[end])
        succs.append(list(dict.fromkeys(out)))
    return succs, unresolved


def _reverse_postorder(succs: list[list[int]]) -> list[int]:
    seen = [False] * len(succs)
    post: list[int] = []
    stack: list[tuple[int, int]] = [(0, 0)]
    seen[0] = True
    while stack:  # iterative DFS: real kernels have thousands of blocks
        b, i = stack[-1]
        if i < len(succs[b]):
            stack[-1] = (b, i + 1)
            s = succs[b][i]
            if not seen[s]:
                seen[s] = True
                stack.append((s, 0))
        else:
            stack.pop()
            post.append(b)
    return post[::-1]


def _dominators(order: list[int], preds: list[list[int]]) -> dict[int, int]:
    """Immediate dominators of the blocks reachable from the entry (Cooper, Harvey & Kennedy, "A Simple, Fast
    Dominance Algorithm")."""
    position = {b: i for i, b in enumerate(order)}
    idom = {order[0]: order[0]}
    changed = True
    while changed:
        changed = False
        for b in order[1:]:
            done = [p for p in preds[b] if p in idom]
            new = done[0]
            for p in done[1:]:
                new = _intersect(idom, position, p, new)
            if idom.get(b) != new:
                idom[b] = new
                changed = True
    return idom


def _intersect(idom: dict[int, int], position: dict[int, int], a: int, b: int) -> int:
    while a != b:
        while position[a] > position[b]:
            a = idom[a]
        while position[b] > position[a]:
            b = idom[b]
    return a


def _dominates(idom: dict[int, int], a: int, b: int) -> bool:
    while True:
        if a == b:
            return True
        parent = idom[b]
        if parent == b:
            return False
        b = parent


def _reaching(latch: int, header: int, preds: list[list[int]], idom: dict[int, int]) -> set[int]:
    """The natural loop of back edge latch->header: blocks that reach the latch without passing the header."""
    body = {header}
    stack = [latch]
    while stack:
        b = stack.pop()
        if b in body or b not in idom:
            continue
        body.add(b)
        stack.extend(preds[b])
    return body
