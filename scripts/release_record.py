"""The record of an app's catalog releases (the releases/ folder beside its catalog
file, as examples/family/releases/; docs/evolution.md): what each release that
shipped declared, so that scripts/check can refuse a change that would
break a client or a server of that release.

releases/N.json is release N's catalog: its types (name, code, since), each type's
fields (name, kind, maxLength where the kind has one, the enum it takes, since; a
LIST's item kind `of` and maxItems, an INT's or a FLOAT's minimum and maximum where
declared, an OBJECT's sub-fields `fields`) and the enums with their values (since).
releases/N.graphql is the schema a server of release N served. Both are written
once, by scripts/record-release, and never rewritten (scripts/evolution_check.py
compares them with every committed version).
They are dev and CI files: the Lambda bundle ships api/ alone.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from api.domain.item_types import Field, FieldKind, ItemType
from api.settings import DEFAULT_CATALOG_FILE, catalog_choice

ROOT = Path(__file__).resolve().parents[1]


def schema_file(catalog_file: Path) -> Path:
    """The schema an app's server serves, as committed: the default app's (the family
    example) is the checkout's own schema.graphql, at its root (docs/layout.md); any
    other app's sits beside its catalog file."""
    if catalog_file.resolve() == DEFAULT_CATALOG_FILE.resolve():
        return ROOT / "schema.graphql"
    return catalog_file.parent / "schema.graphql"


# The app's folder (SYNC_CATALOG_FILE's): its catalog and its recorded releases;
# and the schema its server serves.
APP_DIR = catalog_choice().file.parent
RECORD_DIR = APP_DIR / "releases"
SCHEMA_FILE = schema_file(catalog_choice().file)
# The kinds whose values max_length bounds (item_types._string); other kinds ignore it.
_BOUNDED = (FieldKind.STRING, FieldKind.ID)

Entry = dict[str, Any]


def app_repo(folder: Path = APP_DIR) -> Path | None:
    """The git checkout that holds an app's folder (the API's for the shipped
    examples, the app team's own for theirs), whose history the record is checked
    against; None outside one."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
        )
    except (FileNotFoundError, NotADirectoryError):
        return None
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def shown(path: Path) -> str:
    """A path as scripts print it: under the checkout, relative to it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def entry_of(declared: Iterable[ItemType], release: int) -> Entry:
    """Release `release` of the declaration, as the record holds it. What a release
    includes is the runtime's own rule (`ItemType.at`, `Field.at`); the since of an
    enum value is read from the whole declaration, as `at` drops it from its views."""
    types: list[Entry] = []
    enums: dict[str, dict[str, int]] = {}
    for item_type in declared:
        if item_type.at(release) is None:
            continue
        fields: list[Entry] = []
        for spec in item_type.fields:
            if spec.at(release) is None:
                continue
            fields.append(_field_entry(spec, release, enums) | {"since": spec.since})
        types.append(
            {"name": item_type.name, "code": item_type.code, "since": item_type.since}
            | {"fields": fields}
        )
    return {
        "release": release,
        "types": types,
        "enums": [
            {"name": name, "values": [{"name": v, "since": s} for v, s in values.items()]}
            for name, values in enums.items()
        ],
    }


def _field_entry(spec: Field, release: int, enums: dict[str, dict[str, int]]) -> Entry:
    """A field's attributes as recorded (a sub-field's too, without its since): the
    attributes of the new kinds only where they are set, so that a record written
    before them (releases/1.json) reads the same."""
    field: Entry = {"name": spec.name, "kind": spec.kind.value}
    item = spec.item if spec.kind is FieldKind.LIST else spec
    if spec.kind is FieldKind.LIST:
        field["of"] = item.kind.value
        field["maxItems"] = spec.max_items
    if item.kind in _BOUNDED:
        field["maxLength"] = spec.max_length
    for bound in ("minimum", "maximum"):
        if getattr(spec, bound) is not None:
            field[bound] = getattr(spec, bound)
    if spec.enum is not None:
        field["enum"] = spec.enum.__name__
        values = enums.setdefault(spec.enum.__name__, {})
        for value in spec.enum_values(release):
            since = spec.added_in(value)
            values[value] = min(values.get(value, since), since)
    if spec.fields:
        field["fields"] = [_field_entry(sub, release, enums) for sub in spec.fields]
    if spec.ref is not None:
        field["type"] = spec.ref
    return field


def flatten(entry: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """An entry as {what: its attributes}: "type Person", "field Person.givenName",
    "enum value RelationshipType.SELF". The unit the checks compare and name."""
    flat: dict[str, dict[str, Any]] = {}
    for item_type in entry["types"]:
        flat[f"type {item_type['name']}"] = {k: v for k, v in item_type.items() if k != "fields"}
        for field in item_type["fields"]:
            flat[f"field {item_type['name']}.{field['name']}"] = dict(field)
    for enum in entry["enums"]:
        for value in enum["values"]:
            flat[f"enum value {enum['name']}.{value['name']}"] = dict(value)
    return flat


def dump(entry: Entry) -> str:
    """JSON with an entry a line (a field, an enum value): a diff names what changed."""

    def line(value: Any) -> str:
        return json.dumps(value, separators=(", ", ": "))

    types = ",\n".join(
        f'    {line({k: v for k, v in t.items() if k != "fields"})[:-1]}, "fields": [\n'
        + ",\n".join(f"      {line(f)}" for f in t["fields"])
        + "\n    ]}"
        for t in entry["types"]
    )
    enums = ",\n".join(
        f'    {{"name": {line(e["name"])}, "values": [\n'
        + ",\n".join(f"      {line(v)}" for v in e["values"])
        + "\n    ]}"
        for e in entry["enums"]
    )
    text = f'{{\n  "release": {entry["release"]},\n  "types": [\n{types}\n  ],\n'
    text += f'  "enums": [\n{enums}\n  ]\n}}\n'
    assert json.loads(text) == entry
    return text


class Record:
    """The releases recorded in a folder: {N: (N.json's entry, N.graphql's text)}."""

    def __init__(self, folder: Path = RECORD_DIR) -> None:
        self.folder = folder

    def numbers(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        return sorted(int(p.stem) for p in self.folder.glob("*.json") if p.stem.isdigit())

    def last(self) -> int:
        return max(self.numbers(), default=0)

    def entry(self, release: int) -> Entry:
        loaded: Entry = json.loads((self.folder / f"{release}.json").read_text())
        return loaded

    def sdl(self, release: int) -> str | None:
        path = self.folder / f"{release}.graphql"
        return path.read_text() if path.is_file() else None

    def write(self, entry: Entry, sdl: str) -> list[Path]:
        self.folder.mkdir(parents=True, exist_ok=True)
        release = entry["release"]
        paths = [self.folder / f"{release}.json", self.folder / f"{release}.graphql"]
        paths[0].write_text(dump(entry))
        paths[1].write_text(sdl.rstrip("\n") + "\n")
        return paths
