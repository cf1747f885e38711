"""The shape of a package: its internal import graph, import cycles, module sizes and longest functions.

    python tests/helpers/code_report.py            # the ernie_ft package next to this script, as text
    python tests/helpers/code_report.py --json
    python tests/helpers/code_report.py --package path/to/pkg --top 20

Imports are read from the source (no module is imported), every import statement counts,
including those inside functions: a deferred import still makes a cycle, it only postpones it.
Imports under ``if __name__ == "__main__":`` belong to the program, not to the module: ``python -m
pkg.mod`` runs the file as a second module, ``__main__``, so they are edges of a node ``mod
(__main__)`` of their own (an entry point may import the command table that imports ``mod``).
``from . import x`` counts as
importing the module ``x`` when there is one. Importing
``pkg.a`` is not counted as importing ``pkg`` itself, although Python runs ``pkg/__init__.py``
first. tests/test_layout.py loads this file to keep the package acyclic. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_PACKAGE = Path(__file__).resolve().parents[2] / "ernie_ft"


@dataclass(frozen=True)
class Import:
    """One import of a package module: who imports what, in which file and line, and when it runs."""

    source: str
    target: str
    path: str
    """The importing file, relative to the package's parent directory."""
    line: int
    where: str
    """'module' (runs on import), 'function' (inside a def) or 'main' (under if __name__ == "__main__")."""

    @property
    def deferred(self) -> bool:
        return self.where != "module"

    def describe(self) -> str:
        when = {"module": "", "function": ", in a function", "main": ", in the __main__ block"}[self.where]
        return f"{self.path}:{self.line}{when}"


@dataclass(frozen=True)
class Function:
    name: str
    """Qualified name within its module, e.g. Parallel.prepare or train.<locals>.step."""
    path: str
    line: int
    lines: int
    """From the ``def`` line to the last line of the body."""


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file under ``package`` (a directory)."""
    package = Path(package)
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = [package.name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_package(module: str, files: dict[str, Path]) -> bool:
    return files[module].name == "__init__.py"


def _resolve(node: ast.ImportFrom, module: str, files: dict[str, Path]) -> str:
    """The absolute name ``from ... import`` reads from, relative dots resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module, files):
        base = base[:-1]  # a plain module's dots start from its package
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imported_names(node: ast.AST, module: str, files: dict[str, Path]) -> list[str]:
    """The modules of the package one import statement names (in order, without duplicates)."""
    names = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            # `import pkg.a.b` binds pkg and loads pkg.a.b: count the deepest module that exists
            parts = alias.name.split(".")
            for i in range(len(parts), 0, -1):
                if ".".join(parts[:i]) in files:
                    names.append(".".join(parts[:i]))
                    break
    elif isinstance(node, ast.ImportFrom):
        origin = _resolve(node, module, files)
        for alias in node.names:
            submodule = f"{origin}.{alias.name}"
            if submodule in files:  # from pkg import a, where a is a module
                names.append(submodule)
            elif origin in files:  # from pkg.a import name
                names.append(origin)
    return list(dict.fromkeys(names))


def _imports_in(tree: ast.Module, module: str, files: dict[str, Path], path: str) -> list[Import]:
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend(
                    Import(module, target, path, child.lineno, where)
                    for target in _imported_names(child, module, files)
                )
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "function")
            elif where == "module" and node is tree and _is_main_block(child):
                visit(child, "main")
            else:
                visit(child, where)

    visit(tree, "module")
    return found


