"""Loops in NVIDIA kernels (issue 28), checked on every CUDA kernel of the corpus against NVIDIA's and LLVM's
own view of the control flow.

Oracles, independent of kdb's loop finder (kdb/analysis/loops.py builds its own control-flow graph from the
branches and labels kdb's parsers read, and never reads comments or nvdisasm's graph):
- PTX: LLVM's NVPTX back end annotates every machine block of the `.ptx` it wrote with the depth its LoopInfo
  gives it (`$L__BB0_3: // =>This Inner Loop Header: Depth=1`, `// %bb.5: // in Loop: Header=BB0_3 Depth=1`,
  the comment sometimes on a line of its own after the block's). Parsed here by a reader of its own. Inline asm
  is one instruction to LLVM, but Triton's inline asm holds loops of its own (`waitLoop: mbarrier.try_wait…;
  @!complete bra.uni waitLoop;`): those add one level, from the label to the branch back to it (read here
  too). Triton 2.3 and 3.1 write PTX without these comments: the oracle cannot speak for them (asserted, so
  that a change is noticed), and the SASS oracle covers their kernels.
- SASS: `nvdisasm -bbcfg -poff` of the kernel's cubin prints nvdisasm's control-flow graph (basic blocks with
  their instructions' offsets, and the edges between them) as a DOT graph. Its natural loops are computed
  here (dominators by iterative data flow on bit sets, then the body of every back edge), and each
  instruction's depth compared with kdb's, which reads the raw code of many kernels in one `nvdisasm -b`.
  `cuobjdump -sass` counts the local-memory instructions (LDL/STL).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import oracle_cache
import pytest
from conftest import archive_of, load_manifest
from helpers import kdb
from test_nvidia_analysis import (
    CUDA_SNAPSHOTS,
    TOOL_DIRS,
    Kernel,
    cuobjdump_sass,
    needs_corpus,
    needs_tools,
    per_snapshot,
    sampled,
    snapshot_kernels,
)

from kdb.analysis.folder import analyze_folder
from kdb.analysis.loops import LOOP_WEIGHT
from kdb.analysis.model import AnalysisOptions, FolderFile
from kdb.analysis.nvidia import tools as nvtools
from kdb.analysis.nvidia.cubin import parse_cubin
from kdb.analysis.nvidia.ptx import parse_ptx
from kdb.ingest.walker import classify as classify_file

__all__ = ["snapshot_kernels"]  # the fixture, used by name


def _release(snapshot: str) -> tuple[int, int]:
    major, minor = load_manifest()["snapshots"][snapshot]["triton_version"].split(".")[:2]
    return int(major), int(minor)


def annotated(snapshot: str) -> bool:
    """Triton 3.2 and later keep LLVM's comments in the PTX."""
    return _release(snapshot) >= (3, 2)


ANNOTATED = [s for s in CUDA_SNAPSHOTS if annotated(s)]
per_annotated = pytest.mark.parametrize("snapshot", ANNOTATED or ["<no corpus>"])
# The snapshot ingested with SASS for the catalog check (one of conftest's FAST_SNAPSHOTS).
CATALOG_SNAPSHOT = "t3.4.0-sm90"


# ---- LLVM's annotation of the PTX ----------------------------------------------------------------------------

# `	// .globl	matmul_kernel           // -- Begin function matmul_kernel`
BEGIN_RE = re.compile(r"// -- Begin function (\S+)")
# A machine block starts at its label (`$L__BB0_3:`) or, when nothing branches to it, at `// %bb.5:`.
BLOCK_RE = re.compile(r"^(\$L__BB\d+_\d+:|// %bb\.\d+:)")
DEPTH_RE = re.compile(r"(?:Loop Header: Depth=|in Loop: Header=\S+ Depth=)(\d+)")
# `waitLoop:` (a label at the start of a statement; `shared::cta` has two colons)
PTX_LABEL_RE = re.compile(r"^([$\w]+):(?!:)")
# `@!complete bra.uni waitLoop` -> the opcode and its first operand
PTX_INSTR_RE = re.compile(r"^(?:@!?%?[$\w]+\s+)?([a-z][\w.:]*)\s*(\S*)")


