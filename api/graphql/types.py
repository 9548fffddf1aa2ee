"""GraphQL types: the fixed ones of contract 2, and those built from each `ItemType`.

For an item type `Person` this builds `Person`, `UpdatePersonPartial`,
`CreatePersonInput`, `UpdatePersonInput`, `DeletePersonInput` and their payloads.
The resolvers that use them are in `api.graphql.schema`.
"""

import enum
from dataclasses import dataclass, replace
from typing import Any

import strawberry

from api.domain import catalog
from api.domain.errors import NotFound
from api.domain.item_types import Field, FieldKind, ItemType
from api.domain.mutations import OUTCOME_RETENTION_S, Mutation, State, Verb
from api.domain.records import Record
from api.graphql.directives import HexColorDirective, ReferencesDirective
from api.graphql.field_types import from_graphql_value, graphql_type, to_graphql_value
from api.graphql.scalars import Time
from api.graphql.visibility_types import Visibility, VisibilityInput, from_input, to_visibility

_DeletedItemTypeEnum: Any = enum.Enum(  # type: ignore[misc]  # members come from the catalog
    "DeletedItemType", {t.code: t.code for t in catalog.ITEM_TYPES}
)
DeletedItemType = strawberry.enum(
    _DeletedItemTypeEnum, description="One value per synchronized type."
)


@strawberry.interface
class SynchronizedItem:
    id: strawberry.ID
    tenantID: strawberry.ID
    changeToken: str
    createdAt: Time
    updatedAt: Time
    writtenBy: str | None = strawberry.field(
        default=None,
        description="The `sub` of the caller who wrote this version (null: not recorded).",
    )
    visibility: Visibility | None = strawberry.field(
        default=None, description="Who sees it (null: the whole tenant; contract 3.12)."
    )


@strawberry.type(
    description="Sentinel left behind by a deletion. `id` is the id of the deleted entity."
)
class DeletedItem(SynchronizedItem):
    type: DeletedItemType  # type: ignore[valid-type]


@strawberry.type(
    description="Sentinel of a record that left the caller's view (it was not deleted; "
    "others still see it): forget it, its attachments, its history and queued edits to it. "
    "Its visibility is null: who sees the record now is not told."
)
class LeftViewItem(SynchronizedItem):
    type: DeletedItemType  # type: ignore[valid-type]


@strawberry.type
class SynchronizedItemList:
    items: list[SynchronizedItem]
    cursor: str | None = strawberry.field(
        description="Pass back as `cursor` to get the next page; null when there are no more pages."
    )
    changeToken: str | None = strawberry.field(
        description=(
            "The token to persist as `since` once this page is applied; "
            "null only when the tenant has no changes at all."
        )
    )


def _lower_first(name: str) -> str:
    return name[0].lower() + name[1:]


def build(
    name: str,
    annotations: dict[str, Any],
    defaults: dict[str, Any],
    bases: tuple[type, ...] = (),
) -> Any:
    """A class for strawberry.type/input to decorate, made from annotations and defaults."""
    namespace = {"__annotations__": annotations, "__module__": __name__, **defaults}
    return type(name, bases, namespace)


