"""A stored version of a synchronized entity, live or deleted, and the errors of a
write that cannot apply to it (they carry the current version: contract 3.5)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from api.domain.chain import Head
from api.domain.errors import NotFound, SyncError
from api.domain.item_types import ItemType
from api.domain.timestamps import format_time
from api.domain.tokens import token_time
from api.domain.visibility import Visibility


@dataclass(frozen=True)
class Record:
    """One entity at one change token.

    A deleted entity keeps its `item_type` so that its `DeletedItem` can say what
    was deleted. `fields` holds only the
    fields that are set, as plain JSON values (strings, booleans).
    """

    item_type: ItemType
    tenant_id: str
    id: str
    change_token: str
    created_at: datetime
    updated_at: datetime
    deleted: bool = False
    fields: dict[str, Any] = field(default_factory=dict)
    # The `sub` of the caller who wrote this version (None: written before writers
    # were recorded, or by a bulk load).
    written_by: str | None = None
    # The release its entity's copy is filed under (`ItemType.copy_release`,
    # docs/evolution.md), kept so that the next write, by a server of any release,
    # removes that copy (None: a deletion, or written before copies were kept).
    copy_release: int | None = None
    # Its owner: the sub of its creator unless stated (None: written before owners
    # were kept), and who sees it (None: the whole tenant; contract 3.12).
    owner: str | None = None
    visibility: Visibility | None = None
    # A LeftView sentinel: the record left a reader's view at this token (not
    # deleted); it carries no fields, and `visibility` is the new one.
    left_view: bool = False
    # An entry of a group's stream that a later write superseded (its token): kept,
    # without fields, until the retention (docs/ordering.md, "Groups").
    superseded: str | None = None

    @property
    def marks(self) -> bool:
        """A marker of a join or a leave in its member's stream, superseded by itself:
        never sent; a sync's page ends before one its viewer does not reflect."""
        return self.superseded is not None and self.superseded == self.change_token


class CurrentVersionError(SyncError):
    """A write refused because of what the server holds now; carries that version."""

    def __init__(self, message: str, current: Record) -> None:
        super().__init__(message)
        self.current = current


class Conflict(CurrentVersionError):
    code = "CONFLICT"


class AlreadyExists(CurrentVersionError):
    code = "ALREADY_EXISTS"


@dataclass(frozen=True)
class LogTail:
    """The newest end of a tenant's change log, read together with its head, and
    what that read proves (`api.domain.chain`).

    `records` are ascending, above the `after` that was asked for and at most
    `bound`, and linked: no change lies between two of them. When `complete`, they
    are every change in (after, bound]; otherwise the rest lies below `lowest`
    (the first of them), or below `bound` when there are none.
    """

    head: str | None  # the head's token; None: the read met no head
    bound: str | None  # how far a sync may go; None: no change is provably complete
    records: list[Record]
    complete: bool
    # The head's `pv`: the last token of the transaction before the head's. Every
    # deletion up to it has removed its entity's earlier entry (docs/ordering.md).
    settled: str | None = None
    # The tenant's first token (None: not known): older ones are a deleted tenant's.
    born: str | None = None
    # The head as read (None: none): who sees what reads its stream entries.
    last: Head | None = None

    @property
    def lowest(self) -> str | None:
        return self.records[0].change_token if self.records else None


def write_refusal(
    item_type: ItemType, entity_id: str, expected_token: str | None, current: Record | None
) -> SyncError | None:
    """Why a write of `entity_id` expecting `expected_token` (None: a create) cannot
    apply while the server holds `current` (None: nothing); None when it can."""
    kind = item_type.name
    if expected_token is None:
        if current is None:
            return None
        return AlreadyExists(f"{kind} {entity_id} already exists", current)
    if current is None or current.item_type is not item_type:
        return not_found(item_type, entity_id, current)
    if current.deleted:
        return Conflict(f"{kind} {entity_id} was deleted", current)
    if current.change_token != expected_token:
        return Conflict(
            f"{kind} {entity_id} changed: its change token is {current.change_token}, "
            f"not {expected_token}",
            current,
        )
    return None


def not_found(item_type: ItemType, entity_id: str, current: Record | None) -> NotFound:
    """`entity_id` holds no `item_type`: nothing, or an entity of another type."""
    if current is not None and current.item_type is not item_type:
        other = current.item_type.name
        return NotFound(f"{entity_id} is a {other}, not a {item_type.name}")
    return NotFound(f"{item_type.name} {entity_id} does not exist")


def record_json(record: Record) -> dict[str, Any]:
    """The record as the JSON a client gets for its GraphQL type, every field
    selected (a conflict's `current`, an export's lines)."""
    common = {
        "id": record.id,
        "tenantID": record.tenant_id,
        "changeToken": record.change_token,
        "createdAt": format_time(record.created_at),
        "updatedAt": format_time(record.updated_at),
        "writtenBy": record.written_by,
    }
    if record.deleted:
        return {"__typename": "DeletedItem", **common, "type": record.item_type.code}
    # Every field stored, those of a later release than this server's too (an
    # export is a copy of what the table holds), then the unset ones as null.
    fields = {**dict.fromkeys(record.item_type.field_names), **record.fields}
    return {"__typename": record.item_type.name, **common, **fields}


def version_at(
    item_type: ItemType,
    tenant_id: str,
    entity_id: str,
    token: str,
    current: Record | None,
    fields: dict[str, Any],
    deleted: bool = False,
) -> Record:
    """The entity written at `token`: with `fields`, created when `current` was (or
    now, when there is none); or deleted, both of its times now."""
    at = token_time(token)
    if deleted:
        return Record(item_type, tenant_id, entity_id, token, at, at, deleted=True)
    created = at if current is None else current.created_at
    return Record(item_type, tenant_id, entity_id, token, created, at, fields=fields)