def llvm_ptx_depths(text: str) -> dict[str, list[tuple[str, int]]]:
    """Each function's instructions, in order, as (opcode, depth): the depth LLVM annotated on its block, plus
    one inside each loop of an inline asm block (a label and a later branch back to it, in the same block)."""
    out: dict[str, list[tuple[str, int]]] = {}
    reader: _PtxReader | None = None
    name: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if match := BEGIN_RE.search(line):
            name, reader = match.group(1), None  # the body starts at the `{` after the parameters
        elif reader is None:
            if name is not None and line.startswith("{"):
                reader = _PtxReader()
        elif "// -- End function" in line:
            assert name is not None
            out[name] = reader.finish()
            reader = name = None
        else:
            reader.line(line)
    return out


class _PtxReader:
    """One function body, line by line."""

    def __init__(self) -> None:
        self.instrs: list[tuple[str, int]] = []
        self.depth, self.block_open = 0, True
        self.asm: dict[str, int] | None = None  # labels of the inline asm block being read -> instruction index
        self.asm_loops: list[tuple[int, int]] = []  # (first, last) instruction of every inline asm loop

    def line(self, line: str) -> None:
        if line in ("// begin inline asm", "// end inline asm"):
            self.asm = {} if line == "// begin inline asm" else None
        elif self.asm is None and BLOCK_RE.match(line):  # a new machine block: its depth is here or just after
            found = DEPTH_RE.search(line)
            self.depth, self.block_open = (int(found.group(1)) if found else 0), True
        elif line.startswith("//"):
            if self.block_open and (found := DEPTH_RE.search(line)):
                self.depth = int(found.group(1))
        else:
            for statement in line.split("//", 1)[0].split(";"):
                self.statement(statement.strip().strip("{}").strip())

    def statement(self, statement: str) -> None:
        while match := PTX_LABEL_RE.match(statement):
            if self.asm is not None:
                self.asm[match.group(1)] = len(self.instrs)
            statement = statement[match.end() :].strip()
        if not statement or statement.startswith("."):
            return
        instr = PTX_INSTR_RE.match(statement)
        assert instr is not None, statement
        opcode, operand = instr.groups()
        if self.asm is not None and opcode.split(".")[0] == "bra" and operand in self.asm:
            self.asm_loops.append((self.asm[operand], len(self.instrs)))  # a branch back: the loop lies between
        self.instrs.append((opcode, self.depth))
        self.block_open = False

    def finish(self) -> list[tuple[str, int]]:
        out = list(self.instrs)
        for first, last in self.asm_loops:
            for i in range(first, last + 1):
                out[i] = (out[i][0], out[i][1] + 1)
        return out


@needs_corpus
@per_snapshot
def test_ptx_loop_depth_of_every_instruction_equals_llvms_annotation(snapshot: str, snapshot_kernels) -> None:
    checked = instructions = in_loops = with_loops = 0
    for kernel in sampled(snapshot, snapshot_kernels(snapshot)):
        text = kernel.ptx
        listing = parse_ptx(text)
        for fn in listing.functions:  # kdb's own figures stand on every function's branches
            assert fn.loops.unresolved == 0 and fn.loops.irreducible == 0, kernel.folder.name
            assert len(fn.loops.depths) == fn.total
        has_comments = "// -- Begin function" in text
        assert has_comments == annotated(snapshot), kernel.folder.name
        if not has_comments:
            continue  # no annotation to compare with (Triton 2.3/3.1): the SASS test covers these kernels
        oracle = llvm_ptx_depths(text)
        assert sorted(oracle) == sorted(f.name for f in listing.functions), kernel.folder.name
        for fn in listing.functions:
            want = oracle[fn.name]
            assert list(fn.loops.depths) == [d for _, d in want], (kernel.folder.name, fn.name)
            assert fn.loops.max_depth == max((d for _, d in want), default=0)
            mix = Counter((d, op) for op, d in want if d)
            assert Counter({(d, op): n for (d, op, _), n in fn.loop_mix.items()}) == mix, kernel.folder.name
            checked += 1
            instructions += len(want)
            in_loops += sum(1 for _, d in want if d)
            with_loops += "Loop Header" in text
    if annotated(snapshot):
        assert checked > 0 and in_loops > 0 and with_loops > 0, (checked, in_loops, with_loops)


