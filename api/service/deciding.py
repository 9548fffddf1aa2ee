"""Deciding a write: what one mutation of a push does, given what the push knows of
the server (a write planned for the next transaction, or an answer without
writing: a replay, a refusal, a no-op), and the records a plan writes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

from api.domain.catalog import MEMBER
from api.domain.errors import BadUserInput, InternalError, RoleForbidden, SyncError, Unavailable
from api.domain.item_types import apply_changes, check_size
from api.domain.membership import (
    Caller,
    Roster,
    at_least,
    group_changes,
    groups_refusal,
    held_groups,
    member_groups,
    member_role,
    member_write_refusal,
    regroups,
)
from api.domain.mutations import OUTCOME_RETENTION_S, Mutation, State, StoredOutcome, Write
from api.domain.records import (
    Conflict,
    CurrentVersionError,
    Record,
    not_found,
    version_at,
    write_refusal,
)
from api.domain.retention import Retention
from api.domain.tokens import new_entity_id
from api.domain.visibility import (
    Entries,
    Visibility,
    create_refusal,
    delete_refusal,
    entries_of,
    sees,
    visibility_refusal,
)
from api.service.ports import PushResult, PushStatus, Written
from api.service.replaying import absent, replay_for

# A state-based write that loses a race compares again with the winner this often.
PUT_ATTEMPTS = 3
# A transaction of several writes puts and removes at most this many stream entries
# so that the next one checks them beside its writes; one write alone may take 63
# (docs/ordering.md, "Who sees what": a next one reads them first when they do not fit).
STREAM_ITEMS_CAP = 40


@dataclass(frozen=True)
class Entry:
    """A validated mutation of a push, by its position, and the races it lost."""

    position: int
    mutation: Mutation
    losses: int = 0
    by: str | None = None  # the caller's sub, recorded on what it writes
    role: str | None = None  # the caller's role in the tenant (None: not known)

    @property
    def client_mutation_id(self) -> str | None:
        return self.mutation.client_mutation_id

    def claims(self) -> set[tuple[str, str]]:
        """What one transaction may write only once: the entity, the outcome's id."""
        claims = set()
        if self.mutation.entity_id is not None:
            claims.add(("entity", self.mutation.entity_id))
        if self.client_mutation_id is not None:
            claims.add(("clientMutationID", self.client_mutation_id))
        return claims


@dataclass
class Known:
    """What a push knows of the server: entities and stored outcomes, as read at its
    start and as its own writes and refusals left them."""

    records: dict[str, Record]
    outcomes: dict[str, StoredOutcome]
    # The tenant is one of membership as data (contract 6), as the request found it
    # or as a Member write of this push made it.
    moved: bool = False
    # The tenant's members, read when a Member write changes groups (their bounds).
    roster: Callable[[], Roster] = Roster


@dataclass(frozen=True)
class Plan:
    """A mutation's write, waiting for its token."""

    entry: Entry
    entity_id: str
    expected: str | None  # the token it replaces; None: a create
    current: Record | None  # the version it replaces (for createdAt and history)
    state: State
    history: bool = False  # keep the version it replaces
    # A Member write to a claim tenant: the move (its transaction puts the marker).
    moving: bool = False
    # Who sees the version it writes (None: the whole tenant) and its owner.
    visibility: Visibility | None = None
    owner: str | None = None
    # A Member write: its access item's groups joined or left before (group, token).
    prior: tuple[tuple[str, str], ...] = ()

    @cached_property
    def entries(self) -> Entries:
        """The main log and stream entries it puts and removes (contract 3.12)."""
        before = None if self.current is None else self.current.visibility
        moved = self.member is not None and regroups(self.current, self.state)
        return replace(entries_of(before, self.current is not None, self.visibility), marker=moved)

    def _group_changes(
        self, record: Record, token: str, retention: Retention
    ) -> tuple[tuple[str, str], ...]:
        before = self.current.fields if self.current else None
        return group_changes(self.prior, before, record.fields, token, retention)

    @property
    def kept(self) -> Record | None:
        """The version this write keeps in the entity's history (None: none)."""
        return self.current if self.history and self.expected is not None else None

    @property
    def items(self) -> int:
        """The transaction items it takes: entity and log entry, the old entry's
        delete, the kept version, the outcome, the copies, a member's access item."""
        later, later_removed = self.later
        entries = self.entries
        return (
            1
            + (entries.main is not None)
            + (self.expected is not None and entries.main_removed)
            + entries.stream_items
            + (self.member is not None)
            + (self.kept is not None)
            + (self.outcome is not None)
            + (later is not None)
            + (later_removed is not None)
        )

    @cached_property
    def later(self) -> tuple[int | None, int | None]:
        """Its copy (docs/evolution.md): the release to put the new version under
        (None: a deletion, which has none), and the release of the entity's copy to
        remove, as its previous version recorded it (None: none, or the same key)."""
        old = self.current
        was = None if old is None or old.deleted else old.copy_release
        item_type = self.entry.mutation.item_type
        new = None if self.state.deleted else item_type.copy_release(self.state.fields, was)
        return new, (was if was is not None and was != new else None)

    @property
    def member(self) -> tuple[str, str | None] | None:
        """A Member record's access item as this write leaves it: (sub, role; None:
        removed); None for a record of another type."""
        if self.entry.mutation.item_type.code != MEMBER.code:
            return None
        return self.entity_id, None if self.state.deleted else member_role(self.state.fields)

    @cached_property
    def outcome(self) -> StoredOutcome | None:
        """The mutation's first outcome, pending its record (None: no clientMutationID).
        Made once: a fingerprint is a JSON dump and a hash, and a plan is sized and
        written on every attempt of its transaction."""
        mutation = self.entry.mutation
        if mutation.client_mutation_id is None:
            return None
        return StoredOutcome(
            mutation.client_mutation_id, mutation.fingerprint(), expires_at=expiry()
        )

    def write(self, token: str, retention: Retention) -> Write:
        mutation = self.entry.mutation
        record = version_at(
            mutation.item_type,
            mutation.tenant_id,
            self.entity_id,
            token,
            self.current,
            dict(self.state.fields),
            deleted=self.state.deleted,
        )
        later, later_removed = self.later
        record = replace(
            record,
            written_by=self.entry.by,
            copy_release=later,
            owner=self.owner,
            visibility=self.visibility,
        )
        outcome, kept, entries = self.outcome, self.kept, self.entries
        left = entries.main == "left" or "left" in entries.streams.values() or entries.expiring
        return Write(
            record,
            self.expected,
            None if outcome is None else replace(outcome, record=record),
            kept=kept,
            expires_at=retention.expires_at(token) if kept or record.deleted or left else None,
            later=later,
            later_removed=later_removed,
            member=self.member,
            group_changes=self._group_changes(record, token, retention) if self.member else (),
            entries=entries,
        )


