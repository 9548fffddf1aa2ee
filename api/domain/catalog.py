"""The synchronized item types this process serves: the app's, declared in its own
file (SYNC_CATALOG_FILE; api.domain.catalog_file, docs/evolution.md), and the API's
own (Member), declared here and merged with them. An app type cannot take a
built-in type's name or code.

The app's file is read once, at import (the GraphQL schema is built from it then):
a declaration the API cannot serve stops the process with the file, the line and
the type, field or enum value named.
"""

from __future__ import annotations

import enum
from dataclasses import replace

from api import settings
from api.domain import releases
from api.domain.catalog_file import AppCatalog, load
from api.domain.item_types import Field, FieldKind, ItemType, unknown_type
from api.domain.membership import GROUPS_FIELD, MAX_MEMBER_GROUPS, OWNER


class MemberRole(enum.Enum):
    OWNER = "OWNER"
    WRITER = "WRITER"
    READER = "READER"
    # A removed member (contract 6): its record stays, giving no access, so that an
    # owner may write it again (re-add it) under the same id. Served from the app's
    # `removedSince` release; an app that names none has no such role.
    REMOVED = "REMOVED"


# The roles of an app whose catalog names no `removedSince` (its one enum class).
_ROLES_ONLY: type[enum.Enum] = enum.Enum(  # type: ignore[misc]
    "MemberRole", {v: v for v in ("OWNER", "WRITER", "READER")}
)


_ROLE_DESCRIPTION = (
    "Required. OWNER: everything, Member records and the tenant's deletion and export "
    "too; WRITER: writes records; READER: reads"
)
_REMOVED_DESCRIPTION = "; REMOVED: no access (a removed member, written again: re-added)."


# Membership as data (contract 6): its id is the member's `sub`; only an owner
# writes one, and the first moves the tenant from its token claims to these records.
# Declared with since 1; an app's `builtinsSince` moves it to the release that
# first served it (`builtins`).
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
            required=True,
            description=_ROLE_DESCRIPTION + ".",
        ),
        Field("displayName", max_length=200, description="How apps show the member."),
        Field(
            GROUPS_FIELD,
            FieldKind.LIST,
            of=FieldKind.ID,
            max_length=64,
            max_items=MAX_MEMBER_GROUPS,
            description=f"The groups the member is in (at most {MAX_MEMBER_GROUPS}): a "
            "record shared with one of them is seen by the member (contract 3.12).",
        ),
    ),
    write_role=OWNER,
    named_ids=True,
)
BUILTIN: tuple[ItemType, ...] = (MEMBER,)
REMOVED = MemberRole.REMOVED.value


def builtins(
    since: int, removed_since: int | None = None, groups_since: int | None = None
) -> tuple[ItemType, ...]:
    """The API's own types as an app whose release `since` first served them declares
    them, with the Member role REMOVED from its release `removed_since` and the field
    Member.groups from its release `groups_since` (None: never)."""
    return tuple(
        replace(
            t,
            since=since,
            fields=tuple(
                f
                for f in (_builtin(f, since, removed_since, groups_since) for f in t.fields)
                if f is not None
            ),
        )
        for t in BUILTIN
    )


def _builtin(
    field: Field, since: int, removed_since: int | None, groups_since: int | None
) -> Field | None:
    if field.name == GROUPS_FIELD:
        return None if groups_since is None else replace(field, since=max(since, groups_since))
    if field.enum is not MemberRole:
        return replace(field, since=since)
    if removed_since is None:
        return replace(field, since=since, enum=_ROLES_ONLY)
    return replace(
        field,
        since=since,
        enum_since=((REMOVED, max(since, removed_since)),),
        description=_ROLE_DESCRIPTION + _REMOVED_DESCRIPTION,
    )


def declared_by(app: AppCatalog) -> tuple[ItemType, ...]:
    """Every release's types of an app: its own, then the API's."""
    return (*app.types, *builtins(app.builtins_since, app.removed_since, app.groups_since))


CHOICE = settings.catalog_choice()
# The app this process serves, as its file declares it.
APP = load(CHOICE.file, reserved=BUILTIN)
# Every release's types, as declared.
DECLARED: tuple[ItemType, ...] = declared_by(APP)
MEMBER = next(t for t in DECLARED if t.code == MEMBER.code)
# The app's release whose clients may set visibilities and are sent LeftViewItem
# (contract 3.12): an earlier release's, or one that declares none, gets a
# DeletedItem instead. The family app's is 3; an app's file says its own
# (`visibilitySince`; left out, None: no release of the app's clients knows them yet).
VISIBILITY_RELEASE: int | None = APP.visibility_since
# The app's release whose clients know groups (`groupsSince`; None: none yet): an
# earlier release's visibility inputs naming groups are BAD_USER_INPUT.
GROUPS_RELEASE: int | None = APP.groups_since
# The app's release whose clients know a Member's role REMOVED (None: none has it);
# an earlier release's client, or one that declares none, is sent a removed member's
# record as a DeletedItem (contract 6).
REMOVED_RELEASE: int | None = (
    None if APP.removed_since is None else max(APP.builtins_since, APP.removed_since)
)

# What this process serves: the latest release of the declaration, unless a test
# picks an earlier one or a catalog of its own (api.domain.releases).
ALL_TYPES, ITEM_TYPES, RELEASE = releases.served(DECLARED, CHOICE.module, CHOICE.release)
BY_CODE = {t.code: t for t in ITEM_TYPES}
BY_NAME = {t.name: t for t in ALL_TYPES}


def of_code(code: str) -> ItemType:
    """The served type stored as `code`, or the stand-in of a later release's type."""
    return BY_CODE.get(code) or unknown_type(code)
