"""Release 2 of an app built on this API, as an app team would make it: the
product's catalog as release 1 declared it, plus a field, an enum value and a type.

Built on release 1 of the product's catalog, not on its latest: the product may
have released more since (an app team following docs/evolution.md adds this very
field and enum value), and these tests' release 2 stays the same.

A server serves it with SYNC_CATALOG=tests.support.release2 (its latest release)
or with SYNC_RELEASE=1 beside it (the same code, release 1's catalog: a rollback).
"""

from __future__ import annotations

import enum
from dataclasses import replace

from api.domain import catalog, releases
from api.domain.item_types import Field, FieldKind, ItemType

_FIRST = {t.name: t for t in releases.at(catalog.DECLARED, 1)}
_RELATIONSHIP = next(f for f in _FIRST["Person"].fields if f.name == "relationship")
assert _RELATIONSHIP.enum is not None

# Release 1's values, then release 2's.
RelationshipType: type[enum.Enum] = enum.Enum(  # type: ignore[misc]
    "RelationshipType", {**{v: v for v in _RELATIONSHIP.enum.__members__}, "COUSIN": "COUSIN"}
)


def _person() -> ItemType:
    person = _FIRST["Person"]
    fields = tuple(
        replace(f, enum=RelationshipType, enum_since=(("COUSIN", 2),))
        if f.name == "relationship"
        else f
        for f in person.fields
    )
    return replace(person, fields=(*fields, Field("nickname", max_length=100, since=2)))


PERSON = _person()
REMINDER = _FIRST["Reminder"]
NOTE = ItemType(
    name="Note",
    code="NOTE",
    description="A note about the family or team.",
    fields=(Field("text", max_length=4000), Field("personID", FieldKind.ID, max_length=64)),
    since=2,
)
DECLARED: tuple[ItemType, ...] = (PERSON, REMINDER, NOTE)
RELEASE_1 = releases.at(DECLARED, 1)
RELEASE_2 = releases.at(DECLARED, 2)
# A server's environment serving this catalog (its latest release, 2).
SERVER_ENV = {"SYNC_CATALOG": "tests.support.release2"}
