"""An app's catalog file (api/domain/catalog_file.py, docs/evolution.md): the shipped
family example loaded from its file is the catalog the record and the schema hold,
and a declaration the API cannot serve is refused at start, naming the file, the line
and the type, field or enum value."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from api.domain import catalog, releases
from api.domain.catalog_file import CatalogError, load
from api.domain.item_types import FieldKind
from api.settings import DEFAULT_CATALOG_FILE, PROJECT_ROOT, catalog_choice
from scripts.release_record import Record, entry_of

FAMILY = PROJECT_ROOT / "examples" / "family"
TASKS = PROJECT_ROOT / "examples" / "tasks"


def test_the_default_app_is_the_family_example_read_from_its_file() -> None:
    assert catalog_choice({}).file == DEFAULT_CATALOG_FILE == FAMILY / "catalog.yaml"
    assert catalog.APP.path == FAMILY / "catalog.yaml"
    assert [t.name for t in catalog.DECLARED] == ["Person", "Reminder", "Member"]
    # What the app's file declares is, release by release, what was recorded.
    record = Record(FAMILY / "releases")
    assert record.numbers() == list(range(1, releases.latest(catalog.DECLARED) + 1))
    for number in record.numbers():
        assert entry_of(releases.at(catalog.DECLARED, number), number) == record.entry(number)


def test_the_family_apps_clients_know_who_sees_what_from_its_release_3() -> None:
    """Its file says so (visibilitySince): a client of release 1 or 2 of it, which
    predates visibilities, is sent DeletedItems and sets none (contract 3.12)."""
    assert (catalog.APP.builtins_since, catalog.APP.visibility_since) == (2, 3)
    assert catalog.VISIBILITY_RELEASE == 3
    # The task tracker's is its next release: its release 1 clients know DeletedItem only.
    assert load(TASKS / "catalog.yaml", reserved=catalog.BUILTIN).visibility_since == 2


def test_the_api_code_holds_no_app_type() -> None:
    source = (PROJECT_ROOT / "api" / "domain" / "catalog.py").read_text()
    for name in ("Person", "Reminder", "PERSON", "REMINDER", "RelationshipType"):
        assert name not in source


def _declare(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_every_kind_and_attribute_is_read(tmp_path: Path) -> None:
    path = _declare(
        tmp_path,
        """
        enums:
          Stage:
            values: [TODO, DONE, {name: LATER, since: 2}]
        types:
          Task:
            code: TASK
            description: A task.
            fields:
              title: {kind: String, maxLength: 80, required: true}
              priority: {kind: Int, minimum: 1, maximum: 5, description: One to five.}
              ratio: {kind: Float, minimum: 0, maximum: 1}
              stage: {kind: Enum, enum: Stage}
              tags: {kind: List, of: String, maxLength: 20, maxItems: 5, since: 2}
              place:
                kind: Object
                fields:
                  city: {kind: String, maxLength: 60}
                  floors: {kind: List, of: Int, maxItems: 3}
              old: {kind: Boolean, deprecated: Use stage.}
          Tag:
            code: TAG
            since: 2
            fields:
              name: {kind: ID, maxLength: 64}
        """,
    )
    app = load(path, reserved=catalog.BUILTIN)
    task, tag = app.types
    assert (task.name, task.code, task.description, task.since) == ("Task", "TASK", "A task.", 1)
    assert tag.since == 2 and app.builtins_since == 1 and app.visibility_since is None
    by_name = {f.name: f for f in task.fields}
    assert list(by_name) == ["title", "priority", "ratio", "stage", "tags", "place", "old"]
    assert by_name["title"].required and by_name["title"].max_length == 80
    assert (by_name["priority"].kind, by_name["priority"].minimum) == (FieldKind.INT, 1)
    assert by_name["priority"].description == "One to five."
    assert by_name["stage"].enum_values(1) == ("TODO", "DONE")
    assert by_name["stage"].enum_values() == ("TODO", "DONE", "LATER")
    tags = by_name["tags"]
    assert (tags.of, tags.max_items, tags.max_length, tags.since) == (FieldKind.STRING, 5, 20, 2)
    assert [s.name for s in by_name["place"].fields] == ["city", "floors"]
    assert by_name["old"].deprecated == "Use stage."
    assert releases.latest(app.types) == 2


@pytest.mark.parametrize(
    ("text", "line", "named"),
    [
        # A kind the API does not have.
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Decimal}\n",
            5,
            "T.a: kind is one of",
        ),
        # An attribute no field takes (a typo).
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Int, maximun: 3}\n",
            5,
            "T.a.maximun",
        ),
        # Bounds the kind refuses (field_kinds), an Int's outside 32 bits.
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Int, maximum: 1e12}\n",
            5,
            "T.a:",
        ),
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: String, minimum: 1}\n",
            5,
            "T.a: only INT",
        ),
        # An object in an object.
        (
            "types:\n  T:\n    code: T\n    fields:\n      a:\n        kind: Object\n"
            "        fields:\n          b: {kind: Object, fields: {c: {kind: Int}}}\n",
            5,
            "T.a.b: a sub-field is one of",
        ),
        # An enum not declared.
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Enum, enum: Nope}\n",
            5,
            "T.a: enum 'Nope'",
        ),
        # A field declared twice (YAML would keep the last silently).
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Int}\n      a: {kind: Int}\n",
            6,
            "a: is declared twice",
        ),
        # A since that is not a release.
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Int, since: 0}\n",
            5,
            "T.a: since is a release",
        ),
        # The API's own type's name, and its code.
        (
            "types:\n  Member:\n    code: PEOPLE\n    fields:\n      a: {kind: Int}\n",
            2,
            "Member: Member is the API's own type",
        ),
        (
            "types:\n  People:\n    code: MEMBER\n    fields:\n      a: {kind: Int}\n",
            2,
            "People: MEMBER is the API's own type",
        ),
        # Two types, one code.
        (
            "types:\n  A:\n    code: X\n    fields: {a: {kind: Int}}\n"
            "  B:\n    code: X\n    fields: {a: {kind: Int}}\n",
            5,
            "B: code X is A's too",
        ),
        # A field every item has already.
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Int}\n"
            "      createdAt: {kind: Time}\n",
            6,
            "T.createdAt: every item has it",
        ),
        # The release whose clients know who sees what, not a release.
        (
            "visibilitySince: first\ntypes:\n  T:\n    code: T\n    fields: {a: {kind: Int}}\n",
            1,
            "visibilitySince: visibilitySince is a release",
        ),
        # A Ref to a type the catalog does not declare, or not yet at its release.
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Ref, type: Nope}\n",
            5,
            "T.a: type 'Nope' is not declared",
        ),
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Ref, type: U}\n"
            "  U:\n    code: U\n    since: 2\n    fields: {b: {kind: Int}}\n",
            5,
            "T.a: type U is added in release 2, after the field's 1",
        ),
        # A Ref without its type; a type on a field of another kind.
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Ref}\n",
            5,
            "T.a: a REF names the type",
        ),
        (
            "types:\n  T:\n    code: T\n    fields:\n      a: {kind: ID, type: T}\n",
            5,
            "T.a: only a Ref names a type",
        ),
        # Not YAML.
        ("types: [\n", 2, "not YAML"),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_file_the_line_and_the_field(
    tmp_path: Path, text: str, line: int, named: str
) -> None:
    path = _declare(tmp_path, text)
    with pytest.raises(CatalogError) as refused:
        load(path, reserved=catalog.BUILTIN)
    message = str(refused.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert named in message, message


def test_a_server_of_a_bad_declaration_does_not_start(tmp_path: Path) -> None:
    path = _declare(
        tmp_path, "types:\n  T:\n    code: T\n    fields:\n      a: {kind: Int, maximum: x}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import api.graphql.schema"],
        env={"SYNC_CATALOG_FILE": str(path), "PATH": "/usr/bin:/bin"},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert f"CatalogError: {path}:5: T.a: maximum is a number" in done.stderr, done.stderr


def test_a_breaking_edit_of_an_apps_file_is_refused_by_its_evolution_check_naming_the_field(
    tmp_path: Path,
) -> None:
    """The task tracker's folder copied outside the checkout, its catalog edited as a
    team would (an Int's maximum narrowed, a String become an Int): the check of that
    app (SYNC_CATALOG_FILE) against its own releases/ refuses both, naming them."""
    shutil.copytree(TASKS, tmp_path / "tasks", ignore=shutil.ignore_patterns("clients"))
    path = tmp_path / "tasks" / "catalog.yaml"
    text = path.read_text()
    for before, after in (
        (
            "priority: {kind: Int, minimum: 1, maximum: 5}",
            "priority: {kind: Int, minimum: 1, maximum: 4}",
        ),
        ("title: {kind: String, maxLength: 200}", "title: {kind: Int}"),
    ):
        assert before in text
        text = text.replace(before, after)
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "scripts.evolution_check"],
        env={**os.environ, "SYNC_CATALOG_FILE": str(path)},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stdout
    assert "field Task.priority" in done.stdout and "field Task.title" in done.stdout, done.stdout
