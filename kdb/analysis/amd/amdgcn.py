"""The `.amdgcn` assembly Triton writes: instruction mix, spills, source lines and LLVM's `; Kernel info` block.

Instruction groups: kdb.analysis.amd.groups.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from dataclasses import dataclass, field

from kdb.analysis.amd.groups import mnemonic_group, operand_flags
from kdb.analysis.loops import NEXT, Flow, LoopNest, Step, loop_nest
from kdb.errors import ParseError

# Bounds against hostile input: real listings are at most a few MB. Numbers in the regexes are
# length-bounded too, since int() refuses strings of more than 4300 digits.
MAX_TEXT_CHARS = 256 * 1024 * 1024
MAX_LINE_CHARS = 64 * 1024

# 	.type	mm_k,@function
TYPE_FUNCTION_RE = re.compile(r"^\.type\s+([^\s,]+)\s*,\s*@function\b")
# mm_k:                                   ; @mm_k
LABEL_RE = re.compile(r"^([A-Za-z_.$][\w.$]*):")
# .Lfunc_end0:
FUNC_END_RE = re.compile(r"^\.Lfunc_end\d+:")
#                                         ; -- End function
END_FUNCTION_COMMENT = "; -- End function"
# 	.file	1 "/tmp/dev" "build.py"      (also `.file 1 "/abs/build.py"`, and an optional `md5 0x…` tail)
FILE_RE = re.compile(r'^\.file\s+(\d{1,9})\s+"((?:[^"\\]|\\.)*)"(?:\s+"((?:[^"\\]|\\.)*)")?')
# 	.loc	1 22 25 is_stmt 1               ; build.py:22:25
LOC_RE = re.compile(r"^\.loc\s+(\d{1,9})\s+(\d{1,9})\b")
# 	buffer_store_dword v1, off, s[0:3], 0 offset:4 ; 4-byte Folded Spill
FOLDED_RE = re.compile(r";\s*(\d{1,9})-byte Folded (Spill|Reload)\b")
# ; Kernel info:
KERNEL_INFO_HEADER_RE = re.compile(r"^;\s*Kernel info:\s*$")
# ; codeLenInByte = 7228          ; TotalNumSgprs: 24          ; COMPUTE_PGM_RSRC2:SCRATCH_EN: 0
KERNEL_INFO_LINE_RE = re.compile(r"^;\s*(?P<body>\S.*)$")
# 	.amdhsa_private_segment_fixed_size 664
AMDHSA_DIRECTIVE_RE = re.compile(r"^\.amdhsa_(\w+)\s+(-?\d{1,19})\b")
#   .vgpr_count:     334      (a key of a kernel map in the `.amdgpu_metadata` YAML)
YAML_KEY_RE = re.compile(r"^(?P<indent> *)(?P<dash>- )?\.(?P<key>\w+):(?P<value>.*)$")


@dataclass(frozen=True)
class AsmKernel:
    name: str
    kernel_info: dict[str, int | str]  # `; Kernel info:` block as written (empty before Triton 3.2)
    metadata: dict[str, int | str | bool]  # scalar keys of this kernel in the `.amdgpu_metadata` YAML
    amdhsa: dict[str, int]  # `.amdhsa_*` descriptor directives
    mnemonics: dict[str, int]  # full mnemonic -> count
    groups: dict[str, int]  # group -> count
    mix: dict[tuple[str, str], int]  # (mnemonic, group) -> count; MUBUF scratch vs global needs the operands
    spill_count: int  # instructions commented `; N-byte Folded Spill`
    reload_count: int  # `; N-byte Folded Reload`
    spill_bytes: int
    reload_bytes: int
    scratch_instructions: int  # instructions in the 'scratch' group
    lines: dict[tuple[str, int, str], int]  # (source file, line, group) -> count; line 0 = no line
    instruction_count: int
    private_segment: bool
    loops: LoopNest  # the control-flow graph's natural loops; depths[i] is the i-th instruction's loop depth
    loop_mix: dict[tuple[int, str, str], int]  # (loop depth >= 1, mnemonic, group) -> count

    @property
    def occupancy(self) -> int | None:
        value = self.kernel_info.get("Occupancy")
        return value if isinstance(value, int) else None


@dataclass(frozen=True)
class AsmListing:
    target: str | None  # `.amdgcn_target`, e.g. 'amdgcn-amd-amdhsa--gfx942'
    kernels: list[AsmKernel] = field(default_factory=list)


@dataclass
class _Building:
    name: str
    # (mnemonic, source file, line, operand flags) -> count: only MUBUF mnemonics need their operands
    # (lds modifier, scratch addressing), and the group waits for the private segment size, which the
    # descriptor after the function gives.
    counts: Counter[tuple[str, str, int, tuple[bool, bool | None]]] = field(default_factory=Counter)
    spill_count: int = 0
    reload_count: int = 0
    spill_bytes: int = 0
    reload_bytes: int = 0
    kernel_info: dict[str, int | str] = field(default_factory=dict)
    amdhsa: dict[str, int] = field(default_factory=dict)
    # control flow, one entry per counted instruction: what it does to the flow, and its key in `counts`
    steps: list[Step] = field(default_factory=list)
    keys: list[tuple[str, str, int, tuple[bool, bool | None]]] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)  # label -> index of the instruction it precedes
    far_target: str | None = None  # the label a long branch's `s_add_u32 …, (.LBB0_7-.Lpost_getpc0)` names


_NO_OPERAND_FLAGS: tuple[bool, bool | None] = (False, None)
# 	v_mfma_f32_32x32x8_f16 ...: a mnemonic is lowercase letters, digits, `_` and `.`
MNEMONIC_RE = re.compile(r"[a-z][a-z0-9_.]*\Z")


# 	.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
TARGET_RE = re.compile(r'^\.amdgcn_target\s+"([^"]*)"')


def parse_amdgcn(text: str) -> AsmListing:  # noqa: C901 (one line-by-line state machine, kept in one piece)
    """Parse Triton's `.amdgcn` text. Raises ParseError when it holds no kernel function."""
    if not isinstance(text, str):
        raise ParseError("assembly is not text")
    if len(text) > MAX_TEXT_CHARS:
        raise ParseError(f"assembly of {len(text)} characters is larger than any real listing")
    functions: set[str] = set()
    files: dict[int, str] = {}
    target: str | None = None
    done: list[_Building] = []
    current: _Building | None = None
    info_for: _Building | None = None  # kernel whose `; Kernel info` block may follow
    in_info = False
    loc_file, loc_line = "", 0
    yaml_lines: list[str] = []
    in_yaml = False
    mnemonic_ok: dict[str, bool] = {}

    for raw in text.splitlines():
        if len(raw) > MAX_LINE_CHARS:
            raise ParseError(f"assembly line of {len(raw)} characters")
        line = raw.strip()
        if in_yaml:
            if line == ".end_amdgpu_metadata":
                in_yaml = False
            else:
                yaml_lines.append(raw.rstrip())
            continue
        if in_info:
            match = KERNEL_INFO_LINE_RE.match(line)
            if match and info_for is not None:
                _info_entry(info_for.kernel_info, match.group("body").rstrip())
                continue
            in_info = False
        if not line:
            continue
        first = line[0]
        if first == ";":
            if line.startswith(END_FUNCTION_COMMENT) and current is not None:
                done.append(current)
                info_for, current = current, None
            elif "Kernel info" in line and KERNEL_INFO_HEADER_RE.match(line) and info_for is not None:
                in_info = True
            continue
        if first == ".":
            if current is not None and line.startswith(".L") and (match := LABEL_RE.match(line)):
                if FUNC_END_RE.match(line):
                    done.append(current)
                    info_for, current = current, None
                else:  # a basic block's label (.LBB0_3:), or another local label inside the function
                    current.labels[match.group(1)] = len(current.steps)
            elif match := LOC_RE.match(line):
                loc_file, loc_line = files.get(int(match.group(1)), ""), int(match.group(2))
            elif match := FILE_RE.match(line):
                directory, name = match.group(2), match.group(3)
                path = directory if name is None else posixpath.join(directory, name)
                files[int(match.group(1))] = _unescape(path)
            elif match := TYPE_FUNCTION_RE.match(line):
                functions.add(match.group(1))
            elif match := AMDHSA_DIRECTIVE_RE.match(line):
                if current is not None:
                    current.amdhsa[match.group(1)] = int(match.group(2))
            elif FUNC_END_RE.match(line) and current is not None:
                done.append(current)
                info_for, current = current, None
            elif line == ".amdgpu_metadata":
                in_yaml = True
            elif match := TARGET_RE.match(line):
                target = match.group(1)
            continue
        code, _, comment = line.partition(";")
        parts = code.split(None, 1)
        if not parts:
            continue
        token = parts[0]
        if ":" in token and (match := LABEL_RE.match(line)):
            if match.group(1) in functions:
                if current is not None:
                    done.append(current)
                current = _Building(match.group(1))
                loc_file, loc_line = "", 0
            elif current is not None:
                current.labels[match.group(1)] = len(current.steps)
            continue
        if current is None:
            continue
        valid = mnemonic_ok.get(token)
        if valid is None:
            valid = mnemonic_ok[token] = MNEMONIC_RE.match(token) is not None
        if not valid:
            continue
        flags = operand_flags(parts[1] if len(parts) > 1 else "") if token.startswith("buffer_") else _NO_OPERAND_FLAGS
        key = (token, loc_file, loc_line, flags)
        current.counts[key] += 1
        current.keys.append(key)
        current.steps.append(_step(current, token, parts[1] if len(parts) > 1 else ""))
        if comment and "Folded" in comment and (folded := FOLDED_RE.search(";" + comment)):
            size = int(folded.group(1))
            if folded.group(2) == "Spill":
                current.spill_count += 1
                current.spill_bytes += size
            else:
                current.reload_count += 1
                current.reload_bytes += size
    if current is not None:
        done.append(current)
    if not done:
        raise ParseError("no kernel function found in the assembly")
    yaml_meta = _yaml_kernels(yaml_lines)
    return AsmListing(target, [_finish(b, yaml_meta.get(b.name, {})) for b in done])


