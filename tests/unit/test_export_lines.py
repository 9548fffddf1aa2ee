"""An export's lines of a sync's records (contract 3.9): a record that left the
caller's view is a `leftView` line holding a `LeftViewItem`, with no field."""

from __future__ import annotations

from datetime import UTC, datetime

from api.domain.records import Record
from api.domain.visibility import Visibility
from api.service.exports import _kind, _line
from tests.support import family


def test_a_left_view_is_a_left_view_line_without_fields() -> None:
    at = datetime(2026, 11, 28, tzinfo=UTC)
    left = Record(
        family.PERSON,
        "t",
        "p1",
        "01KAXW0000000000000000001A",
        at,
        at,
        fields={},
        owner="alice",
        visibility=Visibility("alice"),
        left_view=True,
    )
    assert _kind(left) == "leftView"
    assert _line(left) == {
        "__typename": "LeftViewItem",
        "id": "p1",
        "tenantID": "t",
        "changeToken": "01KAXW0000000000000000001A",
        "createdAt": "2026-11-28T00:00:00.000Z",
        "updatedAt": "2026-11-28T00:00:00.000Z",
        "writtenBy": None,
        "type": "PERSON",
    }
    kept = Record(family.PERSON, "t", "p2", "01KAXW0000000000000000002A", at, at)
    assert _kind(kept) == "entity" and _line(kept)["__typename"] == "Person"
