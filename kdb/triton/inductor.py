"""Pure parsers of what a TorchInductor cache holds beside its Triton cache: generated kernel modules
(read with `ast`, never imported or run), `*.best_config`, `*.kernel_perf`, Triton's `*.autotune.json`,
and the two IR facts that link a compiled kernel folder back to them (the source file in the TTIR's
locations, and the tensor dimensions the block sizes became)."""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from kdb.errors import ParseError

# `@triton_heuristics.pointwise(...)`, `.reduction`, `.persistent_reduction`, `.template`, `.foreach`, …
HEURISTICS_DECORATOR = "triton_heuristics"
# best-config keys that are not the config's values (see torch/_inductor/runtime/autotune_cache.py)
BEST_CONFIG_META = frozenset(
    {"configs_hash", "found_by_coordesc", "time_taken_ms", "triton_cache_hash", "extra_options"}
)
# config fields of Triton's `Config` beside `kwargs`
CONFIG_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")

_LOC_FILE_RE = re.compile(r'^#loc\d* = loc\("([^"]+\.py)":(\d+):\d+\)', re.MULTILINE)
_TENSOR_RE = re.compile(r"tensor<((?:\d+x)+)")


@dataclass
class InductorKernel:
    """One `@triton_heuristics.<kind>(...)`-decorated kernel of a generated module."""

    name: str  # the Python function name (= the Triton kernel name)
    heuristic: str  # pointwise, reduction, persistent_reduction, template, …
    size_hints: Any = None
    triton_meta: Any = None
    inductor_meta: Any = None
    configs: list[dict[str, Any]] = field(default_factory=list)  # literal candidate configs (templates)
    line: int = 0  # the `def` line
    source_digest: str = ""  # SHA-256 of the function's source: modules with equal kernels share compiled folders


def _value(node: ast.expr) -> Any:
    """A JSON-able value for a literal expression; calls (e.g. `DeviceProperties(...)`) become
    {"__call__": name, args…}; anything else its source text. Never evaluates code."""
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, float) and not math.isfinite(v):
            return str(v)
        return v if isinstance(v, str | int | float | bool) or v is None else repr(v)
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for k_node, v_node in zip(node.keys, node.values, strict=True):
            if k_node is None:
                continue
            key = _value(k_node)
            out[key if isinstance(key, str) else json.dumps(key)] = _value(v_node)
        return out
    if isinstance(node, ast.List | ast.Tuple):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Set):
        return sorted((_value(e) for e in node.elts), key=repr)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        inner = _value(node.operand)
        return -inner if isinstance(inner, int | float) and not isinstance(inner, bool) else ast.unparse(node)
    if isinstance(node, ast.Call):
        name = ast.unparse(node.func)
        if name == "set" and not node.args and not node.keywords:
            return []
        call: dict[str, Any] = {"__call__": name}
        if node.args:
            call["args"] = [_value(a) for a in node.args]
        for kw in node.keywords:
            if kw.arg is not None:
                call[kw.arg] = _value(kw.value)
        return call
    return ast.unparse(node)


def _heuristics_call(decorator: ast.expr) -> ast.Call | None:
    if (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and isinstance(decorator.func.value, ast.Name)
        and decorator.func.value.id == HEURISTICS_DECORATOR
    ):
        return decorator
    return None


def _literal_configs(call: ast.Call) -> list[dict[str, Any]]:
    """`configs=[triton.Config({...}, num_warps=…, num_stages=…), …]` where written literally; a template's
    own `num_warps=`/`num_stages=` as its one config."""
    kws = {kw.arg: kw.value for kw in call.keywords if kw.arg is not None}
    out: list[dict[str, Any]] = []
    configs = kws.get("configs")
    if isinstance(configs, ast.List):
        for c in configs.elts:
            if isinstance(c, ast.Call) and c.args and isinstance(c.args[0], ast.Dict):
                cfg = {"kwargs": _value(c.args[0])}
                cfg.update({kw.arg: _value(kw.value) for kw in c.keywords if kw.arg in CONFIG_OPTIONS})
                out.append(cfg)
    elif "num_warps" in kws or "num_stages" in kws:
        out.append({k: _value(kws[k]) for k in ("num_warps", "num_stages") if k in kws} | {"kwargs": {}})
    return out


def _function_source(text: str, node: ast.FunctionDef) -> str:
    """The `def` and body as written (decorators excluded)."""
    lines = text.splitlines()
    return "\n".join(lines[node.lineno - 1 : node.end_lineno])


