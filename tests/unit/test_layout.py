"""The code's shape, checked: small modules, and imports that go one way
(docs/layout.md): graphql -> service -> domain, storage implementing the
service's ports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[2] / "api"
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
