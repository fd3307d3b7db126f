"""The import rules of ``docs/design.md``, as import-linter contracts in ``pyproject.toml``."""

from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    code = lint_imports(config_filename="pyproject.toml", no_cache=True, no_logo=True)
    assert code == 0, capsys.readouterr().out


def test_the_graph_the_contracts_read_sees_function_level_imports():
    """The CLI imports the tools inside a function: the contracts would see such an import anywhere
    in the library."""
    graph = grimp.build_graph("mlxe")
    assert graph.direct_import_exists(importer="mlxe.cli", imported="mlxe.tools.tune")
    assert graph.direct_import_exists(importer="mlxe.cli", imported="mlxe.tools.bench.cli")


def _circles(graph) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: set[frozenset[str]] = set()

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.add(frozenset(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return circles


def test_no_import_circle():
    """No module imports one that imports it back, directly or through others (a function-level
    import included): the layers hold inside each package too."""
    graph = grimp.build_graph("mlxe", exclude_type_checking_imports=True, cache_dir=None)
    assert _circles(graph) == set()


def test_a_circle_is_found():
    """The search finds a circle where there is one (the layers contract's own fixture would not)."""

    class Graph:
        modules = {"a", "b", "c"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}}

        def find_modules_directly_imported_by(self, module):
            return self.edges[module]

    assert _circles(Graph()) == {frozenset({"a", "b", "c"})}
