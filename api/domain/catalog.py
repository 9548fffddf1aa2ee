"""The synchronized item types this product ships.

Adding a type: declare an `ItemType` here and add it to `ITEM_TYPES`. Its
`code` is persisted in every stored item; never rename it.
"""

from __future__ import annotations

import enum

from api.domain.item_types import Field, FieldKind, ItemType


class RelationshipType(enum.Enum):
    SELF = "SELF"
    PARTNER = "PARTNER"
    CHILD = "CHILD"
    PARENT = "PARENT"
    SIBLING = "SIBLING"
    GRANDPARENT = "GRANDPARENT"
    GRANDCHILD = "GRANDCHILD"
    RELATIVE = "RELATIVE"
    FRIEND = "FRIEND"
    COLLEAGUE = "COLLEAGUE"
    OTHER = "OTHER"


PERSON = ItemType(
    name="Person",
    code="PERSON",
    description="A member of the tenant's family or team.",
    fields=(
        Field("givenName", max_length=200),
        Field("familyName", max_length=200),
        Field("dateOfBirth", FieldKind.DATE),
        Field("relationship", FieldKind.ENUM, enum=RelationshipType),
        Field("phoneNumber", max_length=50),
        Field("emailAddress", max_length=320),
        Field("profileColor", FieldKind.COLOR, description="#RRGGBB"),
        Field("occupation", max_length=200),
        Field("photo", FieldKind.ATTACHMENT, description="A picture of the person."),
    ),
)

REMINDER = ItemType(
    name="Reminder",
    code="REMINDER",
    description="Something to do, optionally for one person and by a due time.",
    fields=(
        Field("title", max_length=500),
        Field("notes", max_length=8000),
        Field("dueAt", FieldKind.TIME),
        Field("personID", FieldKind.ID, max_length=64, description="The Person it is about."),
        Field("completed", FieldKind.BOOLEAN),
        Field("file", FieldKind.ATTACHMENT, description="A document or picture it needs."),
    ),
)

ITEM_TYPES: tuple[ItemType, ...] = (PERSON, REMINDER)
BY_CODE = {t.code: t for t in ITEM_TYPES}
