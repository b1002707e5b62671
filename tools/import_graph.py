"""The shape of the package's import graph, for reviews and for the structure test.

``python -m tools.import_graph`` prints: modules, import edges (every import inside the
package, those under ``TYPE_CHECKING`` and inside functions included), import depth (the
longest chain of imports), import cycles, module counts per folder, repeated module
basenames, the largest classes and the ``type: ignore`` count per folder. ``--json``
prints the same as JSON.

Imports are read from the source with ``ast`` (nothing is imported), so an import that
only a type checker follows counts like any other.
"""

from __future__ import annotations

import argparse
import ast
import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

PACKAGE = "celery_delayq"
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class GraphReport:
    modules: int = 0
    edges: int = 0
    depth: int = 0
    deepest_chain: list[str] = field(default_factory=list)
    cycles: list[list[str]] = field(default_factory=list)
    modules_per_folder: dict[str, int] = field(default_factory=dict)
    repeated_basenames: dict[str, list[str]] = field(default_factory=dict)
    largest_classes: list[tuple[str, int, int]] = field(default_factory=list)
    type_ignores: dict[str, int] = field(default_factory=dict)


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    files = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``name`` imports, at any place in its source."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    # An import of a.b.c also runs a and a.b; those edges are the package's own
    # business, not this module's, so only the named module counts.
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module that ``start`` imports, directly or not."""
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph[node])
    return seen


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not."""
    reach = {node: reachable(graph, node) for node in graph}
    in_cycle = [node for node in sorted(graph) if node in reach[node]]
    groups: list[list[str]] = []
    for node in in_cycle:
        if not any(node in group for group in groups):
            groups.append([m for m in in_cycle if m in reach[node] and node in reach[m]])
    return groups


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest import chain (cycles are cut where a chain would revisit a module)."""
    best: dict[str, list[str]] = {}

    def chain(node: str, seen: frozenset[str]) -> list[str]:
        if node in best:
            return best[node]
        longest: list[str] = []
        for nxt in sorted(graph[node]):
            if nxt not in seen:
                candidate = chain(nxt, seen | {nxt})
                if len(candidate) > len(longest):
                    longest = candidate
        best[node] = [node, *longest]
        return best[node]

    return max((chain(node, frozenset({node})) for node in sorted(graph)), key=len)


def largest_classes(files: dict[str, Path], top: int = 5) -> list[tuple[str, int, int]]:
    """(class, lines, methods) of the largest classes, by lines."""
    classes = []
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = sum(
                    isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body
                )
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                classes.append((f"{name}.{node.name}", lines, methods))
    return sorted(classes, key=lambda c: -c[1])[:top]


def report(root: Path = ROOT) -> GraphReport:
    files = module_files(root)
    graph = {name: imports_of(name, path, set(files)) for name, path in files.items()}
    folders = Counter(
        path.parent.relative_to(root).as_posix()
        for path in files.values()
        if path.name != "__init__.py"
    )
    basenames = defaultdict(list)
    for path in files.values():
        if path.name not in ("__init__.py", "__main__.py"):
            basenames[path.name].append(path.relative_to(root).as_posix())
    ignores = Counter(
        path.parent.relative_to(root).as_posix()
        for path in files.values()
        for line in path.read_text().splitlines()
        if "type: ignore" in line
    )
    chain = longest_chain(graph)
    return GraphReport(
        modules=len(files),
        edges=sum(map(len, graph.values())),
        depth=len(chain) - 1,
        deepest_chain=chain,
        cycles=import_cycles(graph),
        modules_per_folder=dict(sorted(folders.items())),
        repeated_basenames={k: v for k, v in sorted(basenames.items()) if len(v) > 1},
        largest_classes=largest_classes(files),
        type_ignores=dict(sorted(ignores.items())),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to read")
    args = parser.parse_args()
    result = report(args.root)
    if args.json:
        print(json.dumps(asdict(result), indent=2))
        return
    print(f"modules {result.modules}, import edges {result.edges}, depth {result.depth}")
    print("deepest chain: " + " -> ".join(result.deepest_chain))
    print(f"cycles: {result.cycles or 'none'}")
    print("modules per folder:")
    for folder, count in result.modules_per_folder.items():
        print(f"  {count:3d}  {folder}")
    print(f"repeated basenames: {result.repeated_basenames or 'none'}")
    print("largest classes (lines, methods):")
    for name, lines, methods in result.largest_classes:
        print(f"  {lines:4d} {methods:3d}  {name}")
    print(f"type: ignore per folder: {result.type_ignores}")


if __name__ == "__main__":
    main()
