"""Query and Mutation: thin resolvers that parse, call `SyncService`, map the result."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional

import strawberry
from graphql import GraphQLError
from strawberry.schema.config import StrawberryConfig
from strawberry.types.execution import ExecutionContext

from api.domain.errors import SyncError
from api.graphql.directives import authenticated
from api.graphql.errors import ErrorCodes
from api.graphql.scalars import SCALAR_MAP
from api.graphql.types import (
    ITEM_TYPE_SCHEMAS,
    ItemTypeSchema,
    SynchronizedItemList,
    to_deleted_item,
    to_synchronized_item,
)
from api.sync import SyncService

logger = logging.getLogger("api.graphql")


@dataclass
class Context:
    request: Any
    service: SyncService


def _service(info: strawberry.Info) -> SyncService:
    service: SyncService = info.context.service
    return service


def _given(value: Any) -> Any:
    return None if value is strawberry.UNSET else value


def changes(
    info: strawberry.Info,
    tenantID: strawberry.ID,
    since: Optional[strawberry.ID] = strawberry.UNSET,  # noqa: UP045
    cursor: Optional[str] = strawberry.UNSET,  # noqa: UP045
    limit: Optional[int] = strawberry.UNSET,  # noqa: UP045
) -> SynchronizedItemList:
    page = _service(info).changes(
        tenantID, since=_given(since), cursor=_given(cursor), limit=_given(limit)
    )
    return SynchronizedItemList(
        items=[to_synchronized_item(r) for r in page.items],
        cursor=page.cursor,
        changeToken=page.change_token,
    )


def _query_fields(s: ItemTypeSchema) -> dict[str, Any]:
    def get(info: strawberry.Info, tenantID: strawberry.ID, id: strawberry.ID) -> Any:
        record = _service(info).get(s.item_type, tenantID, id)
        return None if record is None else s.to_object(record)

    get.__annotations__["return"] = Optional[s.object_type]  # noqa: UP045
    return {s.field_name: strawberry.field(resolver=get, **authenticated())}


def _mutation_fields(s: ItemTypeSchema) -> dict[str, Any]:
    name, field_name = s.item_type.name, s.field_name

    def create(info: strawberry.Info, input: Any) -> Any:
        record = _service(info).create(
            s.item_type, input.tenantID, input.id, s.changes_of(getattr(input, field_name))
        )
        return s.create_payload(**{field_name: s.to_object(record)})

    def update(info: strawberry.Info, input: Any) -> Any:
        record = _service(info).update(
            s.item_type, input.tenantID, input.id, input.changeToken, s.changes_of(input.changes)
        )
        return s.update_payload(**{field_name: s.to_object(record)})

    def delete(info: strawberry.Info, input: Any) -> Any:
        record = _service(info).delete(s.item_type, input.tenantID, input.id, input.changeToken)
        return s.delete_payload(deletedItem=to_deleted_item(record))

    fields = {}
    for verb, resolver, input_type, payload in (
        ("create", create, s.create_input, s.create_payload),
        ("update", update, s.update_input, s.update_payload),
        ("delete", delete, s.delete_input, s.delete_payload),
    ):
        resolver.__annotations__ = {"info": strawberry.Info, "input": input_type, "return": payload}
        fields[f"{verb}{name}"] = strawberry.mutation(resolver=resolver, **authenticated())
    return fields


def _root(name: str, fields: dict[str, Any]) -> Any:
    namespace: dict[str, Any] = {"__module__": __name__, **fields}
    return strawberry.type(type(name, (), namespace))


Query = _root(
    "Query",
    {
        "changes": strawberry.field(resolver=changes, **authenticated()),
        **{k: v for s in ITEM_TYPE_SCHEMAS for k, v in _query_fields(s).items()},
    },
)
Mutation = _root(
    "Mutation",
    {k: v for s in ITEM_TYPE_SCHEMAS for k, v in _mutation_fields(s).items()},
)


class SyncSchema(strawberry.Schema):
    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        # Expected errors (conflicts, bad input, auth) are one log line, not a traceback;
        # unexpected ones were logged with their traceback by ErrorCodes.
        for error in errors:
            code = (error.extensions or {}).get("code")
            if isinstance(error.original_error, SyncError) or code != "INTERNAL_SERVER_ERROR":
                logger.info("graphql error %s at %s: %s", code, error.path, error.message)


schema = SyncSchema(
    query=Query,
    mutation=Mutation,
    types=[s.object_type for s in ITEM_TYPE_SCHEMAS],
    extensions=[ErrorCodes],
    config=StrawberryConfig(scalar_map=SCALAR_MAP),
)
