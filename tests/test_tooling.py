"""Code-shape checks that are plain Python: module and class sizes, and which kdb package may import which.

ruff check, ruff format --check and mypy are not run here: they are their own step of `.ci/run` (before the
tests) and of `.pre-commit-config.yaml` (`pre-commit run --all-files`)."""

from __future__ import annotations

import ast
import re

from conftest import ROOT

MAX_MODULE_LINES = 450
MAX_PARAMETERS = 6  # more travel together as a parameter object (typer commands excepted: one per option)
MAX_CLASS_LINES = 250


def test_modules_and_classes_stay_small():
    too_big = []
    for path in sorted((ROOT / "kdb").rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_big.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                too_big.append(f"{path.relative_to(ROOT)}: class {node.name}")
    assert too_big == []


def test_no_function_takes_more_than_six_parameters():
    too_many = []
    for path in sorted((ROOT / "kdb").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if any(ast.unparse(d).startswith("app.command") for d in node.decorator_list):
                continue
            a = node.args
            names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
            count = len(names) + (a.vararg is not None) + (a.kwarg is not None) - (names[:1] in (["self"], ["cls"]))
            if count > MAX_PARAMETERS:
                too_many.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {count}")
    assert too_many == []


def test_the_diff_and_its_renderers_never_name_a_backend():
    """What a figure means on a backend is read from its roles (kdb/figures.py, kdb/analysis/*/figures.json)."""
    backend = re.compile(r"""["'](hip|cuda|amd|nvidia)["']""", re.IGNORECASE)
    named = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for package in ("diff", "report", "render")
        for path in sorted((ROOT / "kdb" / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if backend.search(line)
    ]
    assert named == []


def test_no_class_has_several_bases():
    """A class is one thing: parts it is made of are objects it holds (Catalog's roles, BlobStore's dictionaries and
    repair), not bases it mixes in."""
    mixed = [
        f"{path.relative_to(ROOT)}: {node.name}"
        for path in sorted((ROOT / "kdb").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and len(node.bases) > 1
    ]
    assert mixed == []


# Which kdb package may import which (first component under kdb; "kdb" is the package root's __version__).
# The data flow: cache dir -> ingest -> store + analysis -> catalog -> diff -> render -> cli.
ALLOWED_IMPORTS = {
    "errors": set(),
    # the figures and their roles (kdb/figures.py): each backend declares its roles in kdb/analysis/<vendor>
    "figures": set(),
    "render": set(),
    "triton": {"errors", "_speedups"},  # the compiled normalise_stage (kdb/_speedups.c)
    "analysis": {"errors", "triton", "figures"},
    "store": {"errors"},
    # ingest --replace links the replaced snapshot's imported profiles again (kdb/profile/importer.py: ProfileRelink)
    "ingest": {"kdb", "errors", "store", "analysis", "triton", "profile"},
    # profile files of a run: parsed (pure), linked to a snapshot's kernel folders, stored and recorded
    "profile": {"errors", "store"},
    # kdb as Triton's cache: files Triton puts are spooled, then recorded by the ingest (kdb/capture/)
    "capture": {"errors", "store", "ingest"},
    # diff and report read what a figure means on a backend from the backend registry (kdb/analysis/registry.py)
    "diff": {"errors", "store", "triton", "render", "analysis", "figures"},
    "report": {"errors", "diff", "render", "analysis", "figures"},
    # replay compiles a snapshot's stored TTIR with another Triton release and ingests the result (kdb/replay/)
    "replay": {"errors", "store", "ingest", "triton", "analysis", "figures", "diff"},
    # the Python API: what the CLI does, as values (the CLI may call it; it never calls the CLI)
    # (and records what captures left waiting for a tag before reading it: kdb/capture/cache.py record_waiting)
    "api": {"kdb", "errors", "store", "analysis", "ingest", "profile", "diff", "render", "report", "capture", "replay"},
    # every command parses its arguments, makes one call on kdb.api and renders what it returns (kdb/cli/terminal.py
    # and kdb/cli/progress.py, the CLI's own, are where it meets the terminal)
    "cli": {"errors", "render", "api"},
    "__main__": {"cli"},
}


def package_imports() -> dict[str, set[str]]:
    """kdb package -> the kdb packages its modules import (module level or inside functions)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "kdb").rglob("*.py")):
        rel = path.relative_to(ROOT / "kdb").with_suffix("").parts
        if rel == ("__init__",):
            continue
        package = rel[0]
        deps = graph.setdefault(package, set())
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = (
                    [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                    if node.module == "kdb"
                    else [node.module]
                )
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] != "kdb":
                    continue
                target = parts[1] if len(parts) > 1 else "kdb"
                if target == "__version__":
                    target = "kdb"
                if target != package:
                    deps.add(target)
    return graph


def test_packages_import_only_downstream():
    graph = package_imports()
    wrong = {p: sorted(deps - ALLOWED_IMPORTS[p]) for p, deps in graph.items() if deps - ALLOWED_IMPORTS.get(p, set())}
    assert wrong == {}
    # and the graph has no cycle
    seen: dict[str, int] = {}

    def visit(p: str) -> None:
        assert seen.get(p) != 1, f"import cycle through {p}"
        if seen.get(p) == 2:
            return
        seen[p] = 1
        for q in graph.get(p, ()):
            visit(q)
        seen[p] = 2

    for p in graph:
        visit(p)


# Two modules that import each other are one module in two files: neither can be read, tested or moved alone.
# Every import counts, wherever it sits: at module level, under `if TYPE_CHECKING:` (the types are part of what
# a module needs of the other) and inside functions (deferred for start-up time, still a dependency).
# The command modules (compare, fleet) register on the `app` of kdb.cli.common, which kdb.cli imports too: none.
KNOWN_CIRCLES: set[tuple[str, str]] = set()


def module_imports() -> dict[str, set[str]]:
    """kdb module (dotted name; a package is its __init__) -> the kdb modules it imports anywhere in its text:
    `from a.b import c` names module a.b.c when that is a module, else a.b."""
    files = {}
    for path in sorted((ROOT / "kdb").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module for a in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            deps.update(t for t in targets if t in files and t != name)
    return graph


def test_no_two_modules_import_each_other():
    graph = module_imports()
    assert "kdb.store.blobs" in graph["kdb.store.home"]  # the walk sees imports (this one sits in a function)
    circles = {tuple(sorted((a, b))) for a, deps in graph.items() for b in deps if a in graph.get(b, set())}
    assert circles - KNOWN_CIRCLES == set()


# `kdb.open` (kdb/__init__.py) imports kdb.api on first use: the one import from the package root up to the API,
# which itself reads the root's __version__.
FACADE = ("kdb", "kdb.api")


def test_no_module_import_cycle():
    """Nor do three or more modules import each other round (a -> b -> c -> a): the imports of all of kdb, every
    one wherever it sits, form no circle but the kdb.open facade."""
    graph = module_imports()
    assert FACADE[1] in graph[FACADE[0]]  # the facade is there, and is the one edge let through
    graph[FACADE[0]] = graph[FACADE[0]] - {FACADE[1]}
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (circle := visit(dep)):
                return circle
        path.pop()
        state[module] = 2
        return None

    circles = [c for m in sorted(graph) if m not in state and (c := visit(m))]
    assert circles == [], " -> ".join(circles[0])


CLI_MAY_IMPORT = ("kdb.api", "kdb.render", "kdb.errors")


def test_the_cli_imports_only_the_api_the_renderers_and_the_errors():
    """Every command parses its arguments, makes one call on kdb.api and renders what it returns: kdb/cli reaches
    nothing else of kdb (its own modules aside)."""
    graph = module_imports()
    cli = {m: deps for m, deps in graph.items() if m == "kdb.cli" or m.startswith("kdb.cli.")}
    assert "kdb.cli.compare" in cli and cli["kdb.cli.compare"]  # the walk sees the command modules' imports
    inside = ("kdb.cli", *CLI_MAY_IMPORT)
    outside = sorted(
        f"{m} imports {d}"
        for m, deps in cli.items()
        for d in deps
        if not any(d == x or d.startswith(f"{x}.") for x in inside)
    )
    assert outside == []


def test_every_package_is_installed_by_a_wheel():
    """pyproject.toml lists kdb's packages by name: one left out works in an editable install and is missing from
    a built wheel (kdb.profile and kdb.capture were, until a GPU machine installed kdb from the tree)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kdb").rglob("__init__.py")} | {"kdb.schema"}
    assert found == listed
