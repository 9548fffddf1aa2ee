"""The synchronized item types this product ships.

Adding a type, a field or an enum value: declare it here with the release that adds
it (`since`), then record the release (docs/evolution.md; `scripts/check` refuses a
change that would break a deployed client). A type's `code` is persisted in every
stored item; never rename it.
"""

from __future__ import annotations

import enum

from api.domain import releases
from api.domain.item_types import Field, FieldKind, ItemType, unknown_type
from api.domain.membership import OWNER


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


class MemberRole(enum.Enum):
    OWNER = "OWNER"
    WRITER = "WRITER"
    READER = "READER"


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

# Membership as data (contract 6): its id is the member's `sub`; only an owner
# writes one, and the first moves the tenant from its token claims to these records.
MEMBER = ItemType(
    name="Member",
    code="MEMBER",
    description="A member of the tenant and its role; the id is the member's `sub` "
    "(contract 6, membership as data).",
    fields=(
        Field(
            "role",
            FieldKind.ENUM,
            enum=MemberRole,
            since=2,
            required=True,
            description="Required. OWNER: everything, Member records and the tenant's "
            "deletion and export too; WRITER: writes records; READER: reads.",
        ),
        Field("displayName", max_length=200, since=2, description="How apps show the member."),
    ),
    since=2,
    write_role=OWNER,
    named_ids=True,
)

# Every release's types, as declared.
DECLARED: tuple[ItemType, ...] = (PERSON, REMINDER, MEMBER)

# What this process serves: the latest release of the declaration, unless a test
# picks an earlier one or a catalog of its own (api.domain.releases).
ALL_TYPES, ITEM_TYPES, RELEASE = releases.served(DECLARED)
BY_CODE = {t.code: t for t in ITEM_TYPES}


def of_code(code: str) -> ItemType:
    """The served type stored as `code`, or the stand-in of a later release's type."""
    return BY_CODE.get(code) or unknown_type(code)