@needs_corpus
@per_annotated
def test_recorded_ptx_loop_columns_and_rows(snapshot: str, snapshot_kernels) -> None:
    """What an ingest without SASS records (the PTX is the instr_source): the kernel_analysis columns and the
    instr_mix_loop_counts rows, against LLVM's annotation (the corpus PTX has no ld.local/st.local: ptxas
    spills, below it; the SASS test checks local memory in loops)."""
    for kernel in sampled(snapshot, snapshot_kernels(snapshot)):
        json_file, files = _folder(kernel)
        out = analyze_folder("key", "digest", json_file, files, AnalysisOptions(sass=False))
        row = out.rows["kernel_analysis"][0]
        assert row["instr_source"] == "ptx"
        want = llvm_ptx_depths(kernel.ptx)[kernel.symbol]
        expected = Counter((d, op) for op, d in want if d)
        loop_rows = out.rows.get("instr_mix_loop_counts", [])
        assert all(r["source"] == "ptx" and r["loop_depth"] >= 1 for r in loop_rows)
        assert Counter({(r["loop_depth"], r["mnemonic"]): r["count"] for r in loop_rows}) == expected
        assert row["max_loop_depth"] == max((d for _, d in want), default=0), kernel.folder.name
        local = [d for op, d in want if op.startswith(("ld.local", "st.local"))]
        by_depth = json.loads(row["scratch_by_loop_depth"])
        assert by_depth == {str(d): n for d, n in sorted(Counter(local).items())}, kernel.folder.name
        assert row["scratch_instr_in_loops"] == sum(1 for d in local if d)
        assert row["loop_weighted_scratch"] == sum(LOOP_WEIGHT**d for d in local)


def _folder(kernel: Kernel) -> tuple[FolderFile, list[FolderFile]]:
    """The kernel folder as ingest hands it to analysis."""
    files = [
        FolderFile(f"key/{path.name}", classify_file(path.name), path.read_bytes())
        for path in sorted(p for p in kernel.folder.iterdir() if p.is_file())
    ]
    return next(f for f in files if f.rel == f"key/{kernel.name}.json"), files


# ---- nvdisasm's control-flow graph -----------------------------------------------------------------------------

# `"BB3"` / `".L_x_21"` / `"matmul_kernel"`: a node's name, on a line of its own before its label
NODE_RE = re.compile(r'^"(.+)"$')
NODE_LABEL_RE = re.compile(r'^\[label="(.*)"\]$')
# `\l0130:\ \ \ UMOV\ UR4,\ 0x4\ ;` / `|<exit0>0180:\ \ \ @!P0\ BRA\ ...` (with -poff, each instruction's offset)
DOT_INSTR_RE = re.compile(r"(?:\\l|<entry>|<exit\d+>)([0-9a-f]+):\\ \\ \\ (?:@!?U?P[T\d]+\\ )?([A-Z][A-Za-z0-9_.]*)")
# `".L_x_3":exit0:e -> ".L_x_3":entry:n [style=solid];`
EDGE_RE = re.compile(r'^"(.+?)"(?::\w+)*\s+->\s+"(.+?)"')


def bbcfg(path: Path) -> str:
    """`nvdisasm -bbcfg -poff` of the first tool of TOOL_DIRS that reads the cubin."""
    errors = []
    for d in TOOL_DIRS:
        proc = oracle_cache.run([str(d / "nvdisasm"), "-bbcfg", "-poff", str(path)], timeout=300)
        if proc.returncode == 0:
            return proc.stdout
        errors.append(f"{d}: {proc.stderr.strip()}")
    raise AssertionError(f"no nvdisasm draws the graph of {path}: {errors}")


def cfg_depths(dot: str, entry: str) -> dict[int, tuple[int, str]]:
    """Offset -> (loop depth, opcode) of every instruction of the graph: natural loops of the blocks reachable
    from `entry` (a block nothing reaches is in no loop)."""
    blocks: dict[str, list[tuple[int, str]]] = {}
    succs: dict[str, list[str]] = {}
    node = None
    for line in dot.splitlines():
        if match := NODE_RE.match(line):
            node = match.group(1)
        elif (match := NODE_LABEL_RE.match(line)) and node is not None:
            blocks[node] = [(int(at, 16), op) for at, op in DOT_INSTR_RE.findall(match.group(1))]
            succs.setdefault(node, [])
        elif match := EDGE_RE.match(line):
            succs.setdefault(match.group(1), []).append(match.group(2))
    assert entry in blocks, entry
    depth = natural_loop_depths(succs, entry)
    return {at: (depth[b], op) for b, instrs in blocks.items() for at, op in instrs}


