"""An app's catalog file: the types it synchronizes, declared in YAML outside the
API's code (docs/evolution.md, "An app's data"), read into `ItemType`s.

The file holds `types` (each a `code`, an optional `description` and `since`, and
its `fields`), `enums` (each its `values`, a value a name or `{name, since}`) and
`builtinsSince`, the app's release that first served the API's own types (1 when
left out), and `visibilitySince`, its release whose clients are sent `LeftViewItem`
and may set visibilities (contract 3.12; left out: none yet), `removedSince`, its
release whose clients know a Member's role `REMOVED` (contract 6; left out: the
app's Member records have no such role, and a removal is a deletion), and
`groupsSince`, its release whose clients know groups (`Member.groups`, a
visibility's groups; left out: none yet). A field is
a `kind` (a `FieldKind` value: String, ID, Boolean, Date, Time, Enum, Color,
Attachment, Int, Float, List, Object) and the attributes its kind takes: `maxLength`,
`minimum`, `maximum`, `enum`, `of` and `maxItems` (a List), `fields` (an Object, or a
List of them), `since`, `deprecated`, `description`, `required`.

A declaration the API cannot serve is refused (CatalogError) with the file, the line
and what it names: an unknown key or kind, a value of the wrong type, a duplicate, a
name GraphQL cannot carry, an enum not declared, or what `field_kinds` refuses.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from api.domain.item_types import Field, FieldKind, ItemType

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_CODE = re.compile(r"[A-Z][A-Z0-9_]*")
_TOP = {"builtinsSince", "visibilitySince", "removedSince", "groupsSince", "enums", "types"}
_TYPE = {"code", "description", "since", "fields"}
_ENUM = {"values"}
_VALUE = {"name", "since"}
_FIELD = {
    "kind",
    "maxLength",
    "minimum",
    "maximum",
    "enum",
    "of",
    "maxItems",
    "fields",
    "since",
    "deprecated",
    "description",
    "required",
}
_KINDS = {kind.value: kind for kind in FieldKind}
# What every synchronized item has already (contract 2): no field takes these names.
_RESERVED_FIELDS = {"id", "tenantID", "changeToken", "createdAt", "updatedAt", "writtenBy"}


class CatalogError(ValueError):
    """A declaration the API refuses: `file:line: what: why`."""


@dataclass(frozen=True)
class AppCatalog:
    """What an app's file declares: its types, its release that took up the API's,
    its release whose clients know who sees what (contract 3.12), and its release
    whose clients know a Member's role REMOVED (contract 6)."""

    path: Path
    types: tuple[ItemType, ...]
    builtins_since: int
    visibility_since: int | None = None
    removed_since: int | None = None
    # Its release whose clients know groups (Member.groups, a visibility's groups).
    groups_since: int | None = None


class _Mapping(dict[str, Any]):
    """A YAML mapping that knows its line and each key's (1-based)."""

    def __init__(self) -> None:
        super().__init__()
        self.line = 0
        self.lines: dict[str, int] = {}


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


def _mapping(loader: _Loader, node: yaml.MappingNode) -> _Mapping:
    loader.flatten_mapping(node)
    mapping = _Mapping()
    mapping.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise _Refused(line, f"{key!r}", "a key is a name")
        if key in mapping:
            raise _Refused(line, key, "is declared twice")
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = line
    return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


class _Refused(Exception):
    def __init__(self, line: int, what: str, why: str) -> None:
        super().__init__(line, what, why)
        self.line, self.what, self.why = line, what, why