def parse_module(data: bytes) -> list[InductorKernel]:
    """Every heuristics-decorated kernel of a generated module; [] for other Python (wrappers, graphs)."""
    try:
        text = data.decode("utf-8")
        tree = ast.parse(text)
    except (UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise ParseError(f"not a Python module: {exc}") from None
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            call = _heuristics_call(dec)
            if call is None:
                continue
            assert isinstance(call.func, ast.Attribute)
            kws = {kw.arg: kw.value for kw in call.keywords if kw.arg is not None}
            out.append(
                InductorKernel(
                    name=node.name,
                    heuristic=call.func.attr,
                    size_hints=_value(kws["size_hints"]) if "size_hints" in kws else None,
                    triton_meta=_value(kws["triton_meta"]) if "triton_meta" in kws else None,
                    inductor_meta=_value(kws["inductor_meta"]) if "inductor_meta" in kws else None,
                    configs=_literal_configs(call),
                    line=node.lineno,
                    source_digest=hashlib.sha256(_function_source(text, node).encode()).hexdigest(),
                )
            )
            break
    return out


def _json_object(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ParseError(f"{what} is not JSON: {exc}") from None


@dataclass(frozen=True)
class BestConfig:
    config: dict[str, Any]  # {"kwargs": {...block sizes...}, "num_warps": …, "num_stages": …}
    time_taken_ms: float | None
    found_by_coordesc: bool | None
    triton_cache_hash: str | None
    configs_hash: str | None


def parse_best_config(data: bytes) -> BestConfig:
    raw = _json_object(data, "best config")
    if not isinstance(raw, dict):
        raise ParseError("best config is not a JSON object")
    kwargs = {k: v for k, v in raw.items() if k not in BEST_CONFIG_META and k not in CONFIG_OPTIONS}
    config: dict[str, Any] = {"kwargs": kwargs}
    config.update({k: raw[k] for k in CONFIG_OPTIONS if k in raw})
    t = raw.get("time_taken_ms")
    h = raw.get("triton_cache_hash")
    return BestConfig(
        config=config,
        time_taken_ms=float(t) if isinstance(t, int | float) and not isinstance(t, bool) else None,
        found_by_coordesc=raw.get("found_by_coordesc") if isinstance(raw.get("found_by_coordesc"), bool) else None,
        triton_cache_hash=h if isinstance(h, str) and h else None,
        configs_hash=raw.get("configs_hash") if isinstance(raw.get("configs_hash"), str) else None,
    )


def parse_kernel_perf(data: bytes) -> float:
    try:
        value = float(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise ParseError("kernel_perf is not a number") from None
    if not math.isfinite(value):
        raise ParseError("kernel_perf is not a finite number")
    return value


@dataclass(frozen=True)
class AutotuneEntry:
    config: dict[str, Any]
    timings: list[float]  # do_bench's quantiles as written (median first)
    is_best: bool


def parse_autotune_json(data: bytes) -> tuple[Any, list[AutotuneEntry]]:
    """Triton's `@autotune(cache_results=True)` file: its key and every config with its timings. The
    winner is the config with the smallest timings list (Triton's own `min(timings, key=timings.get)`)."""
    raw = _json_object(data, "autotune file")
    if not isinstance(raw, dict) or not isinstance(raw.get("configs_timings"), list):
        raise ParseError("autotune file has no configs_timings list")
    rows: list[tuple[dict[str, Any], list[float]]] = []
    for item in raw["configs_timings"]:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], dict)):
            raise ParseError("autotune file: a configs_timings entry is not [config, timings]")
        cfg, timings = item
        if isinstance(timings, int | float):
            timings = [timings]
        if not isinstance(timings, list) or not all(isinstance(t, int | float) for t in timings):
            raise ParseError("autotune file: timings are not numbers")
        config = {"kwargs": cfg.get("kwargs") if isinstance(cfg.get("kwargs"), dict) else {}}
        config.update({k: cfg[k] for k in CONFIG_OPTIONS if cfg.get(k) is not None})
        rows.append((config, [float(t) for t in timings]))
    best = min(range(len(rows)), key=lambda i: rows[i][1]) if rows else -1
    return raw.get("key"), [AutotuneEntry(c, t, i == best) for i, (c, t) in enumerate(rows)]


def source_location(ir_text: str) -> tuple[str, int] | None:
    """The Python file and line of the kernel's `def`, from the first file location of the TTIR."""
    m = _LOC_FILE_RE.search(ir_text)
    return (m.group(1), int(m.group(2))) if m else None


def tensor_shapes(ttir_text: str) -> list[str]:
    """Every distinct tensor shape of the TTIR (`8x16`): the kernel's block sizes are their dimensions."""
    return sorted({m.group(1).rstrip("x") for m in _TENSOR_RE.finditer(ttir_text)}, key=lambda t: (t.count("x"), t))


def fits_shapes(config: dict[str, Any], shapes: list[tuple[int, ...]], *, squeezable: bool = False) -> bool:
    """The config's block sizes are the kernel's tensor dimensions: every block size other than 1 occurs
    in some shape as often as in the config (two blocks of 16 need a 16x16 tile), and a block of 1 shows
    as a dimension of the largest tile unless the kernel squeezes it away (Inductor's `no_x_dim`)."""
    blocks = list(block_sizes(config).values())
    if not shapes:
        return not blocks
    for v in set(blocks) - {1}:
        if not any(shape.count(v) >= blocks.count(v) for shape in shapes):
            return False
    if 1 in blocks and not squeezable:
        return 1 in _largest(shapes)
    return True


def _largest(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    def size(shape: tuple[int, ...]) -> tuple[int, int]:
        return math.prod(shape), len(shape)

    return max(shapes, key=size)


def tile_of_blocks(config: dict[str, Any], shapes: list[tuple[int, ...]]) -> bool:
    """The largest tensor shape's dimensions are all block sizes of the config (as a multiset). Kernels
    whose block sizes are not named *BLOCK* (a user's `BM`, `BN`, `BK`) offer every integer kwarg."""
    if not shapes:
        return False
    tile = _largest(shapes)
    kwargs = config.get("kwargs") or {}
    integers = [v for v in kwargs.values() if isinstance(v, int) and not isinstance(v, bool)]
    blocks = list(block_sizes(config).values()) or integers
    for d in tile:
        if d not in blocks:
            return False
        blocks.remove(d)
    return True


def block_sizes(config: dict[str, Any]) -> dict[str, int]:
    """The config's block sizes (kwargs named *BLOCK*), which the TTIR shapes show; other kwargs are not visible there."""
    kwargs = config.get("kwargs") or {}
    return {k: v for k, v in kwargs.items() if "BLOCK" in k.upper() and isinstance(v, int) and not isinstance(v, bool)}
