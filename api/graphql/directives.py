"""Schema directives of contract 2, and the permission that enforces `@isAuthenticated`."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.permission import BasePermission
from strawberry.schema_directive import Location

from api import request_log


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


class RequireValidToken(BasePermission):
    """Enforces `@isAuthenticated`: a valid bearer JWT, verified once per request."""

    def has_permission(self, source: Any, info: strawberry.Info, **kwargs: Any) -> bool:
        context = info.context
        if context.principal is None:
            context.principal = context.authenticator.authenticate(
                context.request.headers.get("authorization")
            )
            log = request_log.current()
            if log is not None:
                log.sub = context.principal.sub
        return True


def authenticated() -> dict[str, Any]:
    """Keyword arguments for `strawberry.field`: the directive and its enforcement together."""
    return {"directives": [IsAuthenticatedDirective()], "permission_classes": [RequireValidToken]}
