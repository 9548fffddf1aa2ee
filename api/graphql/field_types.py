"""The GraphQL type of each field kind, and a field's value to and from GraphQL.

A LIST is `[X!]` of its item's type; an OBJECT is an object type `<Type><Field>`
and, for inputs, `<Type><Field>Input`, their sub-fields all nullable (an absent or
null sub-field is not set). docs/contract.md, "Field kinds".
"""

import enum
import functools
from typing import Any

import strawberry

from api.domain.item_types import Field, FieldKind
from api.graphql.attachments import Attachment, AttachmentInput, attachment_of, reference_of
from api.graphql.scalars import Date, Time

_SCALARS: dict[FieldKind, Any] = {
    FieldKind.STRING: str,
    FieldKind.ID: strawberry.ID,
    FieldKind.BOOLEAN: bool,
    FieldKind.DATE: Date,
    FieldKind.TIME: Time,
    FieldKind.COLOR: str,
    FieldKind.INT: int,
    FieldKind.FLOAT: float,
    FieldKind.REF: strawberry.ID,  # the record's id, marked @references(type:)
}
# The kinds whose stored value is the GraphQL value (to_graphql_value returns it).
_AS_STORED = frozenset(_SCALARS) - {FieldKind.ENUM}
# One GraphQL enum per enum the served catalog's fields use (an earlier release's
# view of a grown enum is a class of its own, `Field.at`).
_ENUMS: dict[type[enum.Enum], Any] = {}
# The input classes of the OBJECT fields, to read their values back as dicts.
_OBJECT_INPUTS: set[type] = set()


def graphql_type(owner: str, spec: Field, input: bool = False) -> Any:
    """The GraphQL type of field `spec` of item type `owner` (without its null)."""
    if spec.kind is FieldKind.ATTACHMENT:
        return AttachmentInput if input else Attachment
    if spec.kind is FieldKind.ENUM:
        assert spec.enum is not None
        return _ENUMS.setdefault(spec.enum, strawberry.enum(spec.enum))
    if spec.kind is FieldKind.LIST:
        return list[graphql_type(owner, spec.item, input)]  # type: ignore[misc]
    if spec.kind is FieldKind.OBJECT:
        return _object_types(owner, spec)[1 if input else 0]
    return _SCALARS[spec.kind]


@functools.cache
def _object_types(owner: str, spec: Field) -> tuple[Any, Any]:
    """(`<Type><Field>`, `<Type><Field>Input`): built once per declaration."""
    name = object_type_name(owner, spec)
    subs = spec.fields
    output = strawberry.type(
        _class(
            name,
            {f.name: graphql_type(owner, f) | None for f in subs},
            {f.name: strawberry.field(default=None, description=f.description) for f in subs},
        ),
        description=spec.description,
    )
    input_type = strawberry.input(
        _class(
            f"{name}Input",
            {f.name: graphql_type(owner, f, input=True) | None for f in subs},
            {
                f.name: strawberry.field(default=strawberry.UNSET, description=f.description)
                for f in subs
            },
        ),
        description=f"{owner}.{spec.name}: every sub-field it holds (a write replaces the "
        "whole value); a sub-field absent or null is not set.",
    )
    _OBJECT_INPUTS.add(input_type)
    return output, input_type


def object_type_name(owner: str, spec: Field) -> str:
    """The object type of OBJECT field `spec` of item type `owner` (`TaskAddress`)."""
    return owner + spec.name[0].upper() + spec.name[1:]


def _class(name: str, annotations: dict[str, Any], defaults: dict[str, Any]) -> Any:
    return type(name, (), {"__annotations__": annotations, "__module__": __name__, **defaults})


def to_graphql_value(owner: str, spec: Field, tenant_id: str, value: Any) -> Any:
    """A stored value as field `spec` of `owner` answers it."""
    if value is None:
        return None
    if spec.kind is FieldKind.ATTACHMENT:
        return attachment_of(tenant_id, value)
    if spec.kind is FieldKind.ENUM:
        assert spec.enum is not None
        # A value a later release added (written by its server) is not one of this
        # schema's: null here (left out of a list); a client of that release gets it
        # from its server.
        return spec.enum.__members__.get(value)
    if spec.kind is FieldKind.LIST:
        item = spec.item
        if item.kind in _AS_STORED:  # a list's items are never null
            return list(value)
        if item.kind is FieldKind.ENUM:
            assert item.enum is not None
            members = item.enum.__members__
            return [members[v] for v in value if v in members]
        items = (to_graphql_value(owner, item, tenant_id, v) for v in value)
        return [v for v in items if v is not None]
    if spec.kind is FieldKind.OBJECT:
        return _object_types(owner, spec)[0](
            **{
                sub.name: to_graphql_value(owner, sub, tenant_id, value.get(sub.name))
                for sub in spec.fields
            }
        )
    return value


def from_graphql_value(value: Any) -> Any:
    """A client's value from its GraphQL input: an attachment's reference, an object's
    sub-fields as a dict (those it sent), a list's items the same way."""
    if isinstance(value, AttachmentInput):
        return reference_of(value)
    if isinstance(value, list):
        return [from_graphql_value(v) for v in value]
    if type(value) in _OBJECT_INPUTS:
        return {
            name: from_graphql_value(v)
            for name, v in vars(value).items()
            if v is not strawberry.UNSET
        }
    return value
