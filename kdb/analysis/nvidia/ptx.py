"""PTX listing parser: module header, and per function the instruction mix, its source lines and its loops
(the natural loops of its own branches, kdb.analysis.loops: labels are scoped by `{ }`, as inline asm
blocks each declare their own).

Pure: text in, frozen dataclasses out. Malformed input raises ``kdb.errors.ParseError``.

A Triton ``.ptx`` file (LLVM NVPTX back end) looks like::

    .version 8.7
    .target sm_90a
    .address_size 64
    .extern .shared .align 16 .b8 global_smem[];
    .visible .entry matmul(
        .param .u64 .ptr .global .align 1 matmul_param_0, ...
    )
    .reqntid 128
    {
        .reg .b32   %r<639>;
        .loc    1 23 26                 // kernels.py:23:26
    $L__BB0_2:
        @%p1 bra    $L__BB0_4;
        ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];
    }
        .file   1 "/tmp/kernels.py"

``.file`` directives come *after* the functions, so ``.loc`` file numbers are resolved at the end.
Inline-asm blocks add nested ``{ ... }`` scopes and several statements per line; both are handled.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from kdb.analysis.loops import NEXT, Flow, LoopNest, Step, loop_nest
from kdb.errors import ParseError

# `.version 8.7`
VERSION_RE = re.compile(r"^\s*\.version\s+(\d+\.\d+)\s*$", re.MULTILINE)
# `.target sm_90a` or `.target sm_80, debug`
TARGET_RE = re.compile(r"^\s*\.target\s+([\w]+)", re.MULTILINE)
# `.address_size 64`
ADDRESS_SIZE_RE = re.compile(r"^\s*\.address_size\s+(\d+)", re.MULTILINE)
# `.file 1 "/tmp/kernels.py"` or `.file 1 "/tmp/kernels.py", 1700000000, 1234` or `.file 1 "dir" "name"`
FILE_RE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"(?:\s+"([^"]*)")?')
# `.visible .entry matmul(` / `.func (.param .b32 r) helper(` / `.weak .func f(`
FUNC_RE = re.compile(r"^\s*(?:\.(?:visible|extern|weak)\s+)*\.(entry|func)\b(?:\s*\([^)]*\))?\s*([$\w]+)")
# `.loc 1 23 26` (optionally `, function_name $L__info_string0, inlined_at 1 45 3`)
LOC_RE = re.compile(r"^\.loc\s+(\d+)\s+(\d+)\s+(\d+)")
# `.reg .b32 %r<639>;` or `.reg .pred p;` (a single register)
REG_RE = re.compile(r"^\.reg\s+(?:\.v\d\s+)?(\.\w+)\s+%?[$\w]+(?:<(\d+)>)?")
# `.shared .align 16 .b8 smem[49152];` / `.extern .shared .align 16 .b8 global_smem[];`
SHARED_RE = re.compile(r"^\s*(\.extern\s+)?\.shared\s+(?:\.align\s+\d+\s+)?\.[a-z]+(\d+)\s+([$\w]+)(?:\[(\d*)\])?")
# `.reqntid 128` / `.maxntid 128, 1, 1` / `.maxnreg 64`
PERF_RE = re.compile(r"^\s*\.(reqntid|maxntid|maxnreg|minnctapersm)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")
# `$L__BB0_2:` at the start of a statement (not `shared::cta`, which has two colons).
LABEL_RE = re.compile(r"^[$\w]+:(?!:)\s*")
# `@%p1 bra $L__BB0_4` / `@!%p3 st.global.b32 ...`
PRED_RE = re.compile(r"^@!?%?[$\w]+\s+")
# `wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16` / `cp.async.bulk.shared::cluster.global`
OPCODE_RE = re.compile(r"^([a-z][a-z0-9_]*(?:[.:]+[a-z0-9_]+)*)")
BLOCK_COMMENT_RE = re.compile(r"/\*.*?\*/", re.DOTALL)

GROUPS = ("matrix", "global", "shared", "local", "barrier", "branch", "conversion", "transcendental", "other")

# (group, full-opcode prefixes); first match wins, so specific state spaces come before generic ones.
_GROUP_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("matrix", ("mma.", "wgmma.", "tcgen05.mma")),
    ("local", ("ld.local", "st.local")),
    ("shared", ("ld.shared", "st.shared", "cp.async", "ldmatrix", "stmatrix", "atom.shared", "red.shared")),
    ("global", ("ld.global", "st.global", "atom.", "red.")),
    ("barrier", ("bar.", "barrier.", "mbarrier.", "fence.", "membar.")),
    ("conversion", ("cvt.",)),
    ("transcendental", ("ex2.", "lg2.", "sqrt.", "rsqrt.", "rcp.", "sin.", "cos.", "tanh.")),
)
_BRANCH_BASES = frozenset({"bra", "brx", "call", "ret", "exit", "trap"})
# What changes control flow (`call` returns to the next instruction: it does not).
_FLOW_BASES = ("bra", "brx", "ret", "exit", "trap")


def opcode_group(opcode: str) -> str:
    """The group of a full PTX opcode (see GROUPS)."""
    if opcode.split(".", 1)[0] in _BRANCH_BASES:
        return "branch"
    probe = opcode + "."
    for group, prefixes in _GROUP_RULES:
        if probe.startswith(prefixes):
            return group
    return "other"


@dataclass(frozen=True)
class PtxFunction:
    name: str
    is_entry: bool  # .entry (a kernel) rather than .func
    opcodes: dict[str, int]  # full opcode ("ld.global.v4.b32") -> count
    base_opcodes: dict[str, int]  # text before the first dot ("ld") -> count
    groups: dict[str, int]  # every name of GROUPS -> count (0 included)
    lines: dict[tuple[str, int, str], int]  # (file, line, group) -> count; ("", 0, g) when no .loc
    total: int  # instructions
    reg_decls: dict[str, int]  # ".b32" -> registers declared
    reqntid: tuple[int, ...] | None
    maxntid: tuple[int, ...] | None
    maxnreg: int | None
    loops: LoopNest  # natural loops of the function's own branches; depths[i] is the i-th instruction's loop depth
    loop_mix: dict[tuple[int, str, str], int]  # (loop depth >= 1, full opcode, group) -> count


@dataclass(frozen=True)
class PtxListing:
    version: str  # "8.7"
    target: str  # "sm_90a"
    address_size: int | None
    files: dict[int, str]  # .file number -> path
    shared_decls: dict[str, int]  # module-level .shared variable -> declared bytes (0 when extern/unsized)
    functions: tuple[PtxFunction, ...]  # in file order


@dataclass
class _Acc:
    """Mutable state of the function being read."""

    name: str
    is_entry: bool
    perf: dict[str, tuple[int, ...]]
    opcodes: Counter[str]
    lines: Counter[tuple[int, int, str]]  # (file number, line, full opcode)
    regs: Counter[str]
    ops: list[str] = field(default_factory=list)  # full opcode of every instruction, in order
    labels: dict[str, int] = field(default_factory=dict)  # scoped label (see _label_key) -> instruction index
    # (instruction index, flow, target as written, the scopes it sits in) of every instruction that changes
    # control flow (the others fall through); bra targets are resolved in _finish, once every label is known
    flows: list[tuple[int, Flow, str, tuple[int, ...]]] = field(default_factory=list)
    scopes: tuple[int, ...] = ()  # the `{ }` scopes open at this point, outermost (the body) first
    next_scope: int = 0


def _label_key(name: str, scope: int) -> str:
    """A label as kdb keys it: PTX labels are local to their `{ }` scope (inline asm blocks each declare their
    own `waitLoop:`), so a label of a nested scope carries the scope's number (`@` is no identifier character)."""
    return name if scope == 0 else f"{name}@{scope}"