def decide(entry: Entry, known: Known, history: bool = False) -> Plan | Written | SyncError:
    """What one mutation does, given what the push knows of the server: a write
    to commit (keeping the version it replaces with `history`), or an answer without
    writing (a replay, a refusal, a no-op). A type with a write role of its own
    (Member: owner) refuses a caller below it, and a Member write follows
    `member_write_refusal` (contract 6)."""
    mutation = entry.mutation
    needed = mutation.item_type.write_role
    replaying = mutation.client_mutation_id in known.outcomes
    if needed is not None and not replaying and not at_least(entry.role or "reader", needed):
        return RoleForbidden(
            f"only an {needed} may write {mutation.item_type.name} records; "
            f"your role is {entry.role or 'not known'}"
        )
    decision = _decide(entry, known)
    if not isinstance(decision, Plan):
        return decision
    if decision.member is not None:
        sub, role = decision.member
        caller = None if entry.by is None or entry.role is None else Caller(entry.by, entry.role)
        refusal = member_write_refusal(caller, known.moved, sub, role, decision.current is not None)
        if refusal is None:
            # Any Member write, one giving no role too (REMOVED, a deletion): its groups
            # are checked, and its access item carries the earlier joins and leaves.
            roster = known.roster()
            held = held_groups(decision.current.fields if decision.current else {})
            refusal = groups_refusal(roster, sub, held, member_groups(decision.state.fields))
            decision = replace(decision, prior=tuple(roster.changed.get(sub, {}).items()))
        if refusal is not None:
            return refusal
        decision = replace(decision, moving=not known.moved)
    return replace(decision, history=True) if history else decision


def _decide(entry: Entry, known: Known) -> Plan | Written | SyncError:
    mutation = entry.mutation
    cmid = mutation.client_mutation_id
    if cmid is not None and cmid in known.outcomes:
        return replay_for(mutation, entry.by, known.outcomes[cmid], known.records)
    if entry.losses >= PUT_ATTEMPTS:
        return Unavailable(f"{mutation.item_type.name} {mutation.entity_id} keeps changing; retry")
    item_type, changes = mutation.item_type, mutation.changes
    entity_id = mutation.entity_id or new_entity_id()
    current = known.records.get(entity_id)
    if current is not None and not sees(current.visibility, entry.by):
        return absent(mutation, entity_id)
    if mutation.verb == "put":
        return _with_visibility(entry, _decide_put(entry, current))
    expected = mutation.expected_token
    refusal = write_refusal(item_type, entity_id, expected, current)
    if refusal is not None:
        return refusal
    if mutation.verb == "delete":
        assert current is not None
        refusal = delete_refusal(current.visibility, entry.by, entry.role)
        if refusal is not None:
            return refusal
        plan = Plan(entry, entity_id, expected, current, State(deleted=True))
        return _with_visibility(entry, plan)
    if mutation.verb == "share":
        assert current is not None
        refusal = visibility_refusal(current.owner, entry.by, entry.role, True)
        if refusal is not None:
            return refusal
        plan = Plan(entry, entity_id, expected, current, State(current.fields))
        return _with_visibility(entry, plan)
    fields = apply_changes({} if current is None else current.fields, changes)
    check_size(fields)
    return _with_visibility(entry, Plan(entry, entity_id, expected, current, State(fields)))


