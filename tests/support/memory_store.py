"""An in-memory `Store` for unit tests of the service's rules (no DynamoDB, no I/O).

It keeps the store's contract as `api.storage.store.DynamoStore` does: each
commit is one atomic step guarded by its entities' tokens, the tenant's head and
the outcomes' absence, refused with the same domain errors in the same order;
the log keeps one entry per entity (its latest) with the `prev` link of its write.
It is what the service sees of DynamoDB when every transaction is atomic; what
real DynamoDB adds (torn commits, conflicts, throttling) is tested in
`tests/integration` against DynamoDB Local and the torn engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from api.domain.chain import NO_STREAMS, Head, StaleHead, Streams, prove_tail
from api.domain.deletion import DeletionEnd, DeletionMark
from api.domain.errors import (
    NotAMember,
    OutcomeRecorded,
    RoleForbidden,
    SyncError,
    WritesRefused,
)
from api.domain.membership import OWNER, Access, MemberGuard, Roster
from api.domain.mutations import StoredOutcome, Write
from api.domain.records import LogTail, Record, write_refusal


@dataclass
class _Tenant:
    entities: dict[str, Record] = field(default_factory=dict)
    log: dict[str, tuple[Record, str | None]] = field(default_factory=dict)  # token -> (, prev)
    head: Head | None = None
    head_prev: str | None = None
    outcomes: dict[str, StoredOutcome] = field(default_factory=dict)
    versions: dict[tuple[str, str], Record] = field(default_factory=dict)  # (id, token)
    version_exp: dict[tuple[str, str], int | None] = field(default_factory=dict)
    members: dict[str, str] | None = None  # sub -> role; None: a claim tenant


class MemoryStore:
    def __init__(self) -> None:
        self._tenants: dict[str, _Tenant] = {}
        self._lock = threading.Lock()
        self.writes = 0  # committed writes, for tests that check nothing was written

    def _tenant(self, tenant_id: str) -> _Tenant:
        return self._tenants.setdefault(tenant_id, _Tenant())

    def head(self, tenant_id: str) -> Head | None:
        return self._tenant(tenant_id).head

    def log_tail(self, tenant_id: str, after: str | None, count: int) -> LogTail:
        tenant = self._tenant(tenant_id)
        with self._lock:
            head = None if tenant.head is None else tenant.head.token
            newer = sorted(t for t in tenant.log if after is None or t > after)
            # As DynamoStore: a second read when the head's transaction is cut off.
            wanted = max(count, tenant.head.entries if tenant.head else 0)
            entries = {t: tenant.log[t][1] for t in newer[-wanted:]}
            proof = prove_tail(head, tenant.head_prev, entries, after)
            records = [tenant.log[t][0] for t in proof.linked]
        return LogTail(
            head=head,
            bound=proof.bound,
            records=records,
            complete=proof.complete,
            settled=tenant.head_prev,
        )

    def get(self, tenant_id: str, entity_id: str) -> Record | None:
        return self._tenant(tenant_id).entities.get(entity_id)

    def read_many(
        self, tenant_id: str, entity_ids: Iterable[str], client_mutation_ids: Iterable[str]
    ) -> tuple[dict[str, Record], dict[str, StoredOutcome]]:
        records = {i: r for i in entity_ids if (r := self.get(tenant_id, i)) is not None}
        outcomes = {
            c: o for c in client_mutation_ids if (o := self.get_outcome(tenant_id, c)) is not None
        }
        return records, outcomes

    def changes(
        self, tenant_id: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]:
        tenant = self._tenant(tenant_id)
        with self._lock:
            tokens = sorted(t for t in tenant.log if (after is None or t > after) and t <= upper)
            records = [tenant.log[t][0] for t in tokens[: limit + 1]]
        return records[:limit], len(records) > limit

    def version(
        self, tenant_id: str, entity_id: str, token: str, gone_before: int | None = None
    ) -> Record | None:
        tenant = self._tenant(tenant_id)
        if self._past(tenant, (entity_id, token), gone_before):
            return None
        return tenant.versions.get((entity_id, token))

    def versions(
        self,
        tenant_id: str,
        entity_id: str,
        before: str | None,
        limit: int,
        gone_before: int | None = None,
    ) -> tuple[list[Record], bool]:
        tenant = self._tenant(tenant_id)
        kept = tenant.versions
        tokens = sorted(
            (
                t
                for i, t in kept
                if i == entity_id
                and (before is None or t < before)
                and not self._past(tenant, (i, t), gone_before)
            ),
            reverse=True,
        )
        return [kept[(entity_id, t)] for t in tokens[:limit]], len(tokens) > limit

    @staticmethod
    def _past(tenant: _Tenant, key: tuple[str, str], gone_before: int | None) -> bool:
        expires = tenant.version_exp.get(key)
        return gone_before is not None and expires is not None and expires < gone_before

    def mark_deleting(self, tenant_id: str, by: str, at_ms: int) -> DeletionMark | None:
        raise NotImplementedError("tenant deletion is tested against DynamoDB Local")

    def check_mark(self, tenant_id: str, mark: DeletionMark) -> None:
        raise NotImplementedError("tenant deletion is tested against DynamoDB Local")

    def remove_items(self, tenant_id: str, mark: DeletionMark, limit: int) -> int:
        raise NotImplementedError("tenant deletion is tested against DynamoDB Local")

    def finish_deletion(
        self, tenant_id: str, mark: DeletionMark, quota_bytes: int, now_s: int
    ) -> DeletionEnd | None:
        raise NotImplementedError("tenant deletion is tested against DynamoDB Local")

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

    def later_copies(
        self,
        tenant_id: str,
        floors: Sequence[tuple[str, int]],
        after: tuple[str, int, str] | None,
        limit: int,
    ) -> tuple[list[Record], tuple[str, int, str] | None]:
        """The copies of the tenant's entities (api.storage.keys), of each type of
        `floors` from its release up, in key order, from the entities themselves."""
        wanted = dict(floors)
        copies = sorted(
            ((r.item_type.code, r.copy_release, r.id), r)
            for r in self._tenant(tenant_id).entities.values()
            if not r.deleted
            and r.copy_release is not None
            and r.copy_release >= wanted.get(r.item_type.code, 10_000)
        )
        copies = [(at, r) for at, r in copies if after is None or at > after]
        page = copies[:limit]
        return [r for _, r in page], page[-1][0] if len(copies) >= limit else None

    def stream_entries_applied(
        self, tenant_id: str, present: Collection[str], gone: Collection[str]
    ) -> bool:
        return True  # every transaction here is atomic

    def stream_range(
        self, tenant_id: str, principal: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]:
        return [], False  # who sees what is tested on DynamoDB Local

    def access(self, tenant_id: str, sub: str) -> Access:
        members = self._tenant(tenant_id).members
        return Access() if members is None else Access(True, members.get(sub))

    def roster(self, tenant_id: str) -> Roster:
        members = self._tenant(tenant_id).members
        return Roster() if members is None else Roster(True, dict(members))

    def commit(
        self,
        tenant_id: str,
        writes: Sequence[Write],
        head: str | None,
        check: Collection[str],
        gone: Collection[str] = (),
        later_check: Collection[str] = (),
        later_gone: Collection[str] = (),
        copies: bool = False,
        guard: MemberGuard | None = None,
        streams: Streams = NO_STREAMS,
    ) -> None:
        """One transaction: refused as DynamoStore refuses it (writes, then head)."""
        tenant = self._tenant(tenant_id)
        with self._lock:
            refusals: dict[int, SyncError | OutcomeRecorded] = {}
            for index, write in enumerate(writes):
                record = write.record
                if (
                    write.outcome is not None
                    and write.outcome.client_mutation_id in tenant.outcomes
                ):
                    refusals[index] = OutcomeRecorded()
                    continue
                current = tenant.entities.get(record.id)
                refusal = write_refusal(record.item_type, record.id, write.expected_token, current)
                if refusal is not None:
                    refusals[index] = refusal
            if guard is not None:
                members = tenant.members
                failed: SyncError | None = None
                if guard.moving and members is not None:
                    failed = NotAMember("this tenant moved to membership as data meanwhile")
                elif not guard.moving and (members or {}).get(guard.writer) != OWNER:
                    failed = RoleForbidden("you are no longer an owner of this tenant")
                for index, write in enumerate(writes):
                    if failed is not None and write.member is not None:
                        refusals.setdefault(index, failed)
            if refusals:
                raise WritesRefused(refusals)
            if (None if tenant.head is None else tenant.head.token) != head:
                raise StaleHead(tenant.head)
            # Every transaction here is atomic: the log entries at `check` are applied.
            prev = head
            for write in writes:
                record = write.record
                if write.expected_token is not None:
                    del tenant.log[write.expected_token]
                tenant.entities[record.id] = record
                tenant.log[record.change_token] = (record, prev)
                prev = record.change_token
                if write.outcome is not None:
                    tenant.outcomes[write.outcome.client_mutation_id] = write.outcome
                if write.member is not None:
                    tenant.members = tenant.members or {}
                    sub, role = write.member
                    if role is None:
                        tenant.members.pop(sub, None)
                    else:
                        tenant.members[sub] = role
                if write.kept is not None:
                    tenant.versions[(record.id, write.kept.change_token)] = write.kept
                    tenant.version_exp[(record.id, write.kept.change_token)] = write.expires_at
                self.writes += 1
            born = writes[0].record.change_token if tenant.head is None else tenant.head.born
            marked = tenant.head is None or copies
            tenant.head = Head(
                writes[-1].record.change_token, len(writes), born=born, copies=marked
            )
            tenant.head_prev = head
