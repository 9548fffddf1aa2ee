"""The shape of a graphql-transport-ws message, checked before Strawberry's handler
reads it: that handler indexes whatever JSON arrives (`[]`, an `id` that is an
object, a list for a payload) and raises inside the ASGI app, which then closes
the socket with no code and logs a traceback. A message of the wrong shape closes
the socket 4400, the protocol's "invalid message", as other bad messages do."""

from __future__ import annotations

from typing import Any

_WITH_ID = frozenset({"subscribe", "complete", "next", "error"})
_OPTIONAL_OBJECTS = ("variables", "extensions")


def malformed(message: Any) -> str | None:
    """Why `message` is not a graphql-transport-ws message; None when it is one."""
    if not isinstance(message, dict):
        return "a message is a JSON object"
    kind = message.get("type")
    if not isinstance(kind, str):
        return "a message's type is a string"
    if kind in _WITH_ID and not isinstance(message.get("id"), str):
        return f"a {kind} message's id is a string"
    payload = message.get("payload")
    if kind != "subscribe":
        return None if payload is None or isinstance(payload, dict) else "payload is an object"
    if not isinstance(payload, dict) or not isinstance(payload.get("query"), str):
        return "a subscribe message's payload is an object with a query string"
    for name in _OPTIONAL_OBJECTS:
        if payload.get(name) is not None and not isinstance(payload[name], dict):
            return f"a subscribe message's {name} is an object"
    operation_name = payload.get("operationName")
    if operation_name is not None and not isinstance(operation_name, str):
        return "a subscribe message's operationName is a string"
    return None
