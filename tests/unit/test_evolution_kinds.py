"""The evolution check (scripts/evolution_check.py, docs/evolution.md) on the field
kinds' attributes: a recorded release of a catalog with every kind
(tests/support/kinds.py), then each change of a kind, an item kind or a bound,
and of an object's sub-fields. Narrower is refused naming the field, wider passes
with a note; the record of release 1 reads as it did before the kinds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from api.domain.item_types import Field, FieldKind, ItemType
from scripts.evolution_check import check_catalog
from scripts.evolution_report import ADVICE, Report
from scripts.release_record import Record, entry_of
from tests.support import kinds

Types = tuple[ItemType, ...]


@pytest.fixture
def record(tmp_path: Path) -> Record:
    """Release 1 of the kinds' catalog, recorded."""
    recorded = Record(tmp_path / "releases")
    recorded.write(entry_of(kinds.DECLARED, 1), "")
    return recorded


def _changed(name: str, **changes: Any) -> Types:
    fields = tuple(replace(f, **changes) if f.name == name else f for f in kinds.TASK_1.fields)
    return (replace(kinds.TASK_1, fields=fields),)


def _sub_changed(name: str, sub: str, **changes: Any) -> Types:
    """The kinds' catalog with an address's sub-field changed (removed: no changes)."""
    address = next(f for f in kinds.TASK_1.fields if f.name == "address")
    subs = tuple(
        replace(f, **changes) if f.name == sub else f
        for f in address.fields
        if f.name != sub or changes
    )
    return _changed(name, fields=subs)


def _check(record: Record, declared: Types) -> Report:
    report = Report()
    check_catalog(report, record, declared)
    return report


def test_the_record_holds_each_kinds_attributes_and_the_unchanged_catalog_passes(
    record: Record,
) -> None:
    fields = {f["name"]: f for f in record.entry(1)["types"][0]["fields"]}
    assert fields["priority"] == {
        "name": "priority", "kind": "Int", "minimum": 1, "maximum": 5, "since": 1
    }  # fmt: skip
    assert fields["count"] == {"name": "count", "kind": "Int", "since": 1}
    assert fields["tags"] == {
        "name": "tags", "kind": "List", "of": "String", "maxItems": 5, "maxLength": 20, "since": 1
    }  # fmt: skip
    assert fields["checklist"]["fields"] == [
        {"name": "text", "kind": "String", "maxLength": 100},
        {"name": "done", "kind": "Boolean"},
    ]
    assert json.loads((record.folder / "1.json").read_text()) == record.entry(1)
    report = _check(record, kinds.DECLARED)
    assert report.ok and not report.notes, report.text()


@pytest.mark.parametrize(
    ("declared", "advice", "named"),
    [
        (_changed("priority", kind=FieldKind.FLOAT), "kind", "field Task.priority: a Int"),
        (_changed("score", kind=FieldKind.INT), "kind", "field Task.score: a Float became an Int"),
        (
            _changed("tags", of=FieldKind.ID),
            "kind",
            "field Task.tags: a List of String became a List of ID",
        ),
        (
            _changed("priority", minimum=2),
            "narrowed",
            "field Task.priority: minimum narrowed from 1 to 2",
        ),
        (
            _changed("priority", maximum=4),
            "narrowed",
            "field Task.priority: maximum narrowed from 5 to 4",
        ),
        (
            _changed("count", maximum=100),
            "narrowed",
            "field Task.count: maximum narrowed from None to 100",
        ),
        (
            _changed("ratio", minimum=0.5),
            "narrowed",
            "field Task.ratio: minimum narrowed from 0 to 0.5",
        ),
        (
            _changed("counts", minimum=1),
            "narrowed",
            "field Task.counts: minimum narrowed from 0 to 1",
        ),
        (
            _changed("tags", max_items=4),
            "narrowed",
            "field Task.tags: maxItems narrowed from 5 to 4",
        ),
        (
            _changed("tags", max_length=10),
            "narrowed",
            "field Task.tags: maxLength narrowed from 20 to 10",
        ),
        (_changed("checklist", max_items=9), "narrowed", "field Task.checklist: maxItems narrowed"),
        (
            _sub_changed("address", "city"),
            "removed",
            "field Task.address.city was removed or renamed",
        ),
        (
            _sub_changed("address", "floor", kind=FieldKind.STRING, minimum=None, maximum=None),
            "kind",
            "field Task.address.floor: a Int became a String (kind changed)",
        ),
        (
            _sub_changed("address", "latitude", maximum=80),
            "narrowed",
            "field Task.address.latitude: maximum narrowed from 90 to 80",
        ),
        (
            _sub_changed("address", "doorCodes", max_items=2),
            "narrowed",
            "field Task.address.doorCodes: maxItems narrowed from 3 to 2",
        ),
        (
            _sub_changed("address", "postalCode", max_length=5),
            "narrowed",
            "field Task.address.postalCode: maxLength narrowed from 10 to 5",
        ),
    ],
)
def test_a_breaking_change_of_a_kind_or_a_bound_is_refused_naming_the_field(
    record: Record, declared: Types, advice: str, named: str
) -> None:
    text = _check(record, declared).text()
    assert named in text, text
    assert ADVICE[advice].format(next=2) in text, text


