"""The package's import contract (DESIGN §1): layers import downwards only, the harness stands
apart, SimPy / torch / Typer / matplotlib each stay in their one package (import-linter, with the
contracts in pyproject.toml), and no module imports itself back through others (no cycles)."""

import grimp
import pytest
from importlinter.cli import lint_imports
from helpers import REPO


def test_import_contracts_in_pyproject_are_kept(capsys):
    code = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True)
    assert code == 0, capsys.readouterr().out[-4000:]  # the broken contracts, with their import chains


def _cycles(graph) -> list[list[str]]:
    """Each import that closes a loop: A imports B and B leads back to A, as the chain of modules."""
    loops = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                loops.append([importer, *back])
    return loops


def test_no_module_imports_itself_back():
    graph = grimp.build_graph("capsim", cache_dir=None)  # a cache can hold imports since removed
    # the package's own __init__ re-exports the public API: importing capsim.X runs it first, which is
    # not a dependency of X on the API, so the root module is left out of the cycle search.
    for imported in graph.find_modules_directly_imported_by("capsim"):
        graph.remove_import(importer="capsim", imported=imported)
    assert _cycles(graph) == []


@pytest.mark.parametrize("package", ["core", "spec", "workload", "cost", "sim", "results", "planning", "validation",
                                     "reference", "report", "cli", "harness"])
def test_every_package_says_what_it_holds_and_may_import(package):
    doc = (REPO / "simulator" / "capsim" / package / "__init__.py").read_text()
    assert doc.lstrip().startswith('"""') and "import" in doc.split('"""')[1]


def test_simpy_internals_are_touched_only_in_the_clock_module():
    """SimPy's private attributes (its clock, queue, event counter, an event's state) are read
    or written only in capsim/sim/clock.py, which says why; everything else uses SimPy's API."""
    import re

    private = re.compile(r"\benv\._|\._(now|eid|queue|ok|value|triggered|processed)\b")
    offenders = []
    for path in sorted((REPO / "simulator" / "capsim").rglob("*.py")):
        if path.name == "clock.py" and path.parent.name == "sim":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if private.search(line.split("#")[0]):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []


def test_no_source_file_is_over_400_lines():
    """DESIGN §7: files under about 400 lines; split along a seam instead of growing one."""
    long = {str(p.relative_to(REPO)): n for p in sorted((REPO / "simulator" / "capsim").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
