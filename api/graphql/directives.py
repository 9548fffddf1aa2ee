"""Schema directives of contract 2, and the permission that enforces `@isAuthenticated`."""

from typing import Any

import strawberry
from strawberry.permission import BasePermission
from strawberry.schema_directive import Location


@strawberry.schema_directive(
    locations=[Location.FIELD_DEFINITION],
    name="isAuthenticated",
    print_definition=True,
)
class IsAuthenticatedDirective:
    """The field requires `Authorization: Bearer <JWT>`."""


@strawberry.schema_directive(
    locations=[Location.INPUT_FIELD_DEFINITION],
    name="hexColor",
    print_definition=True,
)
class HexColorDirective:
    """The value is a color in the form #RRGGBB (validated by the server)."""


@strawberry.schema_directive(
    locations=[Location.FIELD_DEFINITION, Location.INPUT_FIELD_DEFINITION],
    name="references",
    print_definition=True,
)
class ReferencesDirective:
    """The value is the id of a record of the named type (a Ref field, contract 3.2.1):
    only its form is checked; the record may be one the server has not seen yet, and
    a client resolves it in its own copy, which holds only what its member sees."""

    type: str


class RequireValidToken(BasePermission):
    """Enforces `@isAuthenticated`: the request's bearer JWT, verified once per request
    before its document was even parsed (`api.app`), must have been valid."""

    def has_permission(self, source: Any, info: strawberry.Info, **kwargs: Any) -> bool:
        info.context.caller()  # raises the coded error when there is no caller
        return True


def authenticated() -> dict[str, Any]:
    """Keyword arguments for `strawberry.field`: the directive and its enforcement together."""
    return {"directives": [IsAuthenticatedDirective()], "permission_classes": [RequireValidToken]}
