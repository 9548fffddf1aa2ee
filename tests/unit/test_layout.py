"""The code's shape, checked: small modules, and imports that go one way
(docs/layout.md): graphql -> service -> domain, storage implementing the
service's ports, and no module of api/ or scripts/ importing, however indirectly,
one that imports it."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "api"
MAX_LINES = 400  # a module past this holds more than one job (docs/layout.md)


def _modules() -> list[Path]:
    return sorted(API.rglob("*.py"))


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_module_is_over_the_limit() -> None:
    over = {
        str(path.relative_to(API.parent)): lines
        for path in _modules()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not over, f"modules over {MAX_LINES} lines (split them by job): {over}"


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("domain", ("api.service", "api.storage", "api.graphql", "api.realtime", "api.app")),
        ("service", ("api.storage", "api.graphql", "api.realtime", "api.app")),
        ("storage", ("api.graphql", "api.realtime", "api.app")),
    ],
)
def test_imports_go_one_way(package: str, forbidden: tuple[str, ...]) -> None:
    wrong = {
        f"{path.relative_to(API.parent)} imports {name}"
        for path in (API / package).rglob("*.py")
        for name in _imports(path)
        if name.startswith(forbidden)
    }
    assert not wrong, sorted(wrong)


def test_strawberry_types_are_declared_with_evaluated_annotations() -> None:
    """A module that declares GraphQL types or resolvers does not defer its
    annotations (`from __future__ import annotations`): Strawberry would then
    compile and evaluate each annotation's string at import, some 8 ms of the Lambda's
    cold start for the twelve modules (docs/cold-start.md)."""
    deferred = [
        str(path.relative_to(API.parent))
        for path in sorted((API / "graphql").glob("*.py"))
        if "import strawberry" in (text := path.read_text())
        and "from __future__ import annotations" in text
        and ("@strawberry." in text or "strawberry.type(" in text or "strawberry.field(" in text)
    ]
    assert not deferred, deferred


def _module_names(top: str) -> dict[str, Path]:
    """The modules of package `top` by dotted name (a package by its own name)."""
    names = {}
    for path in sorted((ROOT / top).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imported_modules(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that module `name` imports, wherever the import is (at
    the top, in a function, under TYPE_CHECKING: a lazy import still runs one way):
    `from package import module` names the module, `from module import name` the
    module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_import_cycle_among_the_modules_of_api_and_scripts() -> None:
    """A cycle makes a module's import depend on which one of the circle is imported
    first, and says that one job is split across modules that cannot be read apart:
    what the modules share belongs in one of them (or one of its own) that the
    others import."""
    known = {**_module_names("api"), **_module_names("scripts")}
    graph = {name: _imported_modules(name, path, known) for name, path in known.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as cycle:
        pytest.fail(f"an import cycle: {' -> '.join(reversed(cycle.args[1]))}")