def test_a_sub_field_added_to_a_recorded_object_is_refused(record: Record) -> None:
    """An app of the recorded release writes the whole object without it, and so
    clears it: the new sub-field goes in a new field."""
    address = next(f for f in kinds.TASK_1.fields if f.name == "address")
    declared = _changed("address", fields=(*address.fields, Field("country", max_length=2)))
    report = _check(record, declared)
    assert not report.ok
    assert "field Task.address: sub-field country was added" in report.text(), report.text()


def test_a_wider_bound_passes_with_a_note(record: Record) -> None:
    latitude: dict[str, Any] = {"minimum": -91, "maximum": None}
    widened: dict[str, dict[str, Any]] = {
        "priority": {"minimum": 0, "maximum": 10},
        "ratio": {"minimum": None},
        "tags": {"max_items": 50, "max_length": 40},
        "checklist": {"max_items": 20},
        "address": {
            "fields": tuple(
                replace(f, **latitude) if f.name == "latitude" else f for f in kinds.ADDRESS
            )
        },
    }
    fields = tuple(replace(f, **widened.get(f.name, {})) for f in kinds.TASK_1.fields)
    declared: Types = (replace(kinds.TASK_1, fields=fields),)
    report = _check(record, declared)
    assert report.ok, report.text()
    notes = "\n".join(report.notes)
    for what in [
        "field Task.priority: minimum widened from 1 to 0",
        "field Task.priority: maximum widened from 5 to 10",
        "field Task.ratio: minimum widened from 0 to None",
        "field Task.tags: maxItems widened from 5 to 50",
        "field Task.tags: maxLength widened from 20 to 40",
        "field Task.checklist: maxItems widened from 10 to 20",
        "field Task.address.latitude: minimum widened from -90 to -91",
        "field Task.address.latitude: maximum widened from 90 to None",
    ]:
        assert what in notes, notes


def test_a_refs_target_type_changed_or_its_kind_is_refused(tmp_path: Path) -> None:
    """Task.projectID (a Ref to Project, the tracker's release 2): a Ref to another
    type, or an ID, is a changed kind; the record names its type."""
    record = Record(tmp_path / "releases")
    for number in (1, 2):
        record.write(entry_of(kinds.ALL, number), "")
    fields = {f["name"]: f for f in record.entry(2)["types"][1]["fields"]}
    assert fields["projectID"] == {
        "name": "projectID",
        "kind": "Ref",
        "type": "Project",
        "since": 2,
    }
    assert _check(record, kinds.ALL).ok

    def task_with(**changes: Any) -> Types:
        return tuple(
            replace(t, fields=tuple(
                replace(f, **changes) if f.name == "projectID" else f for f in t.fields
            )) if t is kinds.TASK else t
            for t in kinds.ALL
        )  # fmt: skip

    report = _check(record, task_with(ref="Member"))
    assert not report.ok
    assert "field Task.projectID: a Ref to Project became a Ref to Member" in report.text()
    assert ADVICE["kind"].format(next=3) in report.text()
    report = _check(record, task_with(kind=FieldKind.ID, ref=None))
    assert "field Task.projectID: a Ref became an ID (kind changed)" in report.text()
