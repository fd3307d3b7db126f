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
