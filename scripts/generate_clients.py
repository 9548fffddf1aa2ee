"""scripts/generate-clients: every shipped client's schema, generated from an app's
catalog (SYNC_CATALOG_FILE) for one of its releases (docs/clients.md, "Generated
schemas"). Written into OUT:

- schema.graphql: the schema a server of that release serves (graphql-codegen's
  input for TypeScript types and typed documents);
- rxdb/schemas.json: each type's RxDB collection schema (JSON Schema), `version` the
  number of later releases that added a field to the type (each an identity
  migration);
- watermelondb/schema.js: the WatermelonDB `appSchema` (version: the release), the
  column map `tables` that `createSyncAPI` takes, and the `schemaMigrations` steps
  from each recorded release to the next (createTable, addColumns);
- python/client_schema.json: the reference client's ClientSchema
  (`sync_client.schema.ClientSchema.load`), the catalog of that release as the
  release record holds it, and the app's `visibilitySince`.

`--app-schema` puts schema.graphql where the app keeps the one its server serves
(scripts/export-schema's file: the repository's root schema.graphql for the default
app, the family example; beside the catalog for any other) rather than in OUT, so
that an app's newest schema is one file, not two copies.

`--check` writes nothing: it fails, naming each file, when the files are not what
the catalog gives (scripts/check runs it for each app of examples/, with
`--app-schema`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from api.domain import catalog, releases
from api.domain.item_types import Field, FieldKind, ItemType
from scripts.release_record import ROOT, entry_of, schema_file

# Attachment references, as the RxDB module's `attachmentProperty`.
_REFERENCE = {
    "type": "object",
    "properties": {
        "sha256": {"type": "string", "maxLength": 64},
        "size": {"type": "integer"},
        "contentType": {"type": "string"},
    },
    "required": ["sha256", "size", "contentType"],
}
_STRINGS = {FieldKind.DATE, FieldKind.TIME, FieldKind.ENUM, FieldKind.COLOR}
# WatermelonDB's column types: lists, objects and attachment references are
# JSON-encoded strings (WatermelonDB has no list or map column).
_COLUMN = {FieldKind.BOOLEAN: "boolean", FieldKind.INT: "number", FieldKind.FLOAT: "number"}
# The module's change token column (syncColumns(), its default tokenColumn).
_TOKEN = json.dumps({"name": "change_token", "type": "string", "isOptional": True})


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _property(spec: Field) -> dict[str, Any]:
    """A field's JSON Schema in an RxDB collection."""
    kind = spec.kind
    if kind is FieldKind.LIST:
        return {"type": "array", "maxItems": spec.max_items, "items": _property(spec.item)}
    if kind is FieldKind.OBJECT:
        return {"type": "object", "properties": {s.name: _property(s) for s in spec.fields}}
    if kind is FieldKind.ATTACHMENT:
        return _REFERENCE
    if kind is FieldKind.BOOLEAN:
        return {"type": "boolean"}
    if kind in (FieldKind.INT, FieldKind.FLOAT):
        schema: dict[str, Any] = {"type": "integer" if kind is FieldKind.INT else "number"}
        for bound in ("minimum", "maximum"):
            if getattr(spec, bound) is not None:
                schema[bound] = getattr(spec, bound)
        return schema
    if kind in (FieldKind.STRING, FieldKind.ID):
        return {"type": "string", "maxLength": spec.max_length}
    assert kind in _STRINGS  # an enum value a later release adds arrives as its name
    return {"type": "string"}


def rxdb(declared: tuple[ItemType, ...], release: int) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for item_type in releases.at(declared, release):
        # An enum value a release adds changes no property (an enum is a string).
        grew = {f.since for f in item_type.fields}
        schemas[item_type.name] = {
            "version": len({r for r in grew if item_type.since < r <= release}),
            "primaryKey": "id",
            "type": "object",
            "properties": {
                "id": {"type": "string", "maxLength": 64},
                **{f.name: _property(f) for f in item_type.fields},
            },
            "required": ["id"],
        }
    return schemas


_JSON = {FieldKind.LIST, FieldKind.OBJECT}


def _has_json(item_type: ItemType) -> bool:
    return any(f.kind in _JSON for f in item_type.fields)


def _columns(item_type: ItemType) -> list[dict[str, Any]]:
    return [
        {"name": snake(f.name), "type": _COLUMN.get(f.kind, "string"), "isOptional": True}
        for f in item_type.fields
    ]


def _js(value: Any) -> str:
    return json.dumps(value, indent=2)


