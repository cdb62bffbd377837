"""The import contract of gcc_dask (docs/architecture.rst, section 'Imports go one way').

The layers, and the rules beside them, are written in pyproject.toml (``[tool.importlinter]``) and checked by
import-linter's ``lint-imports``; a second test finds every import circle among the package's modules, module
by module (import-linter's own check squashes each package's modules together). Both read the source only.

Run ``python tests/test_architecture.py`` to print the circles, with the line of each import.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gcc_dask"


def test_the_import_contract_in_pyproject_is_kept():
    """``lint-imports`` over this checkout: every contract kept (a broken one is printed with its imports)."""
    pytest.importorskip("importlinter", reason="import-linter is in the [test] extra")
    exe = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    assert exe is not None, "lint-imports not found beside this Python: pip install -e '.[test]'"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([exe, "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    assert "0 broken" in report, report


def test_no_import_circle_among_the_modules():
    """No module of gcc_dask imports, directly or through others, a module that imports it (imports inside
    functions count: they make a circle as soon as both run)."""
    assert import_circles(PACKAGE) == []


def import_edges(package: Path) -> tuple[list[str], dict[str, dict[str, list[tuple[int, bool]]]]]:
    """The package's modules, and for each the modules of the package it imports: ``{importer: {imported:
    [(line, inside a function), ...]}}``. ``from pkg import sub`` counts as importing the module ``pkg.sub``."""
    modules: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, dict[str, list[tuple[int, bool]]]] = {}
    for module, (path, is_package) in modules.items():
        base = module if is_package else module.rpartition(".")[0]

        def add(target: str | None, node: ast.stmt, lazy: bool) -> None:
            if target and target != module:
                edges.setdefault(module, {}).setdefault(target, []).append((node.lineno, lazy))

        def visit(node: ast.AST, lazy: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        if alias.name.split(".")[0] == package.name:
                            add(resolve(alias.name), child, inner)
                elif isinstance(child, ast.ImportFrom):
                    if child.level:
                        parts = base.split(".")
                        parts = parts[:len(parts) - child.level + 1]
                        source = ".".join(parts + ([child.module] if child.module else []))
                    else:
                        source = child.module or ""
                    if source.split(".")[0] == package.name:
                        for alias in child.names:
                            sub = f"{source}.{alias.name}"
                            add(sub if sub in modules else resolve(source), child, inner)
                visit(child, inner)

        visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return list(modules), edges


def import_circles(package: Path) -> list[list[str]]:
    """Every import circle: the strongly connected components of more than one module (Tarjan), each sorted."""
    modules, edges = import_edges(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in modules:
        if v not in index:
            strong(v)
    return sorted(circles)


def main() -> int:
    """Print every circle with its imports; exit status 1 if there is one."""
    modules, edges = import_edges(PACKAGE)
    circles = import_circles(PACKAGE)
    print(f"{len(modules)} modules, {sum(len(t) for t in edges.values())} import edges (module level and inside "
          "functions)")
    if not circles:
        print("no import circle")
    for circle in circles:
        print(f"circle among {len(circle)} modules: {', '.join(circle)}")
        for a in circle:
            for b, where in sorted(edges.get(a, {}).items()):
                if b in circle:
                    lines = ", ".join(f"line {n}{' (inside a function)' if lazy else ''}"
                                      for n, lazy in sorted(set(where)))
                    print(f"    {a} -> {b}  [{lines}]")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