@dataclass(frozen=True)
class ItemTypeSchema:
    """The GraphQL types of one synchronized item type."""

    item_type: ItemType
    object_type: Any
    partial: Any
    create_input: Any
    create_payload: Any
    update_input: Any
    update_payload: Any
    delete_input: Any
    delete_payload: Any
    put_input: Any

    @property
    def field_name(self) -> str:
        """`person` for Person: the query field and the payload field."""
        return _lower_first(self.item_type.name)

    def to_object(self, record: Record) -> Any:
        values = {
            spec.name: to_graphql_value(
                self.item_type.name, spec, record.tenant_id, record.fields.get(spec.name)
            )
            for spec in self.item_type.fields
        }
        return self.object_type(**_common(record), **values)

    def mutation(self, verb: Verb, input: Any, release: int | None = None) -> Mutation:
        """The domain mutation a create/update/delete/put input asks for (a creation's
        and a put's visibility refused to an app of a `release` before it)."""
        if verb in ("create", "put"):
            asked = input.visibility if verb == "create" else input.state.visibility
            visibility, sets = from_input(asked, release)
            return replace(self._mutation(verb, input), visibility=visibility, sets_visibility=sets)
        return self._mutation(verb, input)

    def _mutation(self, verb: Verb, input: Any) -> Mutation:
        if verb == "put":
            return Mutation(
                verb,
                self.item_type,
                input.tenantID,
                input.id,
                client_mutation_id=input.clientMutationID,
                assumed=None if input.assumed is None else self._state(input.assumed),
                state=self._state(input.state),
                merge_fields=bool(input.mergeFields),
            )
        if verb == "create":
            changes = self.changes_of(getattr(input, self.field_name))
            return Mutation(
                verb,
                self.item_type,
                input.tenantID,
                input.id,
                None,
                changes,
                input.clientMutationID,
            )
        changes = self.changes_of(input.changes) if verb == "update" else {}
        return Mutation(
            verb,
            self.item_type,
            input.tenantID,
            input.id,
            input.changeToken,
            changes,
            input.clientMutationID,
        )

    def _state(self, state_input: Any) -> State:
        fields = getattr(state_input, self.field_name)
        return State(
            fields={} if fields in (None, strawberry.UNSET) else self.changes_of(fields),
            deleted=bool(state_input.deleted),
        )

    def changes_of(self, partial: Any) -> dict[str, Any]:
        """The fields a client sent: absent ones stay out, explicit nulls stay in as None."""
        return {
            spec.name: from_graphql_value(getattr(partial, spec.name))
            for spec in self.item_type.fields
            if getattr(partial, spec.name) is not strawberry.UNSET
        }


def _input_directives(spec: Field) -> list[Any]:
    if spec.kind is FieldKind.COLOR:
        return [HexColorDirective()]
    return [ReferencesDirective(type=spec.ref)] if spec.ref else []


def build_item_type_schema(item_type: ItemType) -> ItemTypeSchema:
    name = item_type.name
    field_name = _lower_first(name)
    object_type = strawberry.type(
        build(
            name,
            {f.name: graphql_type(name, f) | None for f in item_type.fields},
            {
                f.name: strawberry.field(
                    default=None,
                    description=f.description,
                    deprecation_reason=f.deprecated,
                    directives=[ReferencesDirective(type=f.ref)] if f.ref else (),
                )
                for f in item_type.fields
            },
            bases=(SynchronizedItem,),
        ),
        description=item_type.description,
    )
    partial = strawberry.input(
        build(
            f"Update{name}Partial",
            {f.name: graphql_type(name, f, input=True) | None for f in item_type.fields},
            {
                f.name: strawberry.field(
                    default=strawberry.UNSET,
                    description=f.description,
                    deprecation_reason=f.deprecated,
                    directives=_input_directives(f),
                )
                for f in item_type.fields
            },
        ),
        description=f"Fields of a {name}: absent fields are left as they are, null clears a field.",
    )
    create_input = strawberry.input(
        build(
            f"Create{name}Input",
            {
                "tenantID": strawberry.ID,
                "id": strawberry.ID | None,
                field_name: partial,
                "clientMutationID": str | None,
                "visibility": VisibilityInput | None,
            },
            {
                "visibility": strawberry.field(default=None, description=_VISIBILITY),
                "id": strawberry.field(
                    default=None,
                    description=(
                        "Optional id generated on the device (UUID or ULID) so that offline "
                        "creations keep their identity."
                    ),
                ),
                "clientMutationID": _client_mutation_id_field(),
            },
        )
    )
    update_input = strawberry.input(
        build(
            f"Update{name}Input",
            {
                "tenantID": strawberry.ID,
                "id": strawberry.ID,
                "changeToken": str,
                "changes": partial,
                "clientMutationID": str | None,
            },
            {"clientMutationID": _client_mutation_id_field()},
        )
    )
    delete_input = strawberry.input(
        build(
            f"Delete{name}Input",
            {
                "tenantID": strawberry.ID,
                "id": strawberry.ID,
                "changeToken": str,
                "clientMutationID": str | None,
            },
            {"clientMutationID": _client_mutation_id_field()},
        )
    )
    state_input = strawberry.input(
        build(
            f"{name}StateInput",
            {"deleted": bool, field_name: partial | None, "visibility": VisibilityInput | None},
            {
                "visibility": strawberry.field(default=None, description=_VISIBILITY),
                "deleted": strawberry.field(default=False),
                field_name: strawberry.field(
                    default=None, description="The fields that are set; absent or null: not set."
                ),
            },
        ),
        description=f"A {name} as the device holds it: its fields, or deleted.",
    )
    put_input = strawberry.input(
        build(
            f"Put{name}Input",
            {
                "tenantID": strawberry.ID,
                "id": strawberry.ID,
                "assumed": state_input | None,
                "state": state_input,
                "mergeFields": bool,
                "clientMutationID": str | None,
            },
            {
                "assumed": strawberry.field(
                    default=None,
                    description=f"The state the device assumes the server holds; null: that the "
                    f"{name} does not exist. The write applies only when the server holds "
                    "exactly this state (its fields, or deleted); else CONFLICT with what it "
                    "holds.",
                ),
                "state": strawberry.field(description="The new state (deleted: a deletion)."),
                "mergeFields": strawberry.field(
                    default=False,
                    description="When the server's state differs from `assumed` only in "
                    "fields this write leaves as assumed, apply this write's changed fields to "
                    "it (a field-level rebase) instead of answering CONFLICT. Overlapping "
                    "fields, deletions, and a merge larger than an item may be are still "
                    "conflicts.",
                ),
                "clientMutationID": _client_mutation_id_field(),
            },
        ),
        description="A state-based write, for replication protocols that send the state they "
        "assume and the new one (RxDB, PouchDB-style); token-guarded mutations are the other way.",
    )
    return ItemTypeSchema(
        item_type=item_type,
        object_type=object_type,
        partial=partial,
        create_input=create_input,
        create_payload=_payload(f"Create{name}Payload", field_name, object_type),
        update_input=update_input,
        update_payload=_payload(f"Update{name}Payload", field_name, object_type),
        delete_input=delete_input,
        delete_payload=_payload(f"Delete{name}Payload", "deletedItem", DeletedItem),
        put_input=put_input,
    )


