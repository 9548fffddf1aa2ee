"""scripts/check's catalog evolution check (scripts/evolution_check.py,
docs/evolution.md): each change that would break a client or a server of a recorded
release is refused with a message naming it and saying what to do instead; additions
pass once their release is recorded; the product's own record passes. Whatever
release the product's catalog is at: the tests take it from the catalog and the
record (releases/), and their own additions build on release 1
(tests/apps/release2/catalog.yaml, read by tests/support/release2.py)."""

from __future__ import annotations

import enum
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from api.domain import catalog, releases
from api.domain.item_types import Field, FieldKind, ItemType
from scripts.evolution_check import run
from scripts.evolution_report import ADVICE, Report
from scripts.record_release import record_release
from scripts.release_record import ROOT, SCHEMA_FILE, Record, entry_of
from tests.support import family, release2

SDL = SCHEMA_FILE.read_text()
# Release 1's schema as recorded (the record is append-only): what
# tests/support/release2.py's additions are added to.
SDL_1 = Record().sdl(1) or ""
Types = tuple[ItemType, ...]
NEXT = releases.latest(catalog.DECLARED) + 1  # the product's next release


@pytest.fixture
def record(tmp_path: Path) -> Record:
    """Every release of the product, recorded (as releases/ holds them)."""
    recorded, product = Record(tmp_path / "releases"), Record()
    for number in product.numbers():
        recorded.write(product.entry(number), product.sdl(number) or "")
    return recorded


@pytest.fixture
def first_release(tmp_path: Path) -> Record:
    """Release 1 of the product alone, recorded: what release2's additions follow."""
    recorded = Record(tmp_path / "first")
    recorded.write(Record().entry(1), SDL_1)
    return recorded


def _check(record: Record, declared: Types, sdl: str = SDL) -> Report:
    return run(record, declared, sdl, repo=None)


def _refused(report: Report, advice: str, *fragments: str) -> str:
    """The report's text, asserted to refuse with `advice` and name each fragment."""
    text = report.text()
    assert not report.ok, "the check passed"
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    assert ADVICE[advice].format(next=report.next_release) in text, text
    return text


def _with_field(field_name: str, type_name: str = "Person", **changes: Any) -> Types:
    """The product's catalog with one field changed (or removed: no changes)."""

    def fields(t: ItemType) -> tuple[Field, ...]:
        if t.name != type_name:
            return t.fields
        return tuple(
            replace(f, **changes) if f.name == field_name else f
            for f in t.fields
            if f.name != field_name or changes
        )

    return tuple(replace(t, fields=fields(t)) for t in catalog.DECLARED)


def test_the_products_record_holds_its_releases_and_the_repository_passes() -> None:
    assert Record().numbers() == list(range(1, releases.latest(catalog.DECLARED) + 1))
    assert Record().entry(1) == entry_of(releases.at(catalog.DECLARED, 1), 1)
    # schema.graphql may have grown since (a query outside the catalog), not broken.
    report = run(Record(), catalog.DECLARED, SDL, ROOT)
    assert report.ok, report.text()


def test_removing_an_enum_value_is_refused(record: Record) -> None:
    narrowed = enum.Enum(  # type: ignore[misc]
        "RelationshipType", {v: v for v in family.RelationshipType.__members__ if v != "OTHER"}
    )
    report = _check(record, _with_field("relationship", enum=narrowed))
    _refused(report, "removed", "enum value RelationshipType.OTHER was removed or renamed")
    sdl = SDL.replace("  COLLEAGUE\n  OTHER\n", "  COLLEAGUE\n")
    report = _check(record, catalog.DECLARED, sdl)
    _refused(
        report, "removed", "VALUE_REMOVED_FROM_ENUM: Enum value RelationshipType.OTHER was removed"
    )


def test_removing_a_field_is_refused(record: Record) -> None:
    report = _check(record, _with_field("occupation"))
    _refused(report, "removed", "field Person.occupation was removed or renamed")


def test_renaming_a_field_is_refused(record: Record) -> None:
    report = _check(record, _with_field("occupation", name="job"))
    _refused(
        report, "removed", "field Person.occupation was removed or renamed (is it Person.job?)"
    )


def test_reusing_or_changing_a_code_is_refused(record: Record) -> None:
    note = ItemType(name="Note", code="REMINDER", fields=(Field("text"),), since=NEXT)
    reminder = replace(family.REMINDER, code="TODO")
    declared = tuple(reminder if t is family.REMINDER else t for t in catalog.DECLARED)
    report = _check(record, (*declared, note))
    _refused(
        report,
        "code",
        "code REMINDER, recorded for type Reminder, is reused by type Note",
        "type Reminder's code changed from REMINDER to TODO",
    )


