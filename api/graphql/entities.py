"""One entity at a time: `person(tenantID, id)` and `createPerson`,
`updatePerson`, `deletePerson` (and so on for every synchronized type), made
from the same declarations as the types (`api.graphql.types`)."""

from typing import Any

import strawberry

from api.auth import WRITER
from api.domain.mutations import Verb
from api.graphql.context import as_member, for_tenant, viewer
from api.graphql.directives import authenticated
from api.graphql.types import ITEM_TYPE_SCHEMAS, ItemTypeSchema, to_deleted_item
from api.service import Written


def _query_fields(s: ItemTypeSchema) -> dict[str, Any]:
    async def get(info: strawberry.Info, tenantID: strawberry.ID, id: strawberry.ID) -> Any:
        record = await for_tenant(
            info, tenantID, lambda svc: svc.get(s.item_type, tenantID, id, viewer(info, tenantID))
        )
        return None if record is None else s.to_object(record)

    get.__annotations__ = {
        "info": strawberry.Info,
        "tenantID": strawberry.ID,
        "id": strawberry.ID,
        "return": s.object_type | None,
    }
    return {s.field_name: strawberry.field(resolver=get, **authenticated())}


def _mutation_fields(s: ItemTypeSchema) -> dict[str, Any]:
    name, field_name = s.item_type.name, s.field_name

    async def _apply(info: strawberry.Info, verb: Verb, input: Any) -> Written:
        info.context.budget.spend_writes(1)
        mutation = s.mutation(verb, input, info.context.client_release())
        return await as_member(
            info,
            mutation.tenant_id,
            lambda svc, role, moved: svc.apply(
                mutation, viewer(info, mutation.tenant_id), role, moved
            ),
            role=WRITER,
        )

    async def create(info: strawberry.Info, input: Any) -> Any:
        written = await _apply(info, "create", input)
        return s.create_payload(
            **{field_name: s.to_object(written.record)}, replayed=written.replayed
        )

    async def update(info: strawberry.Info, input: Any) -> Any:
        written = await _apply(info, "update", input)
        return s.update_payload(
            **{field_name: s.to_object(written.record)}, replayed=written.replayed
        )

    async def delete(info: strawberry.Info, input: Any) -> Any:
        written = await _apply(info, "delete", input)
        return s.delete_payload(
            deletedItem=to_deleted_item(written.record), replayed=written.replayed
        )

    fields = {}
    for verb, resolver, input_type, payload in (
        ("create", create, s.create_input, s.create_payload),
        ("update", update, s.update_input, s.update_payload),
        ("delete", delete, s.delete_input, s.delete_payload),
    ):
        resolver.__annotations__ = {"info": strawberry.Info, "input": input_type, "return": payload}
        fields[f"{verb}{name}"] = strawberry.mutation(resolver=resolver, **authenticated())
    return fields


QUERIES: dict[str, Any] = {k: v for s in ITEM_TYPE_SCHEMAS for k, v in _query_fields(s).items()}
MUTATIONS: dict[str, Any] = {
    k: v for s in ITEM_TYPE_SCHEMAS for k, v in _mutation_fields(s).items()
}