_VISIBILITY = (
    "Who sees the record it creates (null: the whole tenant); ignored when the record "
    "exists (setVisibility changes it)."
)


def _client_mutation_id_field() -> Any:
    return strawberry.field(
        default=None,
        description=(
            "Makes the mutation idempotent: a retry with the same id, within "
            f"{OUTCOME_RETENTION_S // 86400} days, gets the first result back (marked "
            "`replayed`) and writes nothing."
        ),
    )


def _payload(name: str, field_name: str, object_type: Any) -> Any:
    return strawberry.type(
        build(
            name,
            {field_name: object_type, "replayed": bool},
            {
                "replayed": strawberry.field(
                    default=False,
                    description="True when this is the stored result of an earlier request "
                    "with the same clientMutationID; nothing was written this time.",
                )
            },
        )
    )


ITEM_TYPE_SCHEMAS: tuple[ItemTypeSchema, ...] = tuple(
    build_item_type_schema(t) for t in catalog.ITEM_TYPES
)
_BY_ITEM_TYPE = {s.item_type.name: s for s in ITEM_TYPE_SCHEMAS}


def to_deleted_item(record: Record) -> DeletedItem:
    return DeletedItem(type=DeletedItemType[record.item_type.code], **_common(record))


def to_synchronized_item(record: Record) -> Any:
    """A `Person`, `Reminder`, ... or, for a deleted entity, a `DeletedItem`."""
    if not record.item_type.known:
        raise NotFound(
            f"{record.id} is a {record.item_type.code}, a type this server's release "
            f"({catalog.RELEASE}) does not serve"
        )
    if record.deleted:
        return to_deleted_item(record)
    if record.left_view:
        return LeftViewItem(type=DeletedItemType[record.item_type.code], **_common(record))
    return _BY_ITEM_TYPE[record.item_type.name].to_object(record)


def _common(record: Record) -> dict[str, Any]:
    return {
        "id": strawberry.ID(record.id),
        "tenantID": strawberry.ID(record.tenant_id),
        "changeToken": record.change_token,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
        "writtenBy": record.written_by,
        "visibility": to_visibility(record.visibility),
    }