def test_changing_a_fields_kind_is_refused(record: Record) -> None:
    report = _check(record, _with_field("completed", "Reminder", kind=FieldKind.STRING))
    _refused(report, "kind", "field Reminder.completed: a Boolean became a String (kind changed)")


def test_narrowing_max_length_is_refused_and_widening_passes(record: Record) -> None:
    report = _check(record, _with_field("givenName", max_length=100))
    _refused(report, "narrowed", "field Person.givenName: maxLength narrowed from 200 to 100")
    report = _check(record, _with_field("givenName", max_length=300))
    assert report.ok, report.text()
    assert "maxLength widened from 200 to 300" in report.text()


def test_a_string_become_a_color_is_refused(record: Record) -> None:
    report = _check(record, _with_field("occupation", kind=FieldKind.COLOR))
    _refused(report, "narrowed", "field Person.occupation: a String became a Color (a narrower")


def test_adding_a_required_argument_is_refused(record: Record) -> None:
    old = "  person(tenantID: ID!, id: ID!): Person @isAuthenticated\n"
    assert old in SDL
    sdl = SDL.replace(old, old.replace("id: ID!)", "id: ID!, region: String!)"))
    report = _check(record, catalog.DECLARED, sdl)
    _refused(
        report,
        "required",
        "REQUIRED_ARG_ADDED: A required argument Query.person(region:) was added",
    )


def test_moving_a_recorded_entry_to_a_later_release_is_refused(record: Record) -> None:
    report = _check(record, _with_field("occupation", since=NEXT))
    _refused(report, "moved", "field Person.occupation, recorded in release 1, is now declared")


def test_an_addition_passes_only_once_its_release_is_recorded(first_release: Record) -> None:
    record = first_release
    sdl = SDL_1.replace("  OTHER\n", "  OTHER\n  COUSIN\n", 1)
    report = _check(record, release2.DECLARED, sdl)
    _refused(
        report,
        "unrecorded",
        "release 2 is not recorded; it adds type Member, type Note, field Member.displayName, "
        "field Member.role, field Note.personID, field Note.text, field Person.nickname, "
        "enum value MemberRole.OWNER, enum value MemberRole.READER, enum value "
        "MemberRole.WRITER, enum value RelationshipType.COUSIN",
        "VALUE_ADDED_TO_ENUM: Enum value RelationshipType.COUSIN was added",
    )
    assert any("VALUE_ADDED_TO_ENUM" in what for _, what in report.problems)
    # Declared into release 1, which shipped without it: refused, and not recordable.
    early = replace(release2.NOTE, since=1)
    declared = (release2.PERSON, release2.REMINDER, early)
    refused, written = record_release(record, declared, sdl, repo=None)
    assert written == []
    _refused(refused, "moved", "type Note is declared in release 1 (since=1), which was recorded")
    report, written = record_release(record, release2.DECLARED, sdl, repo=None)
    assert [p.name for p in written] == ["2.json", "2.graphql"]
    assert report.ok, report.text()
    assert _check(record, release2.DECLARED, sdl).ok
    # Recorded, the catalog's schema passes; an addition outside the catalog (an
    # optional argument) passes too, and is named.
    person = "  person(tenantID: ID!, id: ID!): Person @isAuthenticated\n"
    assert person in sdl
    report = _check(
        record, release2.DECLARED, sdl.replace("id: ID!): Person", "id: ID!, at: ID): Person")
    )
    assert report.ok, report.text()
    assert "OPTIONAL_ARG_ADDED: An optional argument Query.person(at:)" in report.text()


def test_record_release_refuses_a_breaking_change(first_release: Record) -> None:
    record = first_release
    declared = tuple(
        replace(t, fields=t.fields[1:]) if t.name == "Person" else t for t in release2.DECLARED
    )
    report, written = record_release(record, declared, SDL_1, repo=None)
    assert written == [] and record.numbers() == [1]
    _refused(report, "removed", "field Person.givenName was removed or renamed")


def test_a_deprecated_field_is_marked_in_the_schema() -> None:
    """What the refusals advise can be done: a field is marked @deprecated, kept."""
    import strawberry
    from strawberry.schema.config import StrawberryConfig

    from api.graphql.scalars import SCALAR_MAP
    from api.graphql.types import build, build_item_type_schema

    memo = ItemType("Memo", "MEMO", (Field("title", deprecated="Use text."), Field("text")))
    built = build_item_type_schema(memo)
    query = strawberry.type(build("Query", {"memo": built.object_type | None}, {"memo": None}))
    config = StrawberryConfig(scalar_map=SCALAR_MAP)
    printed = str(strawberry.Schema(query=query, types=[built.partial], config=config))
    assert printed.count('title: String @deprecated(reason: "Use text.")') == 2, printed
    assert "text: String\n" in printed
