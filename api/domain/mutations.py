"""Mutations as data, and the stored first outcome that makes them idempotent.

A mutation sent with a `clientMutationID` is applied once per tenant: its
outcome (the item written, or the error) is stored with a fingerprint of the
mutation, in the same transaction as the write itself. A retry with the same id
gets that outcome back, marked as a replay, and writes nothing; a different
mutation under the same id is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from api.domain import catalog
from api.domain.errors import BadUserInput, NotFound, SyncError
from api.domain.identifiers import check_entity_id, check_identifier
from api.domain.item_types import ItemType, apply_changes, check_size
from api.domain.records import AlreadyExists, Conflict, CurrentVersionError, Record
from api.domain.tokens import check_token, token_time
from api.domain.visibility import Entries, Visibility

# "put": a state-based write, for replication protocols that say "I assume the
# server holds this state; here is the new one" (RxDB, PouchDB-style).
# "share": setVisibility (contract 3.12), token-guarded like an update.
Verb = Literal["create", "update", "delete", "put", "share"]
# Outcomes of client mutation ids are kept at least this long (then DynamoDB TTL
# removes them); the schema promises replays for this many days.
OUTCOME_RETENTION_S = 8 * 24 * 3600
_CLIENT_MUTATION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
# Errors that depend on the server's state when the mutation ran: a retry must
# see the same answer, so they are stored. Bad input is rejected again anyway,
# and UNAVAILABLE must not be stored: a retry has to really retry.
_STORED_ERRORS: dict[str, type[SyncError]] = {
    "CONFLICT": Conflict,
    "ALREADY_EXISTS": AlreadyExists,
    "NOT_FOUND": NotFound,
}


@dataclass(frozen=True)
class State:
    """An entity as a device holds it: the fields that are set, or deleted."""

    fields: Mapping[str, Any] = field(default_factory=dict)
    deleted: bool = False

    def normalized(self, item_type: ItemType) -> State:
        if self.deleted:
            return State(deleted=True)
        return State(apply_changes({}, item_type.normalize_changes(self.fields)))

    def holds(self, item_type: ItemType, current: Record | None) -> bool:
        """Whether `current` (None: nothing) is this state of this type."""
        if current is None or current.item_type is not item_type:
            return False
        if current.deleted or self.deleted:
            return current.deleted == self.deleted
        return dict(current.fields) == dict(self.fields)

    def as_json(self) -> Any:
        return {"deleted": True} if self.deleted else dict(self.fields)

    def rebased(self, assumed: State, current: Record) -> State | None:
        """This new state moved onto `current`, when the two changed different fields
        of `assumed` (both live): the server's changes kept, this one's re-applied.
        None when they overlap or either side deleted: a conflict."""
        if self.deleted or assumed.deleted or current.deleted:
            return None
        names = set(assumed.fields) | set(self.fields) | set(current.fields)
        mine = {n for n in names if assumed.fields.get(n) != self.fields.get(n)}
        theirs = {n for n in names if assumed.fields.get(n) != current.fields.get(n)}
        if mine & theirs:
            return None
        merged = {**current.fields, **{n: self.fields.get(n) for n in mine}}
        return State({n: v for n, v in merged.items() if v is not None})


@dataclass(frozen=True)
class Mutation:
    verb: Verb
    item_type: ItemType
    tenant_id: str
    entity_id: str | None = None
    expected_token: str | None = None
    changes: Mapping[str, Any] = field(default_factory=dict)
    client_mutation_id: str | None = None
    # "put" only: the state the device assumes the server holds (None: that the
    # entity does not exist), the new state, and whether to rebase it field by field
    # on a server state that changed other fields.
    assumed: State | None = None
    state: State | None = None
    merge_fields: bool = False
    # Who sees the record (contract 3.12): a create's or put's, or a share's new one
    # (None: the whole tenant), when `sets_visibility`; its owner "" is the writer.
    visibility: Visibility | None = None
    sets_visibility: bool = False
    # A share named by id alone (setVisibility): its type is the stored entity's,
    # filled in by the service before it is decided (`item_type` is a placeholder).
    untyped: bool = False

    def validated(self) -> Mutation:
        """This mutation with its ids, token and client mutation id checked and its
        changes normalized (`ItemType.normalize_changes`); BadUserInput otherwise.
        Whether it can apply to what the server holds is the store's question."""
        check_identifier(self.tenant_id, "tenantID")
        if self.client_mutation_id is not None:
            check_client_mutation_id(self.client_mutation_id)
        if self.verb == "put":
            return self._validated_put()
        if self.verb != "create" and (self.entity_id is None or self.expected_token is None):
            raise BadUserInput(f"{self.verb} needs an id and a changeToken")
        if self.entity_id is None and self.item_type.named_ids:
            raise BadUserInput(f"{self.item_type.name}.id is required")
        if self.entity_id is not None:
            check_entity_id(self.entity_id, "id", self.item_type.named_ids)
        if self.expected_token is not None:
            check_token(self.expected_token, "changeToken")
        if self.verb == "share":
            return self
        if self.verb != "delete":
            self.item_type.check_required(self.changes, whole=self.verb == "create")
        return replace(self, changes=self.item_type.normalize_changes(self.changes))

    def _validated_put(self) -> Mutation:
        if self.entity_id is None or self.state is None or self.expected_token is not None:
            raise BadUserInput("put needs an id and a state, and takes no changeToken")
        check_entity_id(self.entity_id, "id", self.item_type.named_ids)
        state = self.state.normalized(self.item_type)
        if not state.deleted:
            self.item_type.check_required(state.fields, whole=True)
        check_size(state.fields)
        assumed = None if self.assumed is None else self.assumed.normalized(self.item_type)
        return replace(self, assumed=assumed, state=state)

    def fingerprint(self) -> str:
        """Identifies what the (validated) mutation asks for, to refuse reuse of its id
        for another."""
        canonical = json.dumps(
            [
                self.verb,
                self.item_type.code,
                self.entity_id,
                self.expected_token,
                dict(self.changes),
                *(
                    [
                        None if self.assumed is None else self.assumed.as_json(),
                        self.state.as_json(),
                        self.merge_fields,
                    ]
                    if self.state is not None
                    else []
                ),
                *(
                    [_visibility_json(self.visibility)]
                    if self.sets_visibility or self.verb == "share"
                    else []
                ),
            ],
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def check_client_mutation_id(value: str) -> str:
    if not isinstance(value, str) or not _CLIENT_MUTATION_ID_RE.fullmatch(value):
        raise BadUserInput(
            "clientMutationID must be 1-128 characters of letters, digits, '_', '.', ':' or '-'"
        )
    return value


def is_stored_error(error: SyncError) -> bool:
    return error.code in _STORED_ERRORS


@dataclass(frozen=True)
class StoredOutcome:
    """The first outcome of a client mutation id."""

    client_mutation_id: str
    fingerprint: str
    record: Record | None = None
    error: SyncError | None = None
    expires_at: int = 0  # epoch seconds; kept at least until then

    @property
    def versions(self) -> tuple[Record, ...]:
        """The versions a replay of it answers with: its record, or its error's current."""
        if self.record is not None:
            return (self.record,)
        if isinstance(self.error, CurrentVersionError):
            return (self.error.current,)
        return ()

    def to_json(self) -> str:
        if self.record is not None:
            return json.dumps({"record": _record_to_json(self.record)}, separators=(",", ":"))
        assert self.error is not None
        error: dict[str, Any] = {"code": self.error.code, "message": str(self.error)}
        if isinstance(self.error, CurrentVersionError):
            error["current"] = _record_to_json(self.error.current)
        return json.dumps({"error": error}, separators=(",", ":"))

    @classmethod
    def from_json(
        cls, tenant_id: str, client_mutation_id: str, fingerprint: str, data: str
    ) -> StoredOutcome:
        parsed = json.loads(data)
        if "record" in parsed:
            record = _record_from_json(tenant_id, parsed["record"])
            return cls(client_mutation_id, fingerprint, record=record)
        error_data = parsed["error"]
        error_class = _STORED_ERRORS[error_data["code"]]
        error: SyncError
        if issubclass(error_class, CurrentVersionError):
            current = _record_from_json(tenant_id, error_data["current"])
            error = error_class(error_data["message"], current)
        else:
            error = error_class(error_data["message"])
        return cls(client_mutation_id, fingerprint, error=error)


@dataclass(frozen=True)
class Write:
    """One entity's new version as a transaction writes it: created when
    `expected_token` is None (the id must be free), else replacing the live version
    of the same type at `expected_token`; with the mutation's first outcome when it
    has a clientMutationID (stored in the same transaction)."""

    record: Record
    expected_token: str | None
    outcome: StoredOutcome | None = None
    # The version this write replaces, kept in the entity's history (None: a create,
    # or history is off), and when that copy and a deletion's log entry expire
    # (epoch seconds, `api.domain.retention`).
    kept: Record | None = None
    expires_at: int | None = None
    # The entity's copy (docs/evolution.md): the release to put the new version under
    # (None: a deletion, which has none), and the release whose copy of the entity
    # to remove (None: none, or the same key is put again).
    later: int | None = None
    later_removed: int | None = None
    # A Member record's access item (contract 6): its sub and the role it now gives
    # (None: the record is deleted, and so is the item).
    member: tuple[str, str | None] | None = None
    # Its access item's groups joined or left within the retention: (group, token).
    group_changes: tuple[tuple[str, str], ...] = ()
    # The entries it puts and removes in the main log and the streams (contract
    # 3.12; the default: its version in the main log, replacing its previous one).
    entries: Entries = field(default_factory=Entries)


def _visibility_json(visibility: Visibility | None) -> Any:
    if visibility is None:
        return None
    return {"owner": visibility.owner, "sharedWith": list(visibility.shared_with)}


def _record_to_json(record: Record) -> dict[str, Any]:
    return {
        "type": record.item_type.code,
        "id": record.id,
        "token": record.change_token,
        "createdMs": int(record.created_at.timestamp() * 1000),
        "deleted": record.deleted,
        "fields": dict(record.fields),
        **({} if record.written_by is None else {"by": record.written_by}),
        **({} if record.owner is None else {"owner": record.owner}),
        **({} if record.visibility is None else {"vis": _visibility_json(record.visibility)}),
    }


def _record_from_json(tenant_id: str, data: dict[str, Any]) -> Record:
    return Record(
        item_type=catalog.of_code(data["type"]),
        tenant_id=tenant_id,
        id=data["id"],
        change_token=data["token"],
        created_at=datetime.fromtimestamp(data["createdMs"] / 1000, tz=UTC),
        updated_at=token_time(data["token"]),
        deleted=data["deleted"],
        fields=data["fields"],
        written_by=data.get("by"),
        owner=data.get("owner"),
        visibility=None
        if data.get("vis") is None
        else Visibility(data["vis"]["owner"], tuple(data["vis"]["sharedWith"])),
    )