def natural_loop_depths(succs: dict[str, list[str]], entry: str) -> Counter[str]:
    """Block -> how many natural loops hold it: dominators by iterative data flow (bit sets, in reverse
    postorder), a back edge wherever a block goes to one of its dominators, its loop what reaches the block
    without passing the header; back edges to one header make one loop."""
    preds: dict[str, list[str]] = {b: [] for b in succs}
    for b, out in succs.items():
        for s in out:
            preds[s].append(b)
    post: list[str] = []
    seen = {entry}
    stack = [(entry, iter(succs[entry]))]
    while stack:
        b, it = stack[-1]
        for s in it:
            if s not in seen:
                seen.add(s)
                stack.append((s, iter(succs[s])))
                break
        else:
            stack.pop()
            post.append(b)
    order = post[::-1]
    bit = {b: 1 << i for i, b in enumerate(order)}
    everything = (1 << len(order)) - 1
    dom = dict.fromkeys(order, everything)
    dom[entry] = bit[entry]
    changed = True
    while changed:
        changed = False
        for b in order[1:]:
            new = everything
            for p in preds[b]:
                new &= dom.get(p, everything)
            new |= bit[b]
            if new != dom[b]:
                dom[b], changed = new, True
    bodies: dict[str, set[str]] = {}
    for latch, header in ((b, h) for b in order for h in succs[b] if dom[b] & bit[h]):
        body = bodies.setdefault(header, {header})
        todo = [latch]
        while todo:
            x = todo.pop()
            if x not in body and x in dom:
                body.add(x)
                todo.extend(preds[x])
    return Counter(b for body in bodies.values() for b in body)


LOCAL_SASS = ("LDL", "STL")


@needs_corpus
@needs_tools
@per_snapshot
def test_sass_loop_depth_of_every_instruction_equals_nvdisasms_graph(snapshot: str, snapshot_kernels) -> None:
    """kdb's SASS loop depths (one `nvdisasm -b` of every kernel's raw code together) against the natural loops
    of `nvdisasm -bbcfg` on each cubin, instruction by instruction; local-memory instructions against
    `cuobjdump -sass`."""
    kernels = sampled(snapshot, snapshot_kernels(snapshot), by_local_memory=True)
    cubins = [parse_cubin(k.cubin) for k in kernels]
    codes = [next(x for x in c.kernels if x.name == k.symbol).code for c, k in zip(cubins, kernels, strict=True)]
    ours = nvtools.sass_of_code([(c.raw_arch, code) for c, code in zip(cubins, codes, strict=True)])
    with ThreadPoolExecutor(max_workers=2) as pool:
        graphs = list(pool.map(lambda k: cfg_depths(bbcfg(k.cubin_path), k.symbol), kernels))
        theirs = list(pool.map(lambda k: cuobjdump_sass(k.cubin_path), kernels))
    instructions = in_loops = with_local = local_in_loops = 0
    for kernel, cubin, code, result, graph, counts in zip(kernels, cubins, codes, ours, graphs, theirs, strict=True):
        name = kernel.folder.name
        assert cubin.arch >= 70 and len(code) % 16 == 0  # 16-byte instructions: instruction i sits at 16*i
        assert result.counts is not None and result.loops is not None, (name, result.reason)
        nest = result.loops
        assert nest.unresolved == 0 and nest.irreducible == 0, name
        assert len(nest.depths) == len(code) // 16 == sum(result.counts.values()), name
        # what the graph leaves out is the padding after the code (`BRA` to itself, NOPs): in no loop
        last = max(graph)
        assert all(16 * i > last for i in range(len(nest.depths)) if 16 * i not in graph), name
        want = [graph.get(16 * i, (0, ""))[0] for i in range(len(nest.depths))]
        assert list(nest.depths) == want, name
        assert nest.max_depth == max(want)
        mix = Counter((d, op) for d, op in graph.values() if d)
        assert Counter({(d, op): n for (d, op, _), n in result.loop_mix.items()}) == mix, name
        assert all(grp == nvtools.sass_group(op) for (_, op, grp) in result.loop_mix)
        # local memory: kdb's group against cuobjdump's opcodes, and inside loops against the graph
        local = sum(n for op, n in counts.items() if op.split(".")[0] in LOCAL_SASS)
        assert sum(n for op, n in result.counts.items() if nvtools.sass_group(op) == "local") == local, name
        inside = sum(1 for d, op in graph.values() if d and op.split(".")[0] in LOCAL_SASS)
        assert sum(n for (_, _, grp), n in result.loop_mix.items() if grp == "local") == inside, name
        instructions += len(want)
        in_loops += sum(1 for d in want if d)
        with_local += bool(local)
        local_in_loops += inside
    # every snapshot has loops, and spilling kernels with local memory inside them
    assert instructions > 0 and in_loops > 0 and with_local > 0 and local_in_loops > 0


