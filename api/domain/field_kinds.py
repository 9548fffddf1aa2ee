"""The kinds of a synchronized field, the numbers' checks, and what a declaration may
combine (docs/contract.md, "Field kinds"). `api.domain.item_types` declares fields
with them and normalizes every written value."""

from __future__ import annotations

import enum
import math
from typing import Any

# GraphQL's Int is a 32-bit signed integer: an INT field's bounds stay inside it.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
# A LIST field's items when its declaration does not say.
DEFAULT_MAX_ITEMS = 100


class FieldKind(enum.Enum):
    STRING = "String"
    ID = "ID"
    BOOLEAN = "Boolean"
    DATE = "Date"
    TIME = "Time"
    ENUM = "Enum"
    COLOR = "Color"  # a String holding #RRGGBB, marked @hexColor in the schema
    # A reference to a blob of the tenant (contract 3.10): {sha256, size,
    # contentType}, checked against the blob store before a write touches the table.
    ATTACHMENT = "Attachment"
    INT = "Int"  # a whole number in GraphQL's 32 bits, within the field's bounds
    FLOAT = "Float"  # a finite double, within the field's bounds
    LIST = "List"  # a list of one kind (`Field.of`), at most `Field.max_items`
    OBJECT = "Object"  # a small structure of the sub-fields `Field.fields`
    # The id of a record of another type of the catalog (`Field.ref`): its form is
    # checked, not that the record exists, nor its type (contract 3.2.1).
    REF = "Ref"


# The kinds a list holds, and an object's sub-fields have (a sub-field may also be a
# LIST of one of them): scalars whose values need no blob store and no nesting.
SCALARS = frozenset(
    {
        FieldKind.STRING,
        FieldKind.ID,
        FieldKind.INT,
        FieldKind.FLOAT,
        FieldKind.BOOLEAN,
        FieldKind.DATE,
        FieldKind.TIME,
        FieldKind.ENUM,
    }
)


def whole_number(value: Any, minimum: float | None, maximum: float | None) -> int:
    """An INT's value: an int (a float only when whole, as JSON's 2.0), not a bool."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("must be a whole number")
    return int(_bounded(value, INT_MIN if minimum is None else minimum, maximum, INT_MAX))


def double(value: Any, minimum: float | None, maximum: float | None) -> float:
    """A FLOAT's value: a finite double (an int is taken as one; a bool is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("must be a number")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any double
        raise ValueError("must be a finite number") from None
    if not math.isfinite(number):
        raise ValueError("must be a finite number (not NaN or an infinity)")
    return float(_bounded(number, minimum, maximum, None))


def _bounded(value: float, low: float | None, high: float | None, top: float | None) -> float:
    if low is not None and value < low:
        raise ValueError(f"must be at least {low}")
    if high is not None and value > high:
        raise ValueError(f"must be at most {high}")
    if top is not None and value > top:
        raise ValueError(f"must be at most {top}")
    return value


def check_declaration(spec: Any, owner: str = "") -> None:
    """Refuse a field declaration the kinds cannot serve (ValueError naming it): bounds
    that are not numbers of its kind, an INT's outside 32 bits, a list of a kind lists
    do not hold, an object in an object. `spec` is an `item_types.Field`."""
    name = f"{owner}{spec.name}"
    kind = spec.of if spec.kind is FieldKind.LIST else spec.kind
    if spec.kind is FieldKind.LIST:
        if spec.of is None or spec.of not in SCALARS | {FieldKind.OBJECT}:
            raise ValueError(f"{name}: a LIST holds one of {_names(SCALARS)} or OBJECT")
        if owner and spec.of is FieldKind.OBJECT:
            raise ValueError(f"{name}: an object's sub-field cannot hold objects")
        if not isinstance(spec.max_items, int) or spec.max_items < 1:
            raise ValueError(f"{name}: max_items must be a whole number from 1")
    elif spec.of is not None:
        raise ValueError(f"{name}: only a LIST declares `of`")
    if (spec.minimum is not None or spec.maximum is not None) and kind not in (
        FieldKind.INT,
        FieldKind.FLOAT,
    ):
        raise ValueError(f"{name}: only INT and FLOAT take a minimum or a maximum")
    for bound in (spec.minimum, spec.maximum):
        if bound is None:
            continue
        if kind is FieldKind.INT and (
            isinstance(bound, bool) or not isinstance(bound, int) or not INT_MIN <= bound <= INT_MAX
        ):
            raise ValueError(f"{name}: an INT's bounds are whole numbers in 32 bits")
        if kind is FieldKind.FLOAT and (
            isinstance(bound, bool)
            or not isinstance(bound, int | float)
            or not math.isfinite(bound)
        ):
            raise ValueError(f"{name}: a FLOAT's bounds are finite numbers")
    if spec.minimum is not None and spec.maximum is not None and spec.minimum > spec.maximum:
        raise ValueError(f"{name}: minimum is above maximum")
    if kind is FieldKind.OBJECT:
        if owner:
            raise ValueError(f"{name}: an object's sub-field cannot be an object")
        if not spec.fields:
            raise ValueError(f"{name}: an OBJECT declares its sub-fields")
        for sub in spec.fields:
            sub_kind = sub.of if sub.kind is FieldKind.LIST else sub.kind
            if sub_kind not in SCALARS:
                raise ValueError(
                    f"{name}.{sub.name}: a sub-field is one of {_names(SCALARS)} or a LIST "
                    "of one (an object holds no object)"
                )
            if sub.since != 1 or sub.enum_since or sub.deprecated:
                raise ValueError(
                    f"{name}.{sub.name}: a sub-field has its field's release (no since, "
                    "enum_since or deprecated of its own)"
                )
            check_declaration(sub, f"{name}.")
        if len({sub.name for sub in spec.fields}) != len(spec.fields):
            raise ValueError(f"{name}: two sub-fields have one name")
    elif spec.fields:
        raise ValueError(f"{name}: only an OBJECT (or a LIST of them) declares sub-fields")
    if kind is FieldKind.ENUM and spec.enum is None:
        raise ValueError(f"{name}: an ENUM names its enum")
    if spec.kind is FieldKind.REF:
        if owner:
            raise ValueError(f"{name}: an object's sub-field cannot be a REF")
        if not spec.ref:
            raise ValueError(f"{name}: a REF names the type it refers to")
    elif spec.ref is not None:
        raise ValueError(f"{name}: only a REF names a type")


def _names(kinds: frozenset[FieldKind]) -> str:
    return ", ".join(sorted(k.name for k in kinds))