def watermelondb(
    declared: tuple[ItemType, ...], release: int, source: str, visibility_since: int | None = None
) -> str:
    served = releases.at(declared, release)
    tables = {
        snake(t.name): {
            "type": t.code,
            "typeName": t.name,
            "columns": {f.name: snake(f.name) for f in t.fields},
            **({"attachments": list(t.attachment_fields)} if t.attachment_fields else {}),
            # Lists and objects: JSON-encoded columns; an object's sub-fields selected.
            **({"json": [f.name for f in t.fields if f.kind in _JSON]} if _has_json(t) else {}),
            **(
                {"objects": {f.name: [s.name for s in f.fields] for f in t.fields if f.fields}}
                if any(f.fields for f in t.fields)
                else {}
            ),
            # What a server of an earlier release can be asked (a rollback).
            "release": t.since,
            **(
                {"fieldReleases": {f.name: f.since for f in t.fields if f.since > 1}}
                if any(f.since > 1 for f in t.fields)
                else {}
            ),
        }
        for t in served
    }
    schema = ",\n".join(
        f"    tableSchema({{ name: {json.dumps(snake(t.name))}, columns: [\n"
        + "".join(f"      {json.dumps(c)},\n" for c in _columns(t))
        + f"      {_TOKEN},\n    ] }})"
        for t in served
    )
    steps = []
    for to in range(2, release + 1):
        before = {t.name: t for t in releases.at(declared, to - 1)}
        parts = []
        for t in releases.at(declared, to):
            if t.name not in before:
                parts.append(
                    f"        createTable({{ name: {json.dumps(snake(t.name))}, columns: [\n"
                    + "".join(f"          {json.dumps(c)},\n" for c in _columns(t))
                    + f"          {_TOKEN},\n        ] }}),\n"
                )
                continue
            known = set(before[t.name].field_names)
            added = [c for f, c in zip(t.fields, _columns(t), strict=True) if f.name not in known]
            if added:
                parts.append(
                    f"        addColumns({{ table: {json.dumps(snake(t.name))}, columns: [\n"
                    + "".join(f"          {json.dumps(c)},\n" for c in added)
                    + "        ] }),\n"
                )
        steps.append(f"    {{ toVersion: {to}, steps: [\n" + "".join(parts) + "    ] },\n")
    return (
        f"// Generated by scripts/generate-clients from {source}, release {release}: do not edit.\n"
        "// Lists, objects and attachment references are JSON-encoded string columns.\n"
        'import { appSchema, tableSchema } from "@nozbe/watermelondb";\n'
        "import { addColumns, createTable, schemaMigrations } from "
        '"@nozbe/watermelondb/Schema/migrations/index.js";\n\n'
        f"export const release = {release};\n\n"
        + (
            "// The app's release whose clients are sent LeftViewItem (contract 3.12).\n"
            f"export const visibilitySince = {visibility_since};\n\n"
            if visibility_since is not None
            else ""
        )
        + "// createSyncAPI({ tables, release, visibilitySince, ... }): each table's type and"
        " its columns.\n"
        f"export const tables = {_js(tables)};\n\n"
        f"export const schema = appSchema({{\n  version: {release},\n  tables: [\n"
        f"{schema},\n  ],\n}});\n\n"
        "export const migrations = schemaMigrations({\n  migrations: [\n"
        + "".join(reversed(steps))
        + "  ],\n});\n"
    )


def schema_graphql(catalog_file: Path, release: int) -> str:
    """The schema a server of `release` of the app serves (its own process: the
    schema is built from the catalog at import)."""
    code = "from api.graphql.schema import default_schema as s; print(s().as_str(), end='')"
    env = {**os.environ, "SYNC_CATALOG_FILE": str(catalog_file), "SYNC_RELEASE": str(release)}
    env.pop("SYNC_CATALOG", None)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.rstrip("\n") + "\n"


def generate(catalog_file: Path, release: int | None) -> dict[str, str]:
    """{path under OUT: its text}."""
    from api.domain.catalog_file import load

    app = load(catalog_file, reserved=catalog.BUILTIN)
    declared = catalog.declared_by(app)
    newest = releases.latest(declared)
    release = newest if release is None else release
    if not 1 <= release <= newest:
        raise SystemExit(f"generate-clients: --release is 1 to {newest} for {catalog_file}")
    source = catalog_file.relative_to(ROOT) if catalog_file.is_relative_to(ROOT) else catalog_file
    visibility = app.visibility_since
    return {
        "schema.graphql": schema_graphql(catalog_file, release),
        "rxdb/schemas.json": json.dumps(rxdb(declared, release), indent=2) + "\n",
        "watermelondb/schema.js": watermelondb(declared, release, str(source), visibility),
        "python/client_schema.json": json.dumps(_python(app, declared, release), indent=2) + "\n",
    }


def _python(app: Any, declared: tuple[ItemType, ...], release: int) -> dict[str, Any]:
    """The reference client's ClientSchema: the release record's entry, and the app's
    `visibilitySince` when it names one (its clients of that release on select and
    handle LeftViewItem)."""
    entry = entry_of(declared, release)
    if app.visibility_since is not None:
        entry["visibilitySince"] = app.visibility_since
    return entry


def stale(paths: dict[str, Path], files: dict[str, str]) -> list[str]:
    return [
        f"{paths[name]} is not what the catalog gives: run scripts/generate-clients"
        for name, text in files.items()
        if not paths[name].is_file() or paths[name].read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/generate-clients", description=__doc__)
    parser.add_argument("--catalog", type=Path, help="the app's catalog (SYNC_CATALOG_FILE)")
    parser.add_argument("--release", type=int, help="the release (default: the newest)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--app-schema",
        action="store_true",
        help="schema.graphql as the app's own (the root's for the default app), not in OUT",
    )
    parser.add_argument("--check", action="store_true", help="fail on stale files, write none")
    args = parser.parse_args(argv)
    if args.app_schema and args.release is not None:
        parser.error("--app-schema is the newest release's schema: leave --release out")
    catalog_file = (args.catalog or catalog.CHOICE.file).resolve()
    files = generate(catalog_file, args.release)
    paths = {name: args.out / name for name in files}
    if args.app_schema:
        paths["schema.graphql"] = schema_file(catalog_file)
    if args.check:
        problems = stale(paths, files)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    for name, text in files.items():
        path = paths[name]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
