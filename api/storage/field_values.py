"""A record's field values to and from the item's field map (`f`), for the kinds whose
DynamoDB form is not their own (docs/contract.md, "Field kinds").

A FLOAT is kept as a String holding the shortest decimal that reads back as the same
double (Python's repr: 0.1, 1e-300, -0.0). DynamoDB's Number would not keep it:
it holds 38 digits between 1E-130 and 9.99E+125 in magnitude, so it refuses 1e-300
and 1.7976931348623157e308, and it has no negative zero. Every other value is
stored as is: a string, a boolean, an INT as a Number, a list as a List, an object
(and an attachment) as a Map.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.domain.item_types import Field, FieldKind, ItemType


def stored(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` with every double as its text (a bool is not a double; an int stays
    an int): what PynamoDB's map writes."""
    return {name: _stored(value) for name, value in fields.items()}


def _stored(value: Any) -> Any:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return [_stored(v) for v in value]
    if isinstance(value, dict):
        return {k: _stored(v) for k, v in value.items()}
    return value


def revived(item_type: ItemType, fields: dict[str, Any]) -> dict[str, Any]:
    """Fields read from an item with the doubles of the fields `item_type` declares
    back as floats. A field it does not declare (a later release's) stays as stored,
    so that a write keeping it writes it back the same."""
    if not item_type.has_floats:
        return fields
    by_name = {f.name: f for f in item_type.fields}
    for name, value in fields.items():
        spec = by_name.get(name)
        if spec is not None:
            fields[name] = _revived(spec, value)
    return fields


def _revived(spec: Field, value: Any) -> Any:
    kind = spec.kind
    if kind is FieldKind.FLOAT and isinstance(value, str):
        return float(value)
    if kind is FieldKind.LIST and isinstance(value, list):
        item = spec.item
        if item.kind is FieldKind.FLOAT:
            return [float(v) if isinstance(v, str) else v for v in value]
        if item.kind is not FieldKind.OBJECT:
            return value  # no double in it
        return [_revived(item, v) for v in value]
    if kind is FieldKind.OBJECT and isinstance(value, dict):
        subs = {f.name: f for f in spec.fields}
        return {k: _revived(subs[k], v) if k in subs else v for k, v in value.items()}
    return value
