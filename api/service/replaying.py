"""A stored outcome answered again (a resend with its clientMutationID), only to a
caller who sees what it tells; a write to a record outside the caller's view
answered as if the record did not exist (contract 3.12)."""

from __future__ import annotations

from api.domain.errors import BadUserInput, NotFound, SyncError
from api.domain.mutations import Mutation, StoredOutcome
from api.domain.records import Record, not_found
from api.domain.visibility import sees
from api.service.ports import Written


def absent(mutation: Mutation, entity_id: str) -> SyncError:
    """A write to a record outside the caller's view: as if it did not exist, and
    nothing of it told (a create of a taken id: NOT_FOUND without a current version)."""
    if mutation.verb == "create" or (mutation.verb == "put" and mutation.assumed is None):
        return NotFound(f"{mutation.item_type.name} {entity_id} cannot be created: the id is taken")
    return not_found(mutation.item_type, entity_id, None)


def replay_for(
    mutation: Mutation, by: str | None, stored: StoredOutcome, records: dict[str, Record]
) -> Written:
    """A stored outcome answered again to the caller `by` who resends it, only when the
    caller sees its versions and, in `records` (as read now), the record it names;
    else NOT_FOUND (raised), as the write would be answered now: outcomes are kept
    per tenant, and the record may have left the caller's view since."""
    ids = {mutation.entity_id, *(version.id for version in stored.versions)}
    now = [records[id] for id in ids if id in records]
    hidden = next((r for r in [*stored.versions, *now] if not sees(r.visibility, by)), None)
    if hidden is not None:
        raise absent(mutation, mutation.entity_id or hidden.id)
    return replay(stored, mutation.fingerprint())


def replay(stored: StoredOutcome, fingerprint: str) -> Written:
    """A stored outcome answered again; BadUserInput when its id named another mutation."""
    if stored.fingerprint != fingerprint:
        raise BadUserInput(
            f"clientMutationID {stored.client_mutation_id} was already used for another mutation"
        )
    if stored.error is not None:
        stored.error.replayed = True
        raise stored.error
    assert stored.record is not None
    return Written(stored.record, replayed=True)
