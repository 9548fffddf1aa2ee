"""Item type declarations: validation, partial updates, size and id limits."""

from __future__ import annotations

import pytest

from api.domain.errors import BadUserInput
from api.domain.identifiers import check_identifier
from api.domain.item_types import MAX_ITEM_BYTES, apply_changes, check_size
from tests.support import release2
from tests.support.family import PERSON, REMINDER, RelationshipType


def test_valid_person_fields_are_normalized() -> None:
    changes = PERSON.normalize_changes(
        {
            "givenName": "Ann",
            "dateOfBirth": "1990-04-01",
            "relationship": RelationshipType["CHILD"],
            "profileColor": "#A1b2C3",
        }
    )
    assert changes == {
        "givenName": "Ann",
        "dateOfBirth": "1990-04-01",
        "relationship": "CHILD",
        "profileColor": "#A1b2C3",
    }


@pytest.mark.parametrize(
    "color", ["red", "#12345", "#1234567", "123456", "#GGGGGG", "#12 456", "", "#ffffff\n"]
)
def test_hex_color_is_validated(color: str) -> None:
    with pytest.raises(BadUserInput, match="profileColor"):
        PERSON.normalize_changes({"profileColor": color})


@pytest.mark.parametrize("value", ["1990-4-1", "19900401", "1990-02-30", "yesterday"])
def test_dates_are_validated(value: str) -> None:
    with pytest.raises(BadUserInput, match="dateOfBirth"):
        PERSON.normalize_changes({"dateOfBirth": value})


def test_times_are_normalized_to_utc_milliseconds() -> None:
    changes = REMINDER.normalize_changes({"dueAt": "2026-11-22T01:02:03.456789+01:00"})
    assert changes == {"dueAt": "2026-11-22T00:02:03.456Z"}
    with pytest.raises(BadUserInput, match="dueAt"):
        REMINDER.normalize_changes({"dueAt": "2026-11-22T01:02:03"})  # no offset


def test_strings_are_bounded() -> None:
    PERSON.normalize_changes({"givenName": "x" * 200})
    with pytest.raises(BadUserInput, match="givenName"):
        PERSON.normalize_changes({"givenName": "x" * 201})


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(BadUserInput):
        PERSON.normalize_changes({"title": "not a person field"})


def test_partial_update_rule() -> None:
    current = {"givenName": "Ann", "familyName": "Lee", "occupation": "pilot"}
    merged = apply_changes(current, {"familyName": "Kim", "occupation": None})
    assert merged == {"givenName": "Ann", "familyName": "Kim"}  # absent kept, null cleared
    assert current["occupation"] == "pilot"  # input untouched


def test_item_size_is_bounded() -> None:
    check_size({"notes": "x" * (MAX_ITEM_BYTES - 100)})
    with pytest.raises(BadUserInput, match="too large"):
        check_size({"notes": "x" * MAX_ITEM_BYTES})


@pytest.mark.parametrize(
    "value", ["", "a#b", "with space", "x" * 65, "-leading", "t1\n", "\u00e9", "a/b"]
)
def test_identifiers_that_could_break_keys_are_rejected(value: str) -> None:
    with pytest.raises(BadUserInput):
        check_identifier(value, "id")


@pytest.mark.parametrize(
    "value", ["t1", "01M806P8YE0JNMW7TSMJ956FTE", "6f1c2a9e-8b1d-4c1e-9f5e-2b7d3c4e5f60"]
)
def test_uuids_and_ulids_are_valid_ids(value: str) -> None:
    assert check_identifier(value, "id") == value


def test_a_copy_is_filed_under_the_newest_release_of_its_content() -> None:
    person, note = release2.PERSON, release2.NOTE
    assert person.copy_release({"givenName": "Ann"}) == 1
    assert person.copy_release({"givenName": "Ann", "nickname": "A"}) == 2
    assert person.copy_release({"relationship": "COUSIN"}) == 2
    assert note.copy_release({}) == 2
    # A server of release 1 keeps content it does not know (an update is partial),
    # so the copy stays under the release its previous version was filed under;
    # 9999 only when that was not recorded.
    (old_person,) = [t for t in release2.RELEASE_1 if t.code == "PERSON"]
    assert old_person.copy_release({"givenName": "Ann", "nickname": "A"}, stored=2) == 2
    assert old_person.copy_release({"relationship": "COUSIN"}, stored=2) == 2
    assert old_person.copy_release({"nickname": "A"}) == 9999
    assert old_person.copy_release({"givenName": "Ann"}, stored=2) == 1
