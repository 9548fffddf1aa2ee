"""Domain errors to GraphQL errors, in one place (contract 3.5).

A `SyncError` keeps its message and gets `extensions.code` (plus the current
version for CONFLICT and ALREADY_EXISTS, `retryable` for UNAVAILABLE). A parse or
validation error of the query keeps its standard GraphQL message and gets
BAD_USER_INPUT. Anything else is a bug: logged with its traceback, answered as
INTERNAL_SERVER_ERROR with no detail.
"""

from __future__ import annotations

import logging
from typing import Any

from graphql import GraphQLError

from api import request_log
from api.domain.errors import SyncError
from api.domain.records import CurrentVersionError, record_json

logger = logging.getLogger("api.errors")


def error_extensions(error: SyncError) -> dict[str, Any]:
    extensions: dict[str, Any] = {"code": error.code}
    if error.reason is not None:
        extensions["reason"] = error.reason
    if isinstance(error, CurrentVersionError):
        extensions["currentChangeToken"] = error.current.change_token
        extensions["current"] = record_json(error.current)
    if error.retryable:
        extensions["retryable"] = True
    if error.replayed:
        extensions["replayed"] = True
    return extensions


def to_graphql_error(error: GraphQLError) -> GraphQLError:
    original = error.original_error
    if isinstance(original, SyncError):
        error.extensions = error_extensions(original)
        return error
    if original is None or error.path is None:
        # Raised before any resolver ran: parsing, validation, variable coercion.
        error.extensions = {**(error.extensions or {}), "code": "BAD_USER_INPUT"}
        return error
    logger.error("unexpected error in %s", error.path, exc_info=original)
    return GraphQLError(
        "Internal server error",
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions={"code": "INTERNAL_SERVER_ERROR"},
    )


def with_codes(errors: list[GraphQLError]) -> list[GraphQLError]:
    """Map every error that has no code yet, and note the codes in the request log."""
    mapped = []
    for error in errors:
        if "code" not in (error.extensions or {}):
            error = to_graphql_error(error)
            log = request_log.current()
            if log is not None:
                log.codes.append(str((error.extensions or {}).get("code")))
        mapped.append(error)
    return mapped
