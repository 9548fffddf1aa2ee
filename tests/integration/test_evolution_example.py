"""docs/evolution.md's example followed in a copy of this checkout, as an app team
would: a field and an enum value declared in the catalog (api/domain/catalog.py,
edited as text) with `since` the next release, then `scripts/export-schema` and
`scripts/record-release`. The evolution check then passes, and so do the tests that
read the catalog (the unit tests, the writes' validation): a test that assumes the
catalog is at the release it is today fails here."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from api.domain import catalog, releases
from api.settings import PROJECT_ROOT

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
    """catalog.py's text with the doc's field (on Person) and enum value (on the enum
    of Person.relationship) declared `since` `release`; (text, field, value)."""
    person = catalog.PERSON
    relationship = next(f for f in person.fields if f.name == "relationship")
    assert relationship.enum is not None
    field = _unused("nickname", {f.name for f in person.fields}, release)
    value = _unused("COUSIN", set(relationship.enum.__members__), release)
    lines = source.splitlines(keepends=True)
    inserts: list[tuple[int, int, str]] = []  # (line index, column, text), applied last first
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == relationship.enum.__name__:
            # The member, on a line of its own after the enum's last one.
            inserts.append((node.end_lineno or 0, 0, f'    {value} = "{value}"\n'))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "Field"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "relationship"
        ):
            given = next((k for k in node.keywords if k.arg == "enum_since"), None)
            if given is None:  # `enum_since=((value, release),)` before the call's `)`
                at = (node.end_lineno or 0) - 1, (node.end_col_offset or 0) - 1
                inserts.append((*at, f', enum_since=(("{value}", {release}),)'))
            else:  # one more pair, first in the tuple
                at = given.value.lineno - 1, given.value.col_offset + 1
                inserts.append((*at, f'("{value}", {release}), '))
        elif (
            isinstance(node, ast.Assign)
            and getattr(node.targets[0], "id", None) == "PERSON"
            and isinstance(node.value, ast.Call)
        ):
            fields = next(k.value for k in node.value.keywords if k.arg == "fields")
            assert isinstance(fields, ast.Tuple) and fields.elts
            last = fields.elts[-1].end_lineno or 0
            text = f'        Field("{field}", max_length=100, since={release}),\n'
            inserts.append((last, 0, text))
    assert len(inserts) == 3, f"the catalog's shape changed: update this test ({inserts})"
    for index, column, text in sorted(inserts, reverse=True):
        if column == 0 and index == len(lines):
            lines.append(text)
        elif column == 0:
            lines.insert(index, text)
        else:
            lines[index] = lines[index][:column] + text + lines[index][column:]
    return "".join(lines), field, value


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
    path = copy / "api" / "domain" / "catalog.py"
    text, field, value = _follow_the_doc(path.read_text(), release)
    path.write_text(text)

    # scripts/export-schema, scripts/record-release, scripts/check's evolution step.
    strawberry = str(Path(sys.executable).with_name("strawberry"))
    schema = "api.graphql.schema:default_schema"
    _run(copy, strawberry, "export-schema", schema, "--output", "schema.graphql")
    assert f"  {value}\n" in (copy / "schema.graphql").read_text()
    recorded = _run(copy, sys.executable, "-m", "scripts.record_release")
    assert f"releases/{release}.json" in recorded, recorded
    checked = _run(copy, sys.executable, "-m", "scripts.evolution_check")
    assert f"keep releases 1 to {release}" in checked, checked
    assert f'"name": "{field}"' in (copy / "releases" / f"{release}.json").read_text()

    python = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    tested = _run(copy, *python, *AFFECTED, timeout=900)
    assert " passed" in tested and " failed" not in tested, tested[-3000:]