# `(.LBB0_7-.Lpost_getpc0)&4294967295`: the label a long branch (s_getpc/s_add/s_setpc) goes to
FAR_TARGET_RE = re.compile(r"\((\.L[\w.$]+)-\.L[\w.$]+\)")
# s_cbranch_join / s_cbranch_g_fork / s_cbranch_i_fork (gfx6-8): jumps to a computed address
COMPUTED_BRANCHES = ("s_cbranch_join", "s_cbranch_g_fork", "s_cbranch_i_fork")


def _step(current: _Building, mnemonic: str, operands: str) -> Step:
    """What one AMD instruction does to control flow (from the mnemonic and its label operand)."""
    if not mnemonic.startswith("s_"):
        return NEXT
    if mnemonic.startswith("s_add_u32") and "post_getpc" in operands and (far := FAR_TARGET_RE.search(operands)):
        current.far_target = far.group(1)
        return NEXT
    if mnemonic == "s_branch":
        return Step(Flow.JUMP, operands.split(None, 1)[0] if operands else None)
    if mnemonic.startswith("s_cbranch_"):
        if mnemonic.startswith(COMPUTED_BRANCHES):
            return Step(Flow.INDIRECT)
        return Step(Flow.BRANCH, operands.split(None, 1)[0] if operands else None)
    if mnemonic.startswith("s_endpgm"):
        return Step(Flow.EXIT)
    if mnemonic.startswith("s_setpc"):
        target, current.far_target = current.far_target, None
        return Step(Flow.JUMP, target) if target else Step(Flow.INDIRECT)
    return NEXT