# ---- the catalog ------------------------------------------------------------------------------------------------


@needs_corpus
@needs_tools
def test_catalog_loop_columns_from_the_sass(capsys, cached_home, snapshot_kernels) -> None:
    """An ingest with SASS: every kernel's loop facts come from its SASS (the instr_source), the PTX rows give
    way, and instr_mix_by_loop splits exactly the instr_mix of each kernel."""
    home = cached_home([(CATALOG_SNAPSHOT, archive_of(CATALOG_SNAPSHOT))])

    def sql(query: str) -> list[dict]:
        result = kdb(capsys, home, "sql", query, "--format", "json")
        assert result.code == 0, result.err
        return result.json()

    rows = sql(
        "SELECT cache_key, name, instr_source, max_loop_depth, scratch_instr_in_loops, loop_weighted_scratch, "
        f"scratch_by_loop_depth FROM kernels WHERE tag = '{CATALOG_SNAPSHOT}' ORDER BY cache_key"
    )
    assert len(rows) == load_manifest()["snapshots"][CATALOG_SNAPSHOT]["kernel_count"]
    by_folder = {k.folder.name: k for k in snapshot_kernels(CATALOG_SNAPSHOT)}
    for row in rows:
        assert row["instr_source"] == "sass" and row["max_loop_depth"] is not None, row["cache_key"]
        kernel = by_folder[row["cache_key"]]
        graph = cfg_depths(bbcfg(kernel.cubin_path), kernel.symbol)
        assert row["max_loop_depth"] == max(d for d, _ in graph.values()), row["cache_key"]
        local = [d for d, op in graph.values() if op.split(".")[0] in LOCAL_SASS]
        by_depth = {int(d): n for d, n in json.loads(row["scratch_by_loop_depth"]).items()}
        assert by_depth == dict(Counter(local)), row["cache_key"]
        assert row["scratch_instr_in_loops"] == sum(1 for d in local if d)
        assert row["loop_weighted_scratch"] == sum(LOOP_WEIGHT**d for d in local)
    assert any(r["max_loop_depth"] > 0 for r in rows)
    sources = sql(
        "SELECT DISTINCT l.source FROM instr_mix_loop_counts l JOIN kernels k USING (folder_digest) "
        f"WHERE k.tag = '{CATALOG_SNAPSHOT}'"
    )
    assert sources == [{"source": "sass"}]  # the PTX loop rows gave way to the SASS ones
    split = sql(
        "SELECT cache_key, loop_depth, mnemonic, sum(count) AS n FROM instr_mix_by_loop "
        f"WHERE tag = '{CATALOG_SNAPSHOT}' GROUP BY ALL"
    )
    whole = sql(
        f"SELECT cache_key, mnemonic, sum(count) AS n FROM instr_mix WHERE tag = '{CATALOG_SNAPSHOT}' GROUP BY ALL"
    )
    per_kernel: Counter[tuple[str, str]] = Counter()
    for r in split:
        assert r["n"] > 0 and r["loop_depth"] >= 0
        per_kernel[(r["cache_key"], r["mnemonic"])] += r["n"]
    assert per_kernel == Counter({(r["cache_key"], r["mnemonic"]): r["n"] for r in whole})
    assert {r["cache_key"] for r in split} == {r["cache_key"] for r in rows}
