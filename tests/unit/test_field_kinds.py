"""The field kinds INT, FLOAT, LIST, OBJECT and REF (docs/contract.md, "Field kinds"):
each value checked, the declarations refused that the kinds cannot serve, the size
of a value counted as the JSON a client gets, and a double kept exactly by the
store's encoding. Through the API: tests/integration/test_field_kinds.py."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from api.domain.errors import BadUserInput
from api.domain.item_types import MAX_ITEM_BYTES, Field, FieldKind, ItemType, check_size
from api.storage.field_values import revived, stored
from tests.support.kinds import TASK, Stage


@pytest.mark.parametrize(
    ("changes", "normalized"),
    [
        ({"priority": 3, "count": 2.0}, {"priority": 3, "count": 2}),  # JSON's 2.0 is 2
        ({"count": -(2**31)}, {"count": -(2**31)}),
        ({"score": 1, "ratio": 0}, {"score": 1.0, "ratio": 0.0}),
        ({"stages": [Stage["DONE"], "TODO"]}, {"stages": ["DONE", "TODO"]}),
        ({"tags": []}, {"tags": []}),
        ({"address": {"city": "Oslo", "floor": None}}, {"address": {"city": "Oslo"}}),
        ({"checklist": [{"text": "a"}, {}]}, {"checklist": [{"text": "a"}, {}]}),
        ({"projectID": "01JD0000000000000000000000"}, {"projectID": "01JD0000000000000000000000"}),
        # A Member's id is its token subject (contract 6): a Ref to one takes it.
        ({"projectID": "auth0|5f7c8e"}, {"projectID": "auth0|5f7c8e"}),
        (
            {"days": ["2024-02-29"], "times": ["2026-11-21T23:02:38.1Z"]},
            {"days": ["2024-02-29"], "times": ["2026-11-21T23:02:38.100Z"]},
        ),
    ],
)
def test_valid_values_are_normalized(changes: dict[str, Any], normalized: dict[str, Any]) -> None:
    assert TASK.normalize_changes(changes) == normalized
    assert [type(v) for v in TASK.normalize_changes(changes).values()] == [
        type(v) for v in normalized.values()
    ]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("priority", True, "Task.priority: must be a whole number"),
        ("priority", 1.5, "Task.priority: must be a whole number"),
        ("priority", "3", "Task.priority: must be a whole number"),
        ("priority", 6, "Task.priority: must be at most 5"),
        ("count", 2**31, "Task.count: must be at most 2147483647"),
        ("count", -(2**31) - 1, "Task.count: must be at least -2147483648"),
        ("score", math.nan, "Task.score: must be a finite number"),
        ("score", math.inf, "Task.score: must be a finite number"),
        ("score", -math.inf, "Task.score: must be a finite number"),
        ("score", 10**400, "Task.score: must be a finite number"),
        ("score", False, "Task.score: must be a number"),
        ("score", "0.5", "Task.score: must be a number"),
        ("ratio", 1.5, "Task.ratio: must be at most 1"),
        ("tags", "a", "Task.tags: must be a list"),
        ("tags", ["a"] * 6, "Task.tags: must hold at most 5 items"),
        ("tags", ["a", None], "Task.tags: item 1 is null"),
        ("tags", ["a" * 21], "Task.tags: item 0: must be at most 20 characters"),
        ("tags", ["\ud800"], "Task.tags: item 0: must be valid Unicode"),
        ("counts", [True], "Task.counts: item 0: must be a whole number"),
        ("scores", [1.0, math.nan], "Task.scores: item 1: must be a finite number"),
        ("stages", ["LATER"], "Task.stages: item 0: must be one of TODO, DOING, DONE"),
        ("days", ["2024-02-30"], "Task.days: item 0:"),
        ("address", "Paris", "Task.address: must be an object"),
        ("address", {"country": "FR"}, "Task.address: has no sub-field 'country'"),
        ("address", {"street": {"name": "x"}}, "Task.address: street: must be a string"),
        ("address", {"floor": 1.5}, "Task.address: floor: must be a whole number"),
        ("address", {"latitude": math.inf}, "Task.address: latitude: must be a finite"),
        ("address", {"doorCodes": ["123456789"]}, "Task.address: doorCodes: item 0: must be"),
        ("checklist", [{"text": "x"}] * 11, "Task.checklist: must hold at most 10 items"),
        ("checklist", [{"text": "x", "sub": {}}], "Task.checklist: item 0: has no sub-field"),
        ("checklist", [["x"]], "Task.checklist: item 0: must be an object"),
        # A Ref: an id's form (api.domain.identifiers), not whether the record exists.
        ("projectID", "", "Task.projectID: must be the id of a Project"),
        ("projectID", "a#b", "Task.projectID: must be the id of a Project"),
        ("projectID", "a b", "Task.projectID: must be the id of a Project"),
        ("projectID", "-a", "Task.projectID: must be the id of a Project"),
        ("projectID", "p" * 257, "Task.projectID: must be the id of a Project"),
        ("projectID", 5, "Task.projectID: must be the id of a Project"),
        ("projectID", {"id": "p1"}, "Task.projectID: must be the id of a Project"),
    ],
)
def test_bad_values_are_refused_naming_the_field(field: str, value: Any, message: str) -> None:
    with pytest.raises(BadUserInput) as refused:
        TASK.normalize_changes({field: value})
    assert str(refused.value).startswith(message), str(refused.value)


_A = Field("a")
_REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"kind": FieldKind.INT, "maximum": 2**31}, "32 bits"),
    ({"kind": FieldKind.INT, "minimum": 0.5}, "32 bits"),
    ({"kind": FieldKind.INT, "minimum": True}, "32 bits"),
    ({"kind": FieldKind.FLOAT, "maximum": math.inf}, "finite"),
    ({"kind": FieldKind.FLOAT, "minimum": math.nan}, "finite"),
    ({"kind": FieldKind.INT, "minimum": 3, "maximum": 2}, "minimum is above maximum"),
    ({"kind": FieldKind.STRING, "maximum": 3}, "only INT and FLOAT"),
    ({"kind": FieldKind.LIST}, "a LIST holds one of"),
    ({"kind": FieldKind.LIST, "of": FieldKind.LIST}, "a LIST holds one of"),
    ({"kind": FieldKind.LIST, "of": FieldKind.ATTACHMENT}, "a LIST holds one of"),
    ({"kind": FieldKind.LIST, "of": FieldKind.COLOR}, "a LIST holds one of"),
    ({"kind": FieldKind.LIST, "of": FieldKind.INT, "max_items": 0}, "max_items"),
    ({"kind": FieldKind.LIST, "of": FieldKind.ENUM}, "an ENUM names its enum"),
    ({"kind": FieldKind.STRING, "of": FieldKind.INT}, "only a LIST declares"),
    ({"kind": FieldKind.OBJECT}, "declares its sub-fields"),
    ({"fields": (_A,)}, "only an OBJECT"),
    ({"kind": FieldKind.LIST, "of": FieldKind.OBJECT}, "declares its sub-fields"),
    ({"kind": FieldKind.OBJECT, "fields": (_A, _A)}, "two sub-fields"),
    ({"kind": FieldKind.OBJECT, "fields": (Field("a", since=2),)}, "x.a: a sub-field has"),
    (
        {"kind": FieldKind.OBJECT, "fields": (Field("a", deprecated="no"),)},
        "x.a: a sub-field has",
    ),
    ({"kind": FieldKind.OBJECT, "fields": (Field("p", FieldKind.ATTACHMENT),)}, "x.p: a sub"),
    ({"kind": FieldKind.REF}, "a REF names the type"),
    ({"kind": FieldKind.ID, "ref": "Project"}, "only a REF names a type"),
    ({"kind": FieldKind.LIST, "of": FieldKind.REF, "ref": "Project"}, "a LIST holds one of"),
    ({"kind": FieldKind.OBJECT, "fields": (Field("p", FieldKind.REF, ref="P"),)}, "x.p: a sub"),
]


@pytest.mark.parametrize(("declared", "refusal"), _REFUSED)
def test_declarations_the_kinds_cannot_serve_are_refused(
    declared: dict[str, Any], refusal: str
) -> None:
    with pytest.raises(ValueError, match=refusal):
        Field("x", **declared)


def test_an_object_in_an_object_is_refused_at_declaration() -> None:
    """Depth is one object: neither an object nor a list of objects inside one."""
    inner = Field("inner", FieldKind.OBJECT, fields=(_A,))
    with pytest.raises(ValueError, match="x.inner: a sub-field is one of"):
        Field("x", FieldKind.OBJECT, fields=(inner,))
    inner_list = Field("inner", FieldKind.LIST, of=FieldKind.OBJECT, fields=(_A,))
    with pytest.raises(ValueError, match="x.inner: a sub-field is one of"):
        Field("x", FieldKind.LIST, of=FieldKind.OBJECT, fields=(inner_list,))
    # A sub-field's own declaration is checked too (its bounds), as it is made.
    with pytest.raises(ValueError, match="n: an INT's bounds"):
        Field("x", FieldKind.OBJECT, fields=(Field("n", FieldKind.INT, maximum=2**40),))


def test_a_list_or_an_object_counts_as_the_json_a_client_gets() -> None:
    """A hundred 100-character strings of quotes: 10.4 KB as Python prints the list
    (what the size check counted), 20.3 KB as JSON, escaped, in every page."""
    quotes = ItemType(
        "Quotes",
        "QUOTES",
        (Field("lines", FieldKind.LIST, of=FieldKind.STRING, max_length=100, max_items=100),),
    )
    fields = quotes.normalize_changes({"lines": ['"' * 100] * 100})
    assert len(str(fields["lines"])) < MAX_ITEM_BYTES < len(json.dumps(fields["lines"]))
    with pytest.raises(BadUserInput, match="item is too large: 20"):
        check_size(fields)
    check_size(quotes.normalize_changes({"lines": ['"' * 100] * 70}))  # 14.2 KB as JSON


def test_a_task_at_its_bounds_is_counted_whole_so_an_accepted_one_is_within_an_item() -> None:
    """Every field at its bounds takes 19 KB: refused. Without its 100 ids, the rest
    is accepted, and its JSON (a page's item) is within MAX_ITEM_BYTES: a page of 100
    such records stays within 100 items' bytes."""
    at_bounds = TASK.normalize_changes(
        {
            "title": "é" * 200,
            "priority": 5,
            "count": -(2**31),
            "score": -1.7976931348623157e308,
            "ratio": 0.30000000000000004,
            "tags": ['"' * 20] * 5,
            "ids": ["i" * 64] * 100,
            "counts": [2**31 - 1] * 100,
            "scores": [-2.2250738585072014e-308] * 100,
            "flags": [False] * 100,
            "days": ["2024-02-29"] * 100,
            "times": ["2026-11-21T23:02:38.123Z"] * 100,
            "stages": ["DOING"] * 100,
            "address": {
                "street": "s" * 100,
                "city": "c" * 60,
                "postalCode": "p" * 10,
                "floor": -5,
                "latitude": -89.99999999999999,
                "doorCodes": ['"' * 8] * 3,
            },
            "checklist": [{"text": '"' * 100, "done": False}] * 10,
        }
    )
    with pytest.raises(BadUserInput, match="item is too large: 19"):
        check_size(at_bounds)
    del at_bounds["ids"]
    check_size(at_bounds)
    as_json = len(json.dumps(at_bounds, ensure_ascii=False, separators=(",", ":")).encode())
    assert 10_000 < as_json <= MAX_ITEM_BYTES


def test_doubles_are_stored_as_text_that_reads_back_the_same_double() -> None:
    edges = [0.1, 1e-300, 1.7976931348623157e308, -0.0, 5e-324, -2.5, 1 / 3, 2.0]
    fields = TASK.normalize_changes(
        {"score": -0.0, "scores": edges, "address": {"latitude": 1e-300}, "counts": [7]}
    )
    as_stored = stored(fields)
    assert as_stored["scores"] == [
        "0.1",
        "1e-300",
        "1.7976931348623157e+308",
        "-0.0",
        "5e-324",
        "-2.5",
        "0.3333333333333333",
        "2.0",
    ]
    assert as_stored["counts"] == [7] and as_stored["address"] == {"latitude": "1e-300"}
    back = revived(TASK, json.loads(json.dumps(as_stored)))
    assert [v.hex() for v in back["scores"]] == [v.hex() for v in edges]
    assert math.copysign(1, back["score"]) == -1 and back["address"]["latitude"] == 1e-300
    # A field this type does not declare (a later release's) stays as stored.
    assert revived(TASK, {"later": "0.5"}) == {"later": "0.5"}


def test_a_list_of_enums_is_filed_under_the_release_of_its_newest_value() -> None:
    """A copy's release (docs/evolution.md) counts each item of a list of enums, as it
    counts an enum field's value: a value a later release added, or one this server
    does not know (a later release's), moves the copy up."""
    stages = Field(
        "stages", FieldKind.LIST, of=FieldKind.ENUM, enum=Stage, enum_since=(("DONE", 3),)
    )
    task = ItemType("Task", "TASK", (stages,))
    assert task.copy_release({"stages": ["TODO", "DOING"]}) == 1
    assert task.copy_release({"stages": ["TODO", "DONE"]}) == 3
    assert task.copy_release({"stages": ["TODO", "LATER"]}, stored=4) == 4
    assert not task.renders({"stages": ["LATER"]})
    second = task.at(2)
    assert second is not None and second.fields[0].enum_values() == ("TODO", "DOING")
