#!/usr/bin/env python3
"""Checks that the bench's imports run one way only (scripts/bench --smoke runs it):
  - the Python harness (bench/harness/*.py): the modules' imports of each other form a DAG;
  - the Rust bench program (bench/src/*.rs): its files' `crate::` paths form a DAG (main.rs,
    the crate root, declares the modules and is left out: a module may use its items).
Prints the cycles it finds and exits 1; prints one line and exits 0 otherwise."""

import ast
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def python_graph(package):
    """{module: {modules of the same package it imports}} of a flat package."""
    names = {p.stem for p in package.glob("*.py")}
    graph = {}
    for path in package.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module:
                    deps.add(node.module.split(".")[0])
                elif node.level == 1:
                    deps.update(a.name for a in node.names)
                elif node.module and node.module.startswith(package.name + "."):
                    deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[1] for a in node.names
                            if a.name.startswith(package.name + "."))
        graph[path.stem] = (deps & names) - {path.stem}
    return graph


def rust_graph(src):
    """{file stem: {stems it names through crate:: paths}} of a flat Rust crate, root left out."""
    stems = {p.stem for p in src.glob("*.rs")} - {"main", "lib"}
    graph = {}
    for path in src.glob("*.rs"):
        if path.stem in ("main", "lib"):
            continue
        text = path.read_text()
        used = set(re.findall(r"crate::(\w+)", text))
        for group in re.findall(r"crate::\{([^}]*)\}", text):
            used.update(re.findall(r"\b(\w+)\b", group))
        graph[path.stem] = (used & stems) - {path.stem}
    return graph


def cycles(graph):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    found = [(f"bench/harness: {' ↔ '.join(c)}") for c in cycles(python_graph(HERE / "harness"))]
    found += [(f"bench/src: {' ↔ '.join(c)}") for c in cycles(rust_graph(HERE / "src"))]
    for line in found:
        print(f"import cycle: {line}", file=sys.stderr)
    if not found:
        print("bench/layers.py: no import cycle in bench/harness nor in bench/src", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
