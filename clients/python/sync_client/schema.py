"""What the app declares: the synchronized types of its catalog release, and the
GraphQL documents the client sends for them (docs/evolution.md).

An app's release is the catalog it was built with (`api.domain.catalog`, or an app's
own declaration through `api.domain.releases.at`); the client declares it to the
server with every request, selects only its fields, and skips changes of types it
does not know. An app upgraded to a later release catches up on what its earlier
release skipped (`SyncClient`, at its first sync after the upgrade)."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from api.domain import catalog, releases
from api.domain.attachments import REFERENCE_KEYS
from api.domain.item_types import Field, FieldKind, ItemType

# The header a request declares the app's release with (`api.graphql.context`).
RELEASE_HEADER = "X-Sync-Release"
_COMMON = "__typename id changeToken createdAt updatedAt"
# An attachment field is synced as its reference: no download link (it would expire
# in the local store, and a push sends the reference back as it is).
_REFERENCE = f"{{ {' '.join(REFERENCE_KEYS)} }}"


@dataclass(frozen=True)
class ClientSchema:
    item_types: tuple[ItemType, ...]
    release: int
    # The app's release whose clients are sent LeftViewItem (its `visibilitySince`,
    # contract 3.12; None: none): from it on, a sync selects LeftViewItem and lets go
    # of what it names (a server of an earlier release has no such type).
    visibility_since: int | None = None

    @classmethod
    def of(
        cls,
        declared: Iterable[ItemType],
        release: int | None = None,
        visibility_since: int | None = None,
    ) -> ClientSchema:
        """Release `release` (None: the newest) of a catalog's declaration, whose app's
        clients know LeftViewItem from release `visibility_since`."""
        declared = tuple(declared)
        release = releases.latest(declared) if release is None else release
        return cls(releases.at(declared, release), release, visibility_since)

    @property
    def left_view(self) -> bool:
        """Whether this release's syncs are sent LeftViewItem (contract 3.12)."""
        return self.visibility_since is not None and self.release >= self.visibility_since

    @classmethod
    def load(cls, path: str | Path) -> ClientSchema:
        """The schema scripts/generate-clients wrote (python/client_schema.json): a
        release of the app's catalog, as its release record holds it."""
        entry = json.loads(Path(path).read_text())
        values = {e["name"]: {v["name"]: v["since"] for v in e["values"]} for e in entry["enums"]}
        types = tuple(
            ItemType(
                name=t["name"],
                code=t["code"],
                since=t["since"],
                fields=tuple(_field(f, values) for f in t["fields"]),
            )
            for t in entry["types"]
        )
        return cls(types, entry["release"], entry.get("visibilitySince"))

    def at(self, release: int) -> ClientSchema:
        """This release's view of an earlier one (what a server of it validates)."""
        return ClientSchema(releases.at(self.item_types, release), release, self.visibility_since)

    def accepts(self, type_name: str, changes: dict[str, Any]) -> bool:
        """Whether a write of `changes` to a `type_name` is one this release declares."""
        specs = self.specs.get(type_name)
        if specs is None:
            return False
        for name, value in changes.items():
            spec = specs.get(name)
            if spec is None:
                return False
            if spec.enum is None or value is None:
                continue
            values = value if isinstance(value, list) else [value]  # a LIST of ENUM too
            if any(v not in spec.enum.__members__ for v in values):
                return False
        return True

    @cached_property
    def specs(self) -> dict[str, dict[str, Field]]:
        return {t.name: {f.name: f for f in t.fields} for t in self.item_types}

    @cached_property
    def fields(self) -> dict[str, tuple[str, ...]]:
        return {t.name: t.field_names for t in self.item_types}

    @cached_property
    def attachment_fields(self) -> dict[str, tuple[str, ...]]:
        return {t.name: t.attachment_fields for t in self.item_types}

    @cached_property
    def name_by_code(self) -> dict[str, str]:
        return {t.code: t.name for t in self.item_types}

    @cached_property
    def selection(self) -> str:
        return (
            _COMMON
            + "".join(
                f" ... on {t.name} {{ " + " ".join(_selected(f) for f in t.fields) + " }"
                for t in self.item_types
            )
            + " ... on DeletedItem { type }"
            + (" ... on LeftViewItem { type }" if self.left_view else "")
        )

    @cached_property
    def push(self) -> str:
        return (
            "mutation Push($input: PushChangesInput!) { pushChanges(input: $input) { results {"
            f" clientMutationID status replayed error {{ code message reason }}"
            f" item {{ {self.selection} }} }} }} }}"
        )

    @cached_property
    def pull(self) -> str:
        return (
            "query Pull($t: ID!, $since: ID, $cursor: String, $limit: Int) {"
            " changes(tenantID: $t, since: $since, cursor: $cursor, limit: $limit) {"
            f" items {{ {self.selection} }} cursor changeToken }} }}"
        )

    @cached_property
    def catch_up(self) -> str:
        return (
            "query CatchUp($t: ID!, $upTo: ID!, $types: [DeletedItemType!], $fields: [String!],"
            " $cursor: String, $limit: Int) { catchUp(tenantID: $t, upTo: $upTo, types: $types,"
            " fields: $fields, cursor: $cursor, limit: $limit) {"
            f" items {{ {self.selection} }} cursor changeToken }} }}"
        )

    def added_since(self, release: int) -> tuple[list[str], list[str]]:
        """What this release declares that release `release` did not: type codes, and
        fields as "Type.field" (an enum field whose values grew counts)."""
        types = [t.code for t in self.item_types if t.since > release]
        fields = [
            f"{t.name}.{f.name}"
            for t in self.item_types
            if t.since <= release
            for f in t.fields
            if f.since > release or any(r > release for _, r in f.enum_since)
        ]
        return types, fields

    def version_fields(self, item: dict[str, Any]) -> dict[str, Any] | None:
        """A live item's fields as this release declares them; None for a type it
        does not declare (a later release's, from a server of that release)."""
        names = self.fields.get(item["__typename"])
        return None if names is None else {name: item.get(name) for name in names}


