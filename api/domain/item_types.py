"""Synchronized item types, declared as data.

A type is a name, the value it takes in `DeletedItemType`, and its fields. The
GraphQL layer builds the object type, the inputs and the mutations from this
declaration, and the store keeps the fields as a map, so a new synchronized type
is one `ItemType(...)` in `api.domain.catalog` and nothing else.
"""

from __future__ import annotations

import enum
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import Any

from api.domain.attachments import reference
from api.domain.errors import BadUserInput
from api.domain.field_kinds import DEFAULT_MAX_ITEMS, check_declaration, double, whole_number
from api.domain.field_kinds import FieldKind as FieldKind
from api.domain.identifiers import SUBJECT_MAX, is_subject
from api.domain.timestamps import format_time, parse_date, parse_time

# The release of content a server's catalog does not declare (a later release's,
# read by an earlier server) when the release it was filed under is not known:
# above every release, so every catch-up reads it.
UNKNOWN_RELEASE = 9999
# Keeps every item far below DynamoDB's 400 KB limit, and a 100-item page small.
MAX_ITEM_BYTES = 16 * 1024
_HEX_COLOR_RE = re.compile(r"^#[0-9A-Fa-f]{6}$")
# C0 controls except tab, newline and carriage return, and DEL: never meaningful in
# a name, a title or a note, and a source of broken displays and logs.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class Field:
    name: str
    kind: FieldKind = FieldKind.STRING
    max_length: int = 500
    enum: type[enum.Enum] | None = None
    description: str | None = None
    # The catalog release that added the field (docs/evolution.md); 1: the first.
    since: int = 1
    # Enum values added after the field, with the release that added each.
    enum_since: tuple[tuple[str, int], ...] = ()
    # Why the field is deprecated and what replaces it (GraphQL's @deprecated): a field a
    # recorded release holds is deprecated, never removed (docs/evolution.md).
    deprecated: str | None = None
    # INT and FLOAT (and a LIST of them): the smallest and largest value (None: any).
    minimum: float | None = None
    maximum: float | None = None
    # LIST: the kind of its items (each checked as a field of that kind, with this
    # field's max_length, bounds and enum), and how many it holds at most.
    of: FieldKind | None = None
    max_items: int = DEFAULT_MAX_ITEMS
    # OBJECT (or a LIST of OBJECT): its sub-fields, scalars or lists of scalars.
    fields: tuple[Field, ...] = ()
    # A value is required: a create (or a put's state) must set it, and no write may
    # clear it (BAD_USER_INPUT naming the field).
    required: bool = False
    # REF: the name of the type whose record's id the field holds (catalog_file checks
    # that the catalog declares it, by the field's release).
    ref: str | None = None

    def __post_init__(self) -> None:
        check_declaration(self)

    def added_in(self, value: str) -> int:
        """The release that added enum value `value` (the field's own, unless later)."""
        return max(self.since, dict(self.enum_since).get(value, self.since))

    def enum_values(self, release: int | None = None) -> tuple[str, ...]:
        """The enum's values a client of `release` knows (None: all of them)."""
        assert self.enum is not None
        return tuple(
            v for v in self.enum.__members__ if release is None or self.added_in(v) <= release
        )

    def at(self, release: int) -> Field | None:
        """The field as release `release` declares it (None: added later)."""
        if self.since > release:
            return None
        if self.enum is None or len(self.enum_values(release)) == len(self.enum.__members__):
            return self
        return replace(self, enum=_enum_at(self.enum, self.enum_values(release)), enum_since=())

    def normalize(self, value: Any, owner: str = "") -> Any:
        """The stored form of a client value; BadUserInput naming `owner`.field when
        it is not valid."""
        try:
            return _NORMALIZERS[self.kind](self, value)
        except (ValueError, TypeError) as exc:
            raise BadUserInput(f"{owner}{self.name}: {exc}") from None

    @functools.cached_property
    def item(self) -> Field:
        """A LIST's item: this field with the item's kind (its bounds, enum, sub-fields);
        made once per field (a page of records reads it for every list)."""
        assert self.of is not None
        return replace(self, kind=self.of, of=None, since=1, enum_since=(), deprecated=None)