def _strip_line_comment(line: str) -> str:
    pos = line.find("//")
    return line if pos < 0 else line[:pos]


def parse_ptx(text: str | bytes) -> PtxListing:  # noqa: C901 (one statement-by-statement state machine)
    """Parse a PTX module. Raises ParseError when it is not PTX or is cut short."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"PTX is not UTF-8 text (byte {exc.start})") from exc
    if not isinstance(text, str):
        raise ParseError(f"PTX must be text, got {type(text).__name__}")
    version = VERSION_RE.search(text)
    target = TARGET_RE.search(text)
    if version is None or target is None:
        raise ParseError("not a PTX module: no .version or .target directive")
    address = ADDRESS_SIZE_RE.search(text)
    text = BLOCK_COMMENT_RE.sub(" ", text)

    files: dict[int, str] = {}
    shared: dict[str, int] = {}
    functions: list[_Acc] = []
    current: _Acc | None = None
    pending: _Acc | None = None  # header seen, body `{` not yet
    depth = 0  # brace depth inside the current function body
    loc: tuple[int, int] = (0, 0)

    for lineno, raw in enumerate(text.splitlines(), 1):
        if current is None:
            fm = FILE_RE.match(raw)
            if fm:
                path = fm.group(2) if fm.group(3) is None else f"{fm.group(2).rstrip('/')}/{fm.group(3)}"
                files[int(fm.group(1))] = path
                continue
        line = _strip_line_comment(raw).strip()
        if not line:
            continue
        if current is None:
            fn = FUNC_RE.match(line)
            if fn:
                pending = _Acc(fn.group(2), fn.group(1) == "entry", {}, Counter(), Counter(), Counter())
                # A declaration without a body ends with `;` on its closing line; handled below.
                if line.endswith(";"):
                    pending = None
                continue
            if pending is not None:
                pm = PERF_RE.match(line)
                if pm:
                    pending.perf[pm.group(1)] = tuple(int(g) for g in pm.groups()[1:] if g is not None)
                    continue
                if line.startswith("{"):
                    current, pending, depth, loc = pending, None, 0, (0, 0)
                    functions.append(current)
                    # fall through: the brace is counted below with the rest of the line
                elif line.endswith(";") and ")" in line:
                    pending = None  # prototype only
                    continue
                else:
                    continue  # parameter list lines
            else:
                sm = SHARED_RE.match(line)
                if sm:
                    count = int(sm.group(4)) if sm.group(4) else 0
                    shared[sm.group(3)] = 0 if sm.group(1) else count * int(sm.group(2)) // 8
                continue
        # Inside a function body (or its opening line).
        depth += line.count("{") - line.count("}")
        if depth < 0:
            raise ParseError(f"unbalanced '}}' at line {lineno}")
        for stmt in line.split(";"):
            loc = _statement(current, stmt, loc, lineno)
        if depth == 0:
            current = None
    if current is not None or pending is not None:
        raise ParseError("PTX ends inside a function (truncated?)")

    out = tuple(_finish(acc, files) for acc in functions)
    return PtxListing(
        version=version.group(1),
        target=target.group(1),
        address_size=int(address.group(1)) if address else None,
        files=dict(sorted(files.items())),
        shared_decls=dict(sorted(shared.items())),
        functions=out,
    )


def _statement(acc: _Acc, stmt: str, loc: tuple[int, int], lineno: int) -> tuple[int, int]:
    """Count one `;`-separated statement; returns the .loc in force after it."""
    stmt = stmt.strip()
    while stmt and stmt[0] in "{}":  # scopes open and close at the start of a statement
        if stmt[0] == "{":
            acc.scopes += (acc.next_scope,)
            acc.next_scope += 1
        else:
            acc.scopes = acc.scopes[:-1]
        stmt = stmt[1:].lstrip()
    while True:
        m = LABEL_RE.match(stmt)
        if not m:
            break
        acc.labels[_label_key(stmt[: m.end()].rstrip()[:-1], acc.scopes[-1] if acc.scopes else 0)] = len(acc.ops)
        stmt = stmt[m.end() :]
    if not stmt:
        return loc
    if stmt.startswith("."):
        lm = LOC_RE.match(stmt)
        if lm:
            return int(lm.group(1)), int(lm.group(2))
        rm = REG_RE.match(stmt)
        if rm:
            acc.regs[rm.group(1)] += int(rm.group(2)) if rm.group(2) else 1
        return loc
    pm = PRED_RE.match(stmt)
    if pm:
        stmt = stmt[pm.end() :]
    om = OPCODE_RE.match(stmt)
    if om is None:
        raise ParseError(f"unreadable PTX statement at line {lineno}")
    op = om.group(1)
    acc.opcodes[op] += 1
    acc.lines[(loc[0], loc[1], op)] += 1  # grouped in _finish, once per distinct opcode
    if op.startswith(_FLOW_BASES):
        base = op.split(".", 1)[0]
        if base == "bra":
            acc.flows.append((len(acc.ops), Flow.BRANCH if pm else Flow.JUMP, stmt[om.end() :].strip(), acc.scopes))
        elif base == "brx":
            acc.flows.append((len(acc.ops), Flow.INDIRECT, "", acc.scopes))
        elif base in _FLOW_BASES and not pm:
            # ret / exit / trap end the thread; guarded by a predicate, they may fall through (no step then)
            acc.flows.append((len(acc.ops), Flow.EXIT, "", acc.scopes))
    acc.ops.append(op)
    return loc


def _finish(acc: _Acc, files: dict[int, str]) -> PtxFunction:
    base: Counter[str] = Counter()
    groups = dict.fromkeys(GROUPS, 0)
    group_of = {op: opcode_group(op) for op in acc.opcodes}
    for op, n in acc.opcodes.items():
        base[op.split(".", 1)[0]] += n
        groups[group_of[op]] += n
    lines: Counter[tuple[str, int, str]] = Counter()
    for (file_no, line, op), n in acc.lines.items():
        group = group_of[op]
        if file_no == 0:
            path = ""
        elif file_no in files:
            path = files[file_no]
        else:
            raise ParseError(f".loc names file {file_no}, which no .file directive declares")
        lines[(path, line, group)] += n
    perf = acc.perf
    maxnreg = perf.get("maxnreg")
    nest = loop_nest(_resolved_steps(acc), acc.labels)
    loop_mix: Counter[tuple[int, str, str]] = Counter()
    for depth, op in zip(nest.depths, acc.ops, strict=True):
        if depth:
            loop_mix[(depth, op, group_of[op])] += 1
    return PtxFunction(
        name=acc.name,
        is_entry=acc.is_entry,
        opcodes=dict(sorted(acc.opcodes.items())),
        base_opcodes=dict(sorted(base.items())),
        groups=groups,
        lines=dict(sorted(lines.items())),
        total=sum(acc.opcodes.values()),
        reg_decls=dict(sorted(acc.regs.items())),
        reqntid=perf.get("reqntid"),
        maxntid=perf.get("maxntid"),
        maxnreg=maxnreg[0] if maxnreg else None,
        loops=nest,
        loop_mix=dict(loop_mix),
    )


def _resolved_steps(acc: _Acc) -> list[Step]:
    """Every instruction's step, each branch pointed at the label its scope sees (the innermost scope that
    declares the name; a name no enclosing scope declares stays as written: an unresolved branch)."""
    n = len(acc.ops)
    steps = [NEXT] * n
    for index, flow, name, scopes in acc.flows:
        target = None
        if flow is Flow.BRANCH or flow is Flow.JUMP:
            target = name
            for scope in reversed(scopes):
                if _label_key(name, scope) in acc.labels:
                    target = _label_key(name, scope)
                    break
        steps[index] = Step(flow, target)
        if flow is not Flow.BRANCH and index + 1 < n:
            # what follows a jump or an exit is entered by a branch or not at all: a block of its own
            acc.labels.setdefault(f"@{index + 1}", index + 1)
    return steps