def _is_main_block(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``"""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    return (
        len(sides) == 2
        and isinstance(node.test.ops[0], ast.Eq)
        and {getattr(s, "id", None) or getattr(s, "value", None) for s in sides} == {"__name__", "__main__"}
    )


def import_graph(package: Path) -> tuple[dict[str, set[str]], list[Import]]:
    """(module -> the package modules it imports, every import statement behind those edges) for ``package``."""
    files = module_files(package)
    graph, imports = {name: set() for name in files}, []
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for found in _imports_in(tree, name, files, path.relative_to(Path(package).parent).as_posix()):
            source = f"{name} (__main__)" if found.where == "main" else name
            graph.setdefault(source, set()).add(found.target)
            imports.append(found)
    return graph, imports


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` (Tarjan, iterative), each sorted, in a stable order."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return sorted(components)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import cycle as one closed path [a, b, ..., a]: the shortest through the first module of
    every strongly connected component with a cycle (several modules, or one importing itself)."""
    found = []
    for component in strongly_connected(graph):
        start = component[0]
        if len(component) == 1 and start not in graph.get(start, ()):
            continue
        members = set(component)
        parents, frontier = {}, [start]
        while frontier and start not in parents:  # breadth first: the shortest way back to start
            following = []
            for node in frontier:
                for succ in sorted(graph.get(node, ())):
                    if succ in members and succ not in parents:
                        parents[succ] = node
                        following.append(succ)
            frontier = following
        path, node = [start], parents[start]
        while node != start:
            path.append(node)
            node = parents[node]
        found.append([start, *reversed(path[1:]), start])
    return found


def describe_cycle(cycle: list[str], imports: list[Import]) -> str:
    """'a -> b -> a' with where each import is: 'pkg.a (pkg/a.py:3) -> pkg.b (pkg/b.py:10, in a function) -> pkg.a'."""
    first = {}
    for found in sorted(imports, key=lambda i: (["module", "function", "main"].index(i.where), i.line)):
        first.setdefault((found.source, found.target), found)  # the import that runs earliest
    steps = []
    for source, target in zip(cycle, cycle[1:]):
        found = first.get((source, target))
        steps.append(f"{source} ({found.describe()})" if found else source)
    return " -> ".join([*steps, cycle[-1]])


def imports_within(group: list[str], imports: list[Import]) -> list[Import]:
    """The import statements between modules of one cycle group: the edges to cut from."""
    members = set(group)
    return sorted(
        (i for i in imports if i.source in members and i.target in members), key=lambda i: (i.source, i.target, i.line)
    )


def module_sizes(package: Path) -> dict[str, int]:
    """Module -> number of lines."""
    return {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in module_files(package).items()}


def functions(package: Path) -> list[Function]:
    """Every function and method of ``package``, longest first (nested ones counted on their own too)."""
    root = Path(package).parent
    found = []

    def visit(node: ast.AST, prefix: str, path: Path) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(
                    Function(
                        prefix + child.name,
                        path.relative_to(root).as_posix(),
                        child.lineno,
                        child.end_lineno - child.lineno + 1,
                    )
                )
                visit(child, f"{prefix}{child.name}.<locals>.", path)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", path)
            else:
                visit(child, prefix, path)

    for path in module_files(package).values():
        visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "", path)
    return sorted(found, key=lambda f: (-f.lines, f.path, f.line))


def report(package: Path, top: int = 10) -> dict:
    """Everything the script prints, as plain data."""
    graph, imports = import_graph(package)
    eager = {(i.source, i.target) for i in imports if not i.deferred}
    groups = {c[0]: c for c in strongly_connected(graph)}
    return {
        "package": str(package),
        "imports": {name: sorted(targets) for name, targets in sorted(graph.items())},
        "deferred_only": {
            name: sorted(t for t in targets if (name, t) not in eager)
            for name, targets in sorted(graph.items())
            if any((name, t) not in eager for t in targets)
        },
        "cycles": [
            {
                "cycle": c,
                "description": describe_cycle(c, imports),
                "group": groups[c[0]],
                "imports_within_group": [
                    f"{i.source} -> {i.target} ({i.describe()})" for i in imports_within(groups[c[0]], imports)
                ],
            }
            for c in cycles(graph)
        ],
        "sizes": dict(sorted(module_sizes(package).items(), key=lambda item: (-item[1], item[0]))),
        "longest_functions": [asdict(f) for f in functions(package)[:top]],
    }


def cycle_lines(found: list[dict], short=lambda name: name) -> list[str]:
    """Report ``report()['cycles']`` as indented lines: each cycle, then every import within its group."""
    lines = []
    for cycle in found:
        lines.append(f"  {cycle['description']}")
        lines.append(
            f"    cycle group ({len(cycle['group'])} modules): {', '.join(short(m) for m in cycle['group'])}; "
            "imports within it:"
        )
        lines += [f"      {line}" for line in cycle["imports_within_group"]]
    return lines


def print_text(data: dict) -> None:
    package = Path(data["package"]).name

    def short(name: str) -> str:
        return name[len(package) + 1 :] if name.startswith(package + ".") else name

    print(
        f"import graph of {package} (module: the {package} modules it imports; "
        "* only inside functions or the __main__ block)"
    )
    for name, targets in data["imports"].items():
        deferred = set(data["deferred_only"].get(name, ()))
        print(f"  {short(name):14} {', '.join(short(t) + '*' * (t in deferred) for t in targets) or '-'}")
    print()
    print(f"import cycles: {len(data['cycles']) or 'none'}")
    for line in cycle_lines(data["cycles"], short):
        print(line)
    print()
    print(f"module sizes (lines; {sum(data['sizes'].values())} in all):")
    for name, lines in data["sizes"].items():
        print(f"  {lines:5}  {short(name)}")
    print()
    print(f"longest functions ({len(data['longest_functions'])}; lines from def to the end of the body):")
    for f in data["longest_functions"]:
        print(f"  {f['lines']:5}  {f['name']}  {f['path']}:{f['line']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--package", type=Path, default=DEFAULT_PACKAGE, help="package directory (default: ernie_ft)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--top", type=int, default=10, help="how many of the longest functions to list")
    args = parser.parse_args(argv)
    data = report(args.package, args.top)
    if args.json:
        print(json.dumps(data, indent=1, ensure_ascii=False))
    else:
        print_text(data)
    return 1 if data["cycles"] else 0


if __name__ == "__main__":
    sys.exit(main())
