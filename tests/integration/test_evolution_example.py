"""docs/evolution.md's example followed in a copy of this checkout, as an app team
would: a field and an enum value declared in the app's catalog
(examples/family/catalog.yaml, edited as text) with `since` the next release, then
`scripts/export-schema`, `scripts/record-release` and `scripts/generate-clients`.
The evolution check then passes, and so do the tests that read the catalog (the
unit tests, the writes' validation): a test that assumes the catalog is at the
release it is today fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from api.domain import catalog, releases
from api.settings import PROJECT_ROOT
from tests.support import family

pytestmark = pytest.mark.slow  # a copy of the checkout, and a pytest run inside it

# What the copy's own test run covers: the tests that read the catalog and the
# record without a server process of their own (releases side by side,
# tests/integration/test_evolution.py, builds on release 1 whatever the catalog's).
AFFECTED = ["tests/unit", "tests/integration/test_writes.py"]


def _checkout_files() -> list[str]:
    """The checkout's files as they are (tracked, and new ones not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (PROJECT_ROOT / name).is_file()]


def _copy(to: Path) -> None:
    for name in _checkout_files():
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT_ROOT / name, to / name)
    (to / ".cache").symlink_to(PROJECT_ROOT / ".cache")  # DynamoDB Local, installed


def _unused(name: str, taken: set[str], release: int) -> str:
    """The doc's name, or, once the catalog has it (the product followed the doc),
    the same name marked with the release."""
    return name if name not in taken else f"{name}{release}"


def _follow_the_doc(source: str, release: int) -> tuple[str, str, str]:
    """The family app's catalog.yaml with the doc's field (on Person) and enum value
    (of Person.relationship's enum) declared `since` `release`; (text, field, value)."""
    person = family.PERSON
    relationship = next(f for f in person.fields if f.name == "relationship")
    assert relationship.enum is not None
    field = _unused("nickname", {f.name for f in person.fields}, release)
    value = _unused("COUSIN", set(relationship.enum.__members__), release)
    lines = source.splitlines(keepends=True)
    # The enum's values: a flow list `values: [...]` whose last line ends with `]`.
    at = next(i for i, line in enumerate(lines) if line.strip() == "RelationshipType:")
    end = next(i for i in range(at, len(lines)) if lines[i].rstrip().endswith("]"))
    lines[end] = lines[end].rstrip()[:-1] + f", {{name: {value}, since: {release}}}]\n"
    # The field: a line after Person's last field (the last line indented as one).
    at = next(i for i, line in enumerate(lines) if line.strip() == "Person:")
    fields = next(i for i in range(at, len(lines)) if lines[i].strip() == "fields:")
    indent = _indent(lines[fields + 1])
    last = fields + 1
    while last + 1 < len(lines) and lines[last + 1].strip() and _indent(lines[last + 1]) == indent:
        last += 1
    text = " " * indent + f"{field}: {{kind: String, maxLength: 100, since: {release}}}\n"
    lines.insert(last + 1, text)
    return "".join(lines), field, value


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _run(copy: Path, *args: str, timeout: float = 600) -> str:
    """A command of the copy, which imports the copy's code (PYTHONPATH: ahead of the
    virtual environment's editable install of this checkout)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    done = subprocess.run(
        list(args),
        cwd=copy,
        env={**env, "PYTHONPATH": str(copy)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_following_the_docs_example_passes_the_check_and_the_tests(tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    _copy(copy)
    release = releases.latest(catalog.DECLARED) + 1
    app = copy / "examples" / "family"
    path = app / "catalog.yaml"
    text, field, value = _follow_the_doc(path.read_text(), release)
    path.write_text(text)

    # scripts/export-schema, scripts/record-release, scripts/check's evolution step.
    strawberry = str(Path(sys.executable).with_name("strawberry"))
    schema = "api.graphql.schema:default_schema"
    # The family app's schema is the checkout's root schema.graphql.
    _run(copy, strawberry, "export-schema", schema, "--output", str(copy / "schema.graphql"))
    assert f"  {value}\n" in (copy / "schema.graphql").read_text()
    recorded = _run(copy, sys.executable, "-m", "scripts.record_release")
    assert f"examples/family/releases/{release}.json" in recorded, recorded
    clients = ("--catalog", str(path), "--out", str(app / "clients"), "--app-schema")
    _run(copy, sys.executable, "-m", "scripts.generate_clients", *clients)
    checked = _run(copy, sys.executable, "-m", "scripts.evolution_check")
    assert f"keep releases 1 to {release}" in checked, checked
    assert f'"name": "{field}"' in (app / "releases" / f"{release}.json").read_text()

    python = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    tested = _run(copy, *python, *AFFECTED, timeout=900)
    assert " passed" in tested and " failed" not in tested, tested[-3000:]