def _string(spec: Field, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("must be a string")
    if len(value) > spec.max_length:
        raise ValueError(f"must be at most {spec.max_length} characters")
    return check_text(value)


def check_text(value: str) -> str:
    """Text that can be stored and sent back: valid Unicode (JSON can carry an
    unpaired surrogate, UTF-8 cannot) without control characters."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("must be valid Unicode text (it has an unpaired surrogate)") from None
    if _CONTROL_RE.search(value):
        raise ValueError("must not contain control characters")
    return value


def _color(spec: Field, value: Any) -> str:
    if not isinstance(value, str) or not _HEX_COLOR_RE.fullmatch(value):
        raise ValueError("must be a color in the form #RRGGBB")
    return value


def _enum(spec: Field, value: Any) -> str:
    assert spec.enum is not None
    if isinstance(value, enum.Enum):  # a member of the full enum or of a release's view
        value = value.name
    if isinstance(value, str) and value in spec.enum.__members__:
        return value
    raise ValueError(f"must be one of {', '.join(spec.enum.__members__)}")


def _boolean(spec: Field, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("must be a boolean")
    return value


def _date(spec: Field, value: Any) -> str:
    if isinstance(value, str):
        return parse_date(value).isoformat()
    if isinstance(value, date) and not isinstance(value, datetime):
        return value.isoformat()
    raise TypeError("must be a date")


def _time(spec: Field, value: Any) -> str:
    if isinstance(value, str):
        return format_time(parse_time(value))
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("must carry a UTC offset")
        return format_time(value)
    raise TypeError("must be a timestamp")


def _attachment(spec: Field, value: Any) -> dict[str, Any]:
    try:
        return reference(value)
    except BadUserInput as exc:
        raise ValueError(str(exc)) from None


def _ref(spec: Field, value: Any) -> str:
    if not is_subject(value):  # any entity's id: an identifier, or a Member's subject
        raise ValueError(
            f"must be the id of a {spec.ref}: 1-{SUBJECT_MAX} characters of letters, "
            "digits, '_', '.', ':', '@', '|', '+', '=', '/' or '-', starting with a letter "
            "or digit"
        )
    return str(value)


def _int(spec: Field, value: Any) -> int:
    return whole_number(value, spec.minimum, spec.maximum)


def _float(spec: Field, value: Any) -> float:
    return double(value, spec.minimum, spec.maximum)


def _list(spec: Field, value: Any) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise TypeError("must be a list")
    if len(value) > spec.max_items:
        raise ValueError(f"must hold at most {spec.max_items} items")
    item = spec.item
    for index, element in enumerate(value):
        if element is None:
            raise ValueError(f"item {index} is null")
    return [_item_of(item, index, element) for index, element in enumerate(value)]


def _item_of(item: Field, index: int, value: Any) -> Any:
    try:
        return _NORMALIZERS[item.kind](item, value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"item {index}: {exc}") from None


def _object(spec: Field, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError("must be an object")
    by_name = {sub.name: sub for sub in spec.fields}
    normalized: dict[str, Any] = {}
    for name, sub_value in value.items():
        sub = by_name.get(name)
        if sub is None:
            raise ValueError(f"has no sub-field {name!r}")
        if sub_value is not None:  # null: the sub-field is not set
            try:
                normalized[name] = _NORMALIZERS[sub.kind](sub, sub_value)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{name}: {exc}") from None
    return normalized


_NORMALIZERS = {
    FieldKind.STRING: _string,
    FieldKind.ID: _string,
    FieldKind.BOOLEAN: _boolean,
    FieldKind.DATE: _date,
    FieldKind.TIME: _time,
    FieldKind.ENUM: _enum,
    FieldKind.COLOR: _color,
    FieldKind.ATTACHMENT: _attachment,
    FieldKind.INT: _int,
    FieldKind.FLOAT: _float,
    FieldKind.LIST: _list,
    FieldKind.OBJECT: _object,
    FieldKind.REF: _ref,
}


@functools.cache
def _enum_at(full: type[enum.Enum], values: tuple[str, ...]) -> type[enum.Enum]:
    """`full` with only `values`: an older release's view of a grown enum (one class
    per view, so that GraphQL builds one enum type of it)."""
    narrowed: type[enum.Enum] = enum.Enum(full.__name__, {v: v for v in values})  # type: ignore[misc]
    return narrowed


@dataclass(frozen=True)
class ItemType:
    name: str  # GraphQL object type, e.g. "Person"
    code: str  # e.g. "PERSON": stored in every item, live or deleted (`ty`), and its
    # value in DeletedItemType; persisted, never rename
    fields: tuple[Field, ...]
    description: str | None = None
    # The catalog release that added the type (docs/evolution.md); 1: the first.
    since: int = 1
    # False only for the stand-in of a type this server's release does not declare
    # (`unknown_type`): its records are stored but cannot be rendered here.
    known: bool = True
    # The role a caller needs to write records of this type (None: writer, as for
    # every type); the catalog's Member type needs owner (contract 6).
    write_role: str | None = None
    # A create names the record's id (Member: the member's sub); else one is made.
    named_ids: bool = False

    def at(self, release: int) -> ItemType | None:
        """The type as release `release` declares it (None: added later)."""
        if self.since > release:
            return None
        fields = tuple(f for f in (spec.at(release) for spec in self.fields) if f is not None)
        return self if fields == self.fields else replace(self, fields=fields)

    def copy_release(self, fields: Mapping[str, Any], stored: int | None = None) -> int:
        """The release a live version holding `fields` is filed under among the
        tenant's copies (docs/evolution.md): the newest release whose content it
        carries, the type's own at least. A field or enum value this type does not
        declare was written by a later release than this server's, which cannot name
        it: a write here keeps it as it was (an update is partial), so its release is
        `stored`, the one the entity's previous version was filed under; UNKNOWN_RELEASE
        (above every catch-up's floor) when that is not known."""
        releases = self._content_releases(fields)
        if None in releases:
            releases.append(UNKNOWN_RELEASE if stored is None else stored)
        return max(r for r in releases if r is not None)

    def renders(self, fields: Mapping[str, Any]) -> bool:
        """Whether stored `fields` are all this type declares, with values it knows:
        a record written by a later release may hold more (docs/evolution.md)."""
        return None not in self._content_releases(fields)

    def _content_releases(self, fields: Mapping[str, Any]) -> list[int | None]:
        """The type's release, and that of each field or enum value `fields` hold
        (None: one this type does not declare, a later release's)."""
        releases: list[int | None] = [self.since]
        by_name = {f.name: f for f in self.fields}
        for name, value in fields.items():
            spec = by_name.get(name)
            if spec is None:
                releases.append(None)
            elif spec.enum is not None and isinstance(value, str | list):
                for item in value if isinstance(value, list) else [value]:
                    known = item in spec.enum.__members__
                    releases.append(spec.added_in(item) if known else None)
            else:
                releases.append(spec.since)
        return releases

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @functools.cached_property
    def has_floats(self) -> bool:
        """Whether a field of this type holds a FLOAT (alone, in a list or an object)."""
        return any(FieldKind.FLOAT in _kinds(f) for f in self.fields)

    @property
    def attachment_fields(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.kind is FieldKind.ATTACHMENT)

    def normalize_changes(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Validate a partial update: a value sets the field, None clears it."""
        by_name = {f.name: f for f in self.fields}
        normalized: dict[str, Any] = {}
        for name, value in changes.items():
            spec = by_name.get(name)
            if spec is None:
                raise BadUserInput(f"{self.name} has no field {name!r}")
            normalized[name] = None if value is None else spec.normalize(value, f"{self.name}.")
        return normalized

    def check_required(self, changes: Mapping[str, Any], whole: bool) -> None:
        """BadUserInput naming a required field that `changes` clear or, when they are
        a whole record (`whole`: a create, a put's state), leave out."""
        for spec in self.fields:
            if spec.required and (spec.name in changes or whole) and changes.get(spec.name) is None:
                raise BadUserInput(f"{self.name}.{spec.name} is required (it cannot be null)")


def apply_changes(fields: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """Fields after a normalized partial update: absent untouched, None cleared."""
    merged = dict(fields)
    for name, value in changes.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged


def check_size(fields: Mapping[str, Any]) -> None:
    """BadUserInput when `fields` take more than MAX_ITEM_BYTES: a string its UTF-8
    bytes, any other value (a number, a list, an object) its JSON's, as a client gets
    it. Values were normalized (check_text), so encoding cannot fail here."""
    size = sum(len(k) + _size(v) for k, v in fields.items())
    if size > MAX_ITEM_BYTES:
        raise BadUserInput(f"item is too large: {size} bytes of fields, at most {MAX_ITEM_BYTES}")


def _kinds(spec: Field) -> set[FieldKind]:
    """The kinds a value of `spec` holds: its own, its items', its sub-fields'."""
    kinds = {spec.kind} | ({spec.of} if spec.of is not None else set())
    return kinds.union(*(_kinds(sub) for sub in spec.fields))


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode())
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


@functools.cache
def unknown_type(code: str) -> ItemType:
    """The stand-in for a stored type code this server's catalog does not declare (a
    later release's type, read by an earlier server): kept, never rendered."""
    return ItemType(name=code, code=code, fields=(), known=False)