def _with_visibility(
    entry: Entry, decision: Plan | Written | SyncError
) -> Plan | Written | SyncError:
    """The plan with who sees the version it writes and its owner: a creation's as
    asked (tenant-wide by default; owned by its creator unless stated, and only a
    tenant OWNER gives it to another), a share's as asked (its owner kept unless
    stated), else the current version's (contract 3.12)."""
    if not isinstance(decision, Plan):
        return decision
    mutation, current = entry.mutation, decision.current
    asked = mutation.visibility if mutation.sets_visibility or mutation.verb == "share" else None
    if asked is not None and decision.member is not None:
        return BadUserInput("a Member record is seen by the whole tenant: it takes no visibility")
    if asked is not None and not asked.owner:
        owner = entry.by if current is None else (current.owner or entry.by)
        if owner is None:
            return BadUserInput("visibility.owner is required without a caller")
        asked = replace(asked, owner=owner)
    if current is None:
        refusal = create_refusal(asked, entry.by, entry.role)
        if refusal is not None:
            return refusal
        owner = entry.by if asked is None else asked.owner
        return replace(decision, visibility=asked, owner=owner)
    if mutation.verb == "share":
        owner = current.owner if asked is None else asked.owner
        if owner != current.owner and not (entry.role == "owner" or entry.by == current.owner):
            return RoleForbidden("only a record's owner, or a tenant OWNER, may give it away")
        return replace(decision, visibility=asked, owner=owner)
    return replace(decision, visibility=current.visibility, owner=current.owner)


def _decide_put(entry: Entry, current: Record | None) -> Plan | Written | SyncError:
    """A state-based write: applies when the server holds the assumed state (or,
    with merge_fields, a state that changed only other fields: rebased onto it),
    as one token-guarded write like any other; else CONFLICT with what it holds
    (NOT_FOUND when it holds nothing). A write that loses a race to another is
    compared again with what won, PUT_ATTEMPTS times at most."""
    mutation = entry.mutation
    item_type, entity_id, assumed = mutation.item_type, mutation.entity_id, mutation.assumed
    state = mutation.state
    assert entity_id is not None and state is not None  # validated()
    if assumed is None and current is not None:
        return Conflict(f"{item_type.name} {entity_id} already exists", current)
    target = state
    if assumed is not None and not assumed.holds(item_type, current):
        if current is None or current.item_type is not item_type:
            return not_found(item_type, entity_id, current)
        rebased = state.rebased(assumed, current) if mutation.merge_fields else None
        if rebased is None:
            return Conflict(f"{item_type.name} {entity_id} is not in the assumed state", current)
        try:
            # Each side fits; together they may not. Written, the entity would refuse
            # every later write: the merge is a conflict for the client to resolve.
            check_size(rebased.fields)
        except BadUserInput as exc:
            return Conflict(
                f"{item_type.name} {entity_id} merged with the server's changes is too "
                f"large ({exc}); resolve it from the current version",
                current,
            )
        target = rebased
    if current is not None and current.deleted:
        if state.deleted:
            return Written(current)  # deleted already: nothing to write
        return Conflict(
            f"{item_type.name} {entity_id} was deleted; a deleted id stays deleted", current
        )
    expected = None if current is None else current.change_token
    return Plan(entry, entity_id, expected, current, target)


def outside_view(entry: Entry, refusal: CurrentVersionError) -> SyncError:
    """A refusal whose current version the caller does not see (it left the caller's
    view while the write was on its way): NOT_FOUND, never that version."""
    current = refusal.current
    if sees(current.visibility, entry.by):
        return refusal
    return not_found(entry.mutation.item_type, current.id, None)


def expiry() -> int:
    return int(time.time()) + OUTCOME_RETENTION_S


def answer(mutation: Mutation, error: SyncError) -> PushResult:
    """The result of a mutation refused with `error`."""
    if isinstance(error, CurrentVersionError):
        return PushResult(
            mutation,
            PushStatus.CONFLICT,
            record=error.current,
            error=error,
            replayed=error.replayed,
        )
    return PushResult(mutation, PushStatus.REJECTED, error=error, replayed=error.replayed)


def internal_error() -> InternalError:
    # A bug must cost one entry, never the push: an outbox holding a poisoned
    # entry would otherwise be stuck behind it on every resend.
    return InternalError(
        "internal server error in this entry; resend it (with its clientMutationID a "
        "resend never applies it twice)"
    )