def _field(entry: Mapping[str, Any], enums: Mapping[str, Mapping[str, int]]) -> Field:
    """A field of a release record's entry (scripts/release_record.py)."""
    kind = FieldKind(entry["kind"])
    attributes: dict[str, Any] = {"since": entry.get("since", 1)}
    if "of" in entry:
        attributes |= {"of": FieldKind(entry["of"]), "max_items": entry["maxItems"]}
    for key, attribute in (("maxLength", "max_length"), ("minimum", "minimum")):
        if key in entry:
            attributes[attribute] = entry[key]
    if "maximum" in entry:
        attributes["maximum"] = entry["maximum"]
    if "enum" in entry:
        since = enums[entry["enum"]]
        attributes["enum"] = enum.Enum(entry["enum"], {v: v for v in since})
        attributes["enum_since"] = tuple((v, r) for v, r in since.items() if r > 1)
    if "fields" in entry:
        attributes["fields"] = tuple(
            _field({k: v for k, v in sub.items() if k != "since"}, enums) for sub in entry["fields"]
        )
    return Field(entry["name"], kind, **attributes)


def _selected(spec: Field) -> str:
    """A field as a sync selects it: an attachment as its reference, an OBJECT (or a
    LIST of them) with its sub-fields."""
    if spec.kind is FieldKind.ATTACHMENT:
        return f"{spec.name} {_REFERENCE}"
    if spec.fields:
        return f"{spec.name} {{ {' '.join(sub.name for sub in spec.fields)} }}"
    return spec.name


# The product's catalog, as this process serves it.
PRODUCT = ClientSchema(catalog.ITEM_TYPES, catalog.RELEASE, catalog.VISIBILITY_RELEASE)
