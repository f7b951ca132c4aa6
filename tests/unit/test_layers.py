"""The import graph under src/ stays one-way: no circles, no import from a lower layer up to a higher one.

The layer order is stated here and in docs/architecture.md ("Layers"); a package may import its own
layer and the layers below it, never one above. Every import counts, including the ones inside
functions (kept lazy for the start-up budget): a lazy import up the stack is still a dependency.
"""

from __future__ import annotations

import ast
import sys
import warnings
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# Lowest first. A module belongs to the first entry whose name is the module or a package above it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("kvdoctor.facts", "kvdoctor.errors", "kvdoctor.units", "kvdoctor.provenance", "kvdoctor.safeio",
              "kvdoctor")),
    ("evidence", ("kvdoctor.evidence",)),
    ("engine", ("kvdoctor.engine",)),
    ("ledger", ("kvdoctor.ledger",)),
    ("catalog", ("kvdoctor.catalog",)),
    ("deployment", ("kvdoctor.deployment",)),
    ("sim", ("kvdoctor.sim",)),
    ("chains", ("kvdoctor.chains",)),
    ("journal", ("kvdoctor.journal",)),
    ("report", ("kvdoctor.report",)),
    ("experiment", ("kvdoctor.experiment", "kvdoctor.testbed")),
    ("cli", ("kvdoctor.cli",)),
    ("entry", ("kvdoctor.entry", "kvdoctor.__main__")),
]

# Known breaches being removed by other work in flight, each with who owns the fix. A breach not
# listed fails the test; a listed one that is gone only warns (delete its line).
KNOWN_UPWARD: dict[tuple[str, str], str] = {}
KNOWN_CYCLES: dict[frozenset[str], str] = {}
KNOWN_PRIVATE: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(SRC.rglob("*.py")):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> tuple[set[str], set[str]]:
    """(kvdoctor modules ``name`` imports, private names it takes from other modules as mod.attr)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    private: set[str] = set()
    module_aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES:
                    found.add(a.name)
                    if a.asname:
                        module_aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod not in MODULES:
                continue
            for a in node.names:
                full = f"{mod}.{a.name}"
                if full in MODULES:
                    found.add(full)
                    module_aliases[a.asname or a.name] = full
                else:
                    found.add(mod)
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.add(full)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in module_aliases and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            private.add(f"{module_aliases[node.value.id]}.{node.attr}")
    found.discard(name)
    return found, {p for p in private if not p.startswith(name + ".")}


GRAPH: dict[str, set[str]] = {}
PRIVATE: dict[str, set[str]] = {}
for _n, _p in MODULES.items():
    GRAPH[_n], PRIVATE[_n] = _imports(_n, _p)


def layer_of(module: str) -> int:
    for i, (_, prefixes) in enumerate(LAYERS):
        for pre in prefixes:
            if module == pre or (pre != "kvdoctor" and module.startswith(pre + ".")):
                return i
    raise AssertionError(f"{module}: in no layer; add it to LAYERS here and in docs/architecture.md")


def _sccs(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components with more than one module (iterative-safe depth)."""
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
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
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read():
    # the parser sees the imports everyone knows are there (a test that cannot fail is worth nothing)
    assert "kvdoctor.ledger.shape" in GRAPH["kvdoctor.catalog.models"]
    assert "kvdoctor.facts.model" in GRAPH["kvdoctor.ledger.shape"]
    assert len(MODULES) > 60


def test_every_module_is_in_a_layer():
    for m in MODULES:
        layer_of(m)


def test_facts_import_nothing_from_kvdoctor():
    for m, deps in GRAPH.items():
        if m.startswith("kvdoctor.facts"):
            assert {d for d in deps if not d.startswith("kvdoctor.facts")} == set(), m


def test_no_import_runs_up_the_layers():
    upward = {(a, b) for a, deps in GRAPH.items() for b in deps if layer_of(b) > layer_of(a)}
    new = sorted(upward - set(KNOWN_UPWARD))
    assert not new, "imports from a lower layer up to a higher one:\n" + "\n".join(
        f"  {a} ({LAYERS[layer_of(a)][0]}) -> {b} ({LAYERS[layer_of(b)][0]})" for a, b in new)
    for gone in sorted(set(KNOWN_UPWARD) - upward):
        warnings.warn(f"test_layers: {gone} no longer imports upward; remove it from KNOWN_UPWARD", stacklevel=1)


def test_no_import_circles():
    cycles = [frozenset(c) for c in _sccs(GRAPH)]
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    assert not new, f"import circles: {new}"
    for gone in set(KNOWN_CYCLES) - set(cycles):
        warnings.warn(f"test_layers: circle {sorted(gone)} is gone; remove it from KNOWN_CYCLES", stacklevel=1)


def test_no_module_takes_another_modules_private_names():
    taken = {(a, p) for a, ps in PRIVATE.items() for p in ps}
    new = sorted(taken - set(KNOWN_PRIVATE))
    assert not new, "private names used from another module (make them public or move them):\n" + "\n".join(
        f"  {a} uses {p}" for a, p in new)
    for gone in sorted(set(KNOWN_PRIVATE) - taken):
        warnings.warn(f"test_layers: {gone} no longer used; remove it from KNOWN_PRIVATE", stacklevel=1)


def test_the_checks_catch_a_breach():
    # the rules themselves: an upward edge and a circle on a toy graph are caught
    toy = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert [sorted(c) for c in _sccs(toy)] == [["a", "b"]]
    assert layer_of("kvdoctor.cli.common") > layer_of("kvdoctor.ledger.build") > layer_of("kvdoctor.facts.model")
