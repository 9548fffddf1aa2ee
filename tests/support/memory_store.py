"""An in-memory `Store` for unit tests of the service's rules (no DynamoDB, no I/O).

It keeps the store's contract as `api.storage.store.DynamoStore` does: each write
is one atomic step guarded by the entity's token, the tenant's head and the
outcome's absence, refused with the same domain errors in the same order; the
log keeps one entry per entity (its latest) with the `prev` link of its write.
It is what the service sees of DynamoDB when every transaction is atomic; what
real DynamoDB adds (torn commits, conflicts, throttling) is tested in
`tests/integration` against DynamoDB Local and the torn engine.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from api.domain.chain import prove_tail
from api.domain.errors import OutcomeRecorded, StaleHead
from api.domain.mutations import StoredOutcome
from api.domain.records import LogTail, Record, write_refusal


@dataclass
class _Tenant:
    entities: dict[str, Record] = field(default_factory=dict)
    log: dict[str, tuple[Record, str | None]] = field(default_factory=dict)  # token -> (, prev)
    head: str | None = None
    outcomes: dict[str, StoredOutcome] = field(default_factory=dict)


class MemoryStore:
    def __init__(self) -> None:
        self._tenants: dict[str, _Tenant] = {}
        self._lock = threading.Lock()
        self.writes = 0  # committed writes, for tests that check nothing was written

    def _tenant(self, tenant_id: str) -> _Tenant:
        return self._tenants.setdefault(tenant_id, _Tenant())

    def head(self, tenant_id: str) -> str | None:
        return self._tenant(tenant_id).head

    def log_tail(self, tenant_id: str, after: str | None, count: int) -> LogTail:
        tenant = self._tenant(tenant_id)
        with self._lock:
            newest = sorted(t for t in tenant.log if after is None or t > after)[-count:]
            entries = {t: tenant.log[t][1] for t in newest}
            proof = prove_tail(tenant.head, _head_prev(tenant), entries, after)
            records = [tenant.log[t][0] for t in proof.linked]
        return LogTail(
            head=tenant.head, bound=proof.bound, records=records, complete=proof.complete
        )

    def get(self, tenant_id: str, entity_id: str) -> Record | None:
        return self._tenant(tenant_id).entities.get(entity_id)

    def changes(
        self, tenant_id: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]:
        tenant = self._tenant(tenant_id)
        with self._lock:
            tokens = sorted(t for t in tenant.log if (after is None or t > after) and t <= upper)
            records = [tenant.log[t][0] for t in tokens[: limit + 1]]
        return records[:limit], len(records) > limit

    def create(
        self, record: Record, head: str | None, outcome: StoredOutcome | None = None
    ) -> None:
        self._write(record, None, head, outcome)

    def replace(
        self,
        record: Record,
        expected_token: str,
        head: str | None,
        outcome: StoredOutcome | None = None,
    ) -> None:
        self._write(record, expected_token, head, outcome)

    def get_outcome(self, tenant_id: str, client_mutation_id: str) -> StoredOutcome | None:
        outcome = self._tenant(tenant_id).outcomes.get(client_mutation_id)
        if outcome is None or outcome.expires_at < time.time():
            return None
        return outcome

    def put_outcome(self, tenant_id: str, outcome: StoredOutcome) -> None:
        with self._lock:
            outcomes = self._tenant(tenant_id).outcomes
            if outcome.client_mutation_id in outcomes:
                raise OutcomeRecorded()
            outcomes[outcome.client_mutation_id] = outcome

    def _write(
        self,
        record: Record,
        expected_token: str | None,
        head: str | None,
        outcome: StoredOutcome | None,
    ) -> None:
        """One transaction: refused as DynamoStore refuses it (outcome, entity, head)."""
        tenant = self._tenant(record.tenant_id)
        with self._lock:
            if outcome is not None and outcome.client_mutation_id in tenant.outcomes:
                raise OutcomeRecorded()
            current = tenant.entities.get(record.id)
            refusal = write_refusal(record.item_type, record.id, expected_token, current)
            if refusal is not None:
                raise refusal
            if tenant.head != head:
                raise StaleHead(tenant.head)
            if expected_token is not None:
                del tenant.log[expected_token]
            tenant.entities[record.id] = record
            tenant.log[record.change_token] = (record, head)
            tenant.head = record.change_token
            if outcome is not None:
                tenant.outcomes[outcome.client_mutation_id] = outcome
            self.writes += 1


def _head_prev(tenant: _Tenant) -> str | None:
    if tenant.head is None:
        return None
    return tenant.log[tenant.head][1]