def load(path: Path, reserved: Iterable[ItemType] = ()) -> AppCatalog:
    """The app's catalog in `path`; CatalogError naming the file, the line and the
    type, field or enum value. `reserved`: the API's own types, whose names and
    codes an app type cannot take."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read the app's catalog ({exc.strerror})") from None
    try:
        document = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
        return _catalog(path, document, tuple(reserved))
    except _Refused as refused:
        raise CatalogError(f"{path}:{refused.line}: {refused.what}: {refused.why}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise CatalogError(f"{path}{line}: not YAML: {getattr(exc, 'problem', exc)}") from None


def _catalog(path: Path, document: Any, reserved: tuple[ItemType, ...]) -> AppCatalog:
    top = _section(document, 1, "the file", _TOP, required=("types",))
    builtins = _release(top, "builtinsSince", "builtinsSince")
    visibility = (
        _release(top, "visibilitySince", "visibilitySince") if "visibilitySince" in top else None
    )
    removed = _release(top, "removedSince", "removedSince") if "removedSince" in top else None
    if removed is not None and removed < builtins:
        raise _Refused(
            top.lines["removedSince"], "removedSince", "is no earlier than builtinsSince"
        )
    groups = _release(top, "groupsSince", "groupsSince") if "groupsSince" in top else None
    enums = {
        name: _enum(name, spec, top["enums"].lines[name])
        for name, spec in _section(top.get("enums", _Mapping()), top.line, "enums").items()
    }
    own = {f.enum.__name__ for t in reserved for f in t.fields if f.enum is not None}
    for name in enums.keys() & own:
        raise _Refused(top["enums"].lines[name], name, "is the API's own enum: name it otherwise")
    types_ = _section(top["types"], top.lines["types"], "types")
    if not types_:
        raise _Refused(top.lines["types"], "types", "an app declares at least one type")
    taken = {t.name: t for t in reserved} | {t.code: t for t in reserved}
    declared: list[ItemType] = []
    codes: dict[str, str] = {}
    for name, spec in types_.items():
        line = types_.lines[name]
        item_type = _type(name, spec, line, enums)
        for key in (item_type.name, item_type.code):
            if key in taken:
                raise _Refused(line, name, f"{key} is the API's own type: name it otherwise")
        if item_type.code in codes:
            raise _Refused(line, name, f"code {item_type.code} is {codes[item_type.code]}'s too")
        codes[item_type.code] = name
        declared.append(item_type)
    return AppCatalog(path, tuple(declared), builtins, visibility, removed, groups)


def _section(
    value: Any, line: int, what: str, keys: set[str] | None = None, required: tuple[str, ...] = ()
) -> _Mapping:
    if not isinstance(value, _Mapping):
        raise _Refused(line, what, "must be a mapping (name: value)")
    for key in value:
        if keys is None:
            if not _NAME.fullmatch(key):
                raise _Refused(value.lines[key], key, "a name is letters and digits")
        elif key not in keys:
            raise _Refused(
                value.lines[key], f"{what}.{key}", f"not one of {', '.join(sorted(keys))}"
            )
    for key in required:
        if key not in value:
            raise _Refused(value.line, what, f"declares {key}")
    return value


def _release(spec: _Mapping, key: str, what: str) -> int:
    value = spec.get(key, 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Refused(spec.lines.get(key, spec.line), what, f"{key} is a release, 1 or more")
    return value


def _text(spec: _Mapping, key: str, what: str) -> str | None:
    value = spec.get(key)
    if value is not None and not isinstance(value, str):
        raise _Refused(spec.lines[key], what, f"{key} is text")
    return value


def _enum(name: str, spec: Any, line: int) -> tuple[type[enum.Enum], dict[str, int]]:
    spec = _section(spec, line, name, _ENUM, required=("values",))
    values = spec["values"]
    if not isinstance(values, list) or not values:
        raise _Refused(spec.lines["values"], name, "values is a list of names")
    since: dict[str, int] = {}
    for value in values:
        if isinstance(value, _Mapping):
            _section(value, value.line, name, _VALUE, required=("name",))
            at, value = _release(value, "since", f"{name}.{value['name']}"), value["name"]
        else:
            at = 1
        if not isinstance(value, str) or not _NAME.fullmatch(value.replace("_", "A")):
            raise _Refused(spec.lines["values"], f"{name}.{value}", "a value is a name")
        if value in since:
            raise _Refused(spec.lines["values"], f"{name}.{value}", "is declared twice")
        since[value] = at
    declared: type[enum.Enum] = enum.Enum(name, {v: v for v in since})  # type: ignore[misc]
    return declared, since


def _type(name: str, spec: Any, line: int, enums: dict[str, Any]) -> ItemType:
    spec = _section(spec, line, name, _TYPE, required=("code", "fields"))
    code = spec["code"]
    if not isinstance(code, str) or not _CODE.fullmatch(code):
        raise _Refused(spec.lines["code"], name, "code is upper-case letters, digits and _")
    fields = _section(spec["fields"], spec.lines["fields"], f"{name}.fields")
    if not fields:
        raise _Refused(spec.lines["fields"], name, "a type declares at least one field")
    for field in fields.keys() & _RESERVED_FIELDS:
        raise _Refused(
            fields.lines[field], f"{name}.{field}", "every item has it: name it otherwise"
        )
    declared = tuple(
        _field(f"{name}.", field, value, fields.lines[field], enums)
        for field, value in fields.items()
    )
    return ItemType(
        name=name,
        code=code,
        fields=declared,
        description=_text(spec, "description", name),
        since=_release(spec, "since", name),
    )


def _field(owner: str, name: str, spec: Any, line: int, enums: dict[str, Any]) -> Field:
    what = f"{owner}{name}"
    spec = _section(spec, line, what, _FIELD, required=("kind",))
    kind = _kind(spec, "kind", what)
    of = _kind(spec, "of", what) if "of" in spec else None
    attributes: dict[str, Any] = {"kind": kind, "of": of}
    for key, attribute in (("maxLength", "max_length"), ("maxItems", "max_items")):
        if key in spec:
            value = spec[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _Refused(spec.lines[key], what, f"{key} is a whole number from 1")
            attributes[attribute] = value
    for key in ("minimum", "maximum"):
        if key in spec:
            value = spec[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _Refused(spec.lines[key], what, f"{key} is a number")
            attributes[key] = value
    if "enum" in spec:
        if FieldKind.ENUM not in (kind, of):
            raise _Refused(
                spec.lines["enum"], what, "only an Enum (or a List of them) names an enum"
            )
        if spec["enum"] not in enums:
            raise _Refused(spec.lines["enum"], what, f"enum {spec['enum']!r} is not declared")
        attributes["enum"], values = enums[spec["enum"]]
        attributes["enum_since"] = tuple((v, s) for v, s in values.items() if s > 1)
    if "fields" in spec:
        subs = _section(spec["fields"], spec.lines["fields"], f"{what}.fields")
        attributes["fields"] = tuple(
            _field(f"{what}.", sub, value, subs.lines[sub], enums) for sub, value in subs.items()
        )
    if "required" in spec:
        if not isinstance(spec["required"], bool):
            raise _Refused(spec.lines["required"], what, "required is true or false")
        attributes["required"] = spec["required"]
    if "since" in spec:
        attributes["since"] = _release(spec, "since", what)
    try:
        return Field(
            name,
            description=_text(spec, "description", what),
            deprecated=_text(spec, "deprecated", what),
            **attributes,
        )
    except ValueError as exc:  # field_kinds' refusal: "name[.sub]: why"
        named, _, why = str(exc).partition(": ")
        raise _Refused(line, f"{owner}{named}", why) from None


def _kind(spec: _Mapping, key: str, what: str) -> FieldKind:
    value = spec[key]
    if value not in _KINDS:
        raise _Refused(spec.lines[key], what, f"{key} is one of {', '.join(_KINDS)}")
    return _KINDS[value]