def _unescape(value: str) -> str:
    return value.replace('\\"', '"').replace("\\\\", "\\")


def _info_entry(info: dict[str, int | str], body: str) -> None:
    # Both `key = value` and `key: value`; keys may themselves hold colons (COMPUTE_PGM_RSRC2:SCRATCH_EN).
    if " = " in body:
        key, _, value = body.partition(" = ")
    else:
        key, sep, value = body.rpartition(":")
        if not sep:
            return
    key, value = key.strip(), value.strip()
    if key:
        info[key] = _scalar(value)


def _scalar(value: str) -> int | str:
    try:
        return int(value, 0) if len(value) < 40 else value
    except ValueError:
        return value


def _yaml_kernels(lines: list[str]) -> dict[str, dict[str, int | str | bool]]:
    """Scalar keys of each `amdhsa.kernels` entry; nested lists (.args) are skipped by indentation."""
    kernels: list[dict[str, int | str | bool]] = []
    entry_indent: int | None = None
    in_kernels = False
    for line in lines:
        if not line.startswith(" "):
            in_kernels = line.startswith("amdhsa.kernels:")
            continue
        if not in_kernels:
            continue
        match = YAML_KEY_RE.match(line)
        if match is None:
            continue
        indent = len(match.group("indent"))
        if match.group("dash") and (entry_indent is None or indent == entry_indent):
            entry_indent = indent
            kernels.append({})
        elif entry_indent is None or indent != entry_indent + 2 or not kernels:
            continue
        value = match.group("value").strip()
        if value == "":
            continue
        kernels[-1][match.group("key")] = _yaml_scalar(value)
    return {str(k.get("name")): k for k in kernels if "name" in k}


