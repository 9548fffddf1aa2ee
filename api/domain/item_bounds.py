"""The most a record of a type can take, every field at its declaration's bounds,
counted as `item_types.check_size` counts a written record (a string its UTF-8
bytes, any other value its JSON's): a type whose bounds add up to more than a
record may hold (MAX_ITEM_BYTES) is named when its catalog loads (docs/evolution.md,
"An app's data"). Such a declaration is served: each write is checked against the
bound, and one whose values add up to more is refused (`item is too large`)."""

from __future__ import annotations

import json

from api.domain.field_kinds import INT_MAX, INT_MIN
from api.domain.identifiers import SUBJECT_MAX
from api.domain.item_types import MAX_ITEM_BYTES, Field, FieldKind, ItemType

# A code point takes at most 4 bytes in UTF-8; JSON escapes what check_text lets
# through (tab, newline, carriage return, quote, backslash) in 2 bytes.
_CHAR = 4
# An attachment's reference at its longest: a sha256, a size, a 69-character type.
_ATTACHMENT = len(
    json.dumps({"sha256": "0" * 64, "size": 10**20, "contentType": "x" * 69}, separators=(",", ":"))
)
_FIXED = {
    FieldKind.BOOLEAN: len("false"),
    FieldKind.DATE: len("2026-11-28"),
    FieldKind.TIME: len("2026-11-28T22:10:00.000Z"),
    FieldKind.COLOR: len("#RRGGBB"),
    FieldKind.FLOAT: len("-1.7976931348623157e+308"),  # the longest repr of a double
    FieldKind.REF: SUBJECT_MAX,  # an id, a Member's subject at most (api.domain.identifiers)
    FieldKind.ATTACHMENT: _ATTACHMENT,
}


def most_bytes(item_type: ItemType) -> int:
    """The size `check_size` would count for a record of `item_type` with every
    field at its bounds (an upper bound: each character its longest)."""
    return sum(len(f.name) + _value(f, quoted=False) for f in item_type.fields)


def oversized(types: tuple[ItemType, ...]) -> tuple[str, ...]:
    """A warning for each type whose fields at their bounds exceed a record's bound."""
    return tuple(
        f"{t.name}: its fields at their bounds take up to {most_bytes(t)} bytes, more than "
        f"a record's {MAX_ITEM_BYTES} (contract 3.2.1): a write of values that add up to "
        "more is refused (item is too large); lower a maxLength or a maxItems to keep every "
        "valid record writable"
        for t in types
        if most_bytes(t) > MAX_ITEM_BYTES
    )


def _value(spec: Field, quoted: bool = True) -> int:
    """A value of `spec` at its bounds: a string's bytes, in JSON with its quotes
    when it sits in a list or an object (`quoted`)."""
    kind = spec.kind
    quotes = 2 if quoted else 0
    if kind is FieldKind.LIST:
        item = spec.item
        return 2 + spec.max_items * (_value(item) + 1) - 1
    if kind is FieldKind.OBJECT:
        return 1 + sum(len(s.name) + 4 + _value(s) for s in spec.fields)
    if kind in (FieldKind.STRING, FieldKind.ID):
        return spec.max_length * _CHAR + quotes
    if kind is FieldKind.ENUM:
        assert spec.enum is not None
        return max(len(v) for v in spec.enum.__members__) + quotes
    if kind is FieldKind.INT:
        low = INT_MIN if spec.minimum is None else int(spec.minimum)
        high = INT_MAX if spec.maximum is None else int(spec.maximum)
        return max(len(str(low)), len(str(high)))
    if kind in (FieldKind.DATE, FieldKind.TIME, FieldKind.COLOR, FieldKind.REF):
        return _FIXED[kind] + quotes
    return _FIXED[kind]
