"""Who sees a record (contract 3.12), as GraphQL types: `Visibility` on every
synchronized item, and `VisibilityInput` on creations, put states and
`setVisibility` (`api.graphql.visibility`)."""

from typing import Any

import strawberry

from api.domain.catalog import GROUPS_RELEASE, VISIBILITY_RELEASE
from api.domain.errors import BadUserInput
from api.domain.visibility import Visibility as DomainVisibility


@strawberry.type(
    description="Who sees a record besides no one else: its owner, the members it is "
    "shared with and the members of the groups it is shared with (both empty: private to "
    "its owner). A record without one is seen by the whole tenant."
)
class Visibility:
    owner: strawberry.ID
    sharedWith: list[strawberry.ID]
    groups: list[strawberry.ID] = strawberry.field(
        description="The groups it is shared with: members whose Member record lists one see it."
    )


_SINCE = (
    f"Catalog release {VISIBILITY_RELEASE} and later."
    if VISIBILITY_RELEASE is not None
    else "No release of this app's catalog yet (its visibilitySince)."
)


_GROUPS_SINCE = (
    f"Catalog release {GROUPS_RELEASE} and later."
    if GROUPS_RELEASE is not None
    else "No release of this app's catalog yet (its groupsSince)."
)


@strawberry.input(
    description="Who may see a record: its owner (null: the writer, or the record's owner) "
    f"and at most 20 members and groups it is shared with (both []: private). {_SINCE}"
)
class VisibilityInput:
    owner: strawberry.ID | None = None
    sharedWith: list[strawberry.ID] = strawberry.field(default_factory=list)
    groups: list[strawberry.ID] = strawberry.field(
        default_factory=list,
        description=f"The groups it is shared with. {_GROUPS_SINCE}",
    )


def to_visibility(visibility: DomainVisibility | None) -> Visibility | None:
    if visibility is None:
        return None
    return Visibility(
        owner=strawberry.ID(visibility.owner),
        sharedWith=[strawberry.ID(s) for s in visibility.shared_with],
        groups=[strawberry.ID(g) for g in visibility.groups],
    )


def from_input(value: Any, release: int | None) -> tuple[DomainVisibility | None, bool]:
    """The visibility an input asks for, and whether it asks for one (absent: no).
    An app that declares a release before the app's VISIBILITY_RELEASE (any, when its
    catalog names none) may not set one."""
    if value is None or value is strawberry.UNSET:
        return None, False
    if release is not None and (VISIBILITY_RELEASE is None or release < VISIBILITY_RELEASE):
        needed = "a release its catalog names (visibilitySince)"
        if VISIBILITY_RELEASE is not None:
            needed = f"catalog release {VISIBILITY_RELEASE}"
        raise BadUserInput(f"visibility needs {needed}; this app declares {release}")
    groups = value.groups or []
    if groups and release is not None and (GROUPS_RELEASE is None or release < GROUPS_RELEASE):
        needed = "a release its catalog names (groupsSince)"
        if GROUPS_RELEASE is not None:
            needed = f"catalog release {GROUPS_RELEASE}"
        raise BadUserInput(f"visibility.groups needs {needed}; this app declares {release}")
    return DomainVisibility.of(value.owner, value.sharedWith, groups), True