def _yaml_scalar(value: str) -> int | str | bool:
    if value in ("true", "false"):
        return value == "true"
    scalar = _scalar(value)
    if isinstance(scalar, str) and len(scalar) >= 2 and scalar[0] == scalar[-1] and scalar[0] in "'\"":
        return scalar[1:-1]
    return scalar


def _finish(building: _Building, metadata: dict[str, int | str | bool]) -> AsmKernel:
    info = building.kernel_info
    scratch_size, private_size = info.get("ScratchSize"), metadata.get("private_segment_fixed_size")
    private = (
        building.amdhsa.get("private_segment_fixed_size", 0) > 0
        or building.amdhsa.get("enable_private_segment", 0) > 0
        or (isinstance(scratch_size, int) and scratch_size > 0)
        or (isinstance(private_size, int) and private_size > 0)
    )
    mnemonics: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    lines: Counter[tuple[str, int, str]] = Counter()
    mix: Counter[tuple[str, str]] = Counter()
    instruction_count = 0
    group_of: dict[tuple[str, str, int, tuple[bool, bool | None]], str] = {}
    for key, count in building.counts.items():
        mnemonic, file, line, flags = key
        group = group_of[key] = mnemonic_group(mnemonic, private, *flags)
        instruction_count += count
        mnemonics[mnemonic] += count
        groups[group] += count
        mix[(mnemonic, group)] += count
        lines[(file, line, group)] += count
    return AsmKernel(
        name=building.name,
        kernel_info=dict(info),
        metadata=metadata,
        amdhsa=dict(building.amdhsa),
        mnemonics=dict(mnemonics),
        groups=dict(groups),
        mix=dict(mix),
        spill_count=building.spill_count,
        reload_count=building.reload_count,
        spill_bytes=building.spill_bytes,
        reload_bytes=building.reload_bytes,
        scratch_instructions=groups.get("scratch", 0),
        lines=dict(lines),
        instruction_count=instruction_count,
        private_segment=private,
        loops=(nest := loop_nest(building.steps, building.labels)),
        loop_mix=_loop_mix(nest, building.keys, group_of),
    )


def _loop_mix(
    nest: LoopNest, keys: list[tuple[str, str, int, tuple[bool, bool | None]]], group_of: dict
) -> dict[tuple[int, str, str], int]:
    mix: Counter[tuple[int, str, str]] = Counter()
    for depth, key in zip(nest.depths, keys, strict=True):
        if depth:
            mix[(depth, key[0], group_of[key])] += 1
    return dict(mix)
