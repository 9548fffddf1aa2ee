"""Member ids are token subjects (contract 6), and the role REMOVED is an app's from
its `removedSince` release: its file's key, checked, and the enum each release serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.domain import catalog, releases
from api.domain.catalog_file import CatalogError, load
from api.domain.cursor import CursorCodec, decode_catch_up, encode_catch_up
from api.domain.errors import BadUserInput
from api.domain.identifiers import check_entity_id

_TYPES = "types:\n  T:\n    code: T\n    fields: {a: {kind: Int}}\n"


@pytest.mark.parametrize(
    "sub",
    [
        "auth0|5f7c8ec7c33c6c004bbafe82",
        "google-oauth2|109876543210987654321",
        "samlp|acme|ann.lee+work@example.com",
        "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ=",
        "x" * 256,
    ],
)
def test_a_subject_is_a_member_id_and_only_a_member_id(sub: str) -> None:
    assert check_entity_id(sub, "id") == sub
    with pytest.raises(BadUserInput):
        check_entity_id(sub, "id", subjects=False)


@pytest.mark.parametrize(
    "sub", ["8f1c6a2e-3b7d-4e0a-9c55-2d4e6f708192", "001234.abcdef0123456789.1234"]
)
def test_a_subject_that_is_an_identifier_is_any_types_id(sub: str) -> None:
    assert check_entity_id(sub, "id") == check_entity_id(sub, "id", subjects=False) == sub


@pytest.mark.parametrize("bad", ["", "a#b", "a b", "|a", "-a", "x" * 257, "é", "a\n"])
def test_what_is_no_subject_is_refused(bad: str) -> None:
    with pytest.raises(BadUserInput):
        check_entity_id(bad, "id")


def test_a_catch_up_cursor_reached_at_an_id_holding_its_separator_reads_back() -> None:
    codec = CursorCodec("secret")
    reached = "KMEMBER:3:auth0|5f7c|x"
    cursor = encode_catch_up(codec, "t1", reached, "01H0000000000000000000000A", "MEMBER:3", None)
    assert decode_catch_up(codec, "t1", cursor, "01H0000000000000000000000A", "MEMBER:3") == (
        reached,
        None,
    )


def test_removed_is_served_from_the_apps_removed_since_release() -> None:
    assert catalog.REMOVED_RELEASE == 3
    role = next(f for f in catalog.MEMBER.fields if f.name == "role")
    assert role.enum_values(2) == ("OWNER", "WRITER", "READER")
    assert role.enum_values(3) == ("OWNER", "WRITER", "READER", "REMOVED")
    member_2 = next(t for t in releases.at(catalog.DECLARED, 2) if t.code == "MEMBER")
    assert "REMOVED" not in member_2.fields[0].enum.__members__  # type: ignore[union-attr]


def test_an_app_naming_no_removed_since_has_no_removed_role(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(_TYPES)
    app = load(path, reserved=catalog.BUILTIN)
    member = catalog.declared_by(app)[-1]
    assert member.fields[0].enum_values() == ("OWNER", "WRITER", "READER")
    assert releases.latest(catalog.declared_by(app)) == 1


def test_removed_since_before_builtins_since_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("builtinsSince: 2\nremovedSince: 1\n" + _TYPES)
    with pytest.raises(CatalogError, match=r":2: removedSince: is no earlier than builtinsSince"):
        load(path, reserved=catalog.BUILTIN)
