"""Getting a write's token accepted: proposals, lost races, retries.

A transaction commits only as the next link of its tenant's chain: the store
checks that the head still holds the token the transaction expects, and that
the log entries of the head's transaction exist (see `api.storage.keys` and
docs/ordering.md). This module knows each tenant's head (from its own writes
and its lost races, or by reading it once), proposes tokens past it, and retries
transactions that lose a race. Clocks only propose; the store decides.

A head this process wrote itself needs no check: DynamoDB answered that
transaction with success, and a strongly consistent read reflects every write
that succeeded before it (developer guide, "Read consistency"), so its entries
are applied before any later transaction of this process is sent.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_random_exponential,
)

from api.domain.chain import NO_MAIN, NO_STREAMS, Head, StaleHead, Streams
from api.domain.errors import TransactionConflict, Unavailable, WriteContention
from api.domain.mutations import Write
from api.domain.retention import Retention
from api.domain.tokens import next_token, token_ms

# A write keeps retrying lost races for this long, then the client is told to
# retry later. Seconds, not attempts: a transaction DynamoDB is still committing
# blocks the tenant's next write until its recovery finishes it, which has no
# documented bound; the torn engine's stalls last up to 2 s.
WRITE_BUDGET_S = 8.0
# A writer waits at most this long for its process's turn on a tenant, then
# races anyway: the store orders writes, the turn only saves wasted transactions.
TURN_WAIT_S = 0.2
# A write that lost a race proposes its next token up to RETRY_LEAD_MS ahead of
# the head it lost to, doubling with each loss (capped).
RETRY_LEAD_MS = 10
MAX_RETRY_LEAD_MS = 1000
# A server whose clock is more than this behind a tenant's head corrects it by the
# gap, for that tenant only: one tenant's head in the future (a fast server's write,
# imported tokens) must not move the times of every tenant this process writes.
SKEW_THRESHOLD_MS = 1000
MAX_SKEW_MS = 10 * 60 * 1000
# Tenants whose head and clock correction a process remembers (a hint each: a
# forgotten head is read again, a forgotten correction learnt again).
REMEMBERED_TENANTS = 10_000
_T = TypeVar("_T")
# A transaction conflict means another write of the tenant is still committing:
# wait (5 ms doubling, jittered, at most 200 ms) rather than hammer its items.
_conflict_wait = wait_random_exponential(multiplier=0.005, max=0.2)
_stale_head_wait = wait_random_exponential(multiplier=0.002, max=0.05)


@dataclass(frozen=True)
class Link:
    """Where a transaction joins its tenant's chain: the head's token it expects
    (None: the tenant's first transaction), and the log entries of the head's
    transaction it must check (those this process has not seen applied)."""

    head: str | None
    check: tuple[str, ...] = ()
    # The entries the head's transaction replaced: checked gone.
    gone: tuple[str, ...] = ()
    # The later copies the head's transaction put (checked present) and removed
    # (checked gone), by sort key.
    later_check: tuple[str, ...] = ()
    later_gone: tuple[str, ...] = ()
    # The head says every live entity has its copy (docs/evolution.md): the
    # transaction carries the mark on.
    copies: bool = False
    # Who sees what: the tenant's flag, the head's last main token, and the stream
    # entries of the head's transaction to check (docs/ordering.md, "Who sees what").
    streams: Streams = NO_STREAMS

    @classmethod
    def after(cls, head: Head, checked: bool = True) -> Link:
        """The link after `head`, checking its transaction's entries and copies
        (`checked`: this process has not seen it applied)."""
        if not checked:
            return cls(
                head.token, copies=head.copies, streams=Streams(head.restricted, head.last_main)
            )
        return cls(
            head.token,
            tuple(head.main_entry_tokens()),
            head.removed,
            head.later_put,
            head.later_removed,
            copies=head.copies,
            streams=Streams(head.restricted, head.last_main, head.stream_put, head.stream_removed),
        )

    def head_written(self, writes: list[Write], copies: bool) -> Head:
        """The head a committed transaction of `writes` after this link wrote, as the
        next transaction of the process that wrote it needs it (no checks)."""
        last = writes[-1].record.change_token
        main = self.streams.main or self.head
        restricted = self.streams.restricted
        for write in writes:
            restricted |= bool(write.entries.streams) or write.record.visibility is not None
            if write.entries.main is not None:
                main = write.record.change_token
        last_main = None if main == last or not restricted else (main or NO_MAIN)
        return Head(last, len(writes), copies=copies, restricted=restricted, last_main=last_main)

    @property
    def checked_items(self) -> int:
        """The transaction's items its checks may take: the chain's (log entries and
        later copies), or for the tenant's first transaction the fence's
        (`api.storage.transactions`)."""
        chain = len(self.check) + len(self.gone) + len(self.later_check) + len(self.later_gone)
        chain += self.streams.items
        return chain + (1 if self.head is None else 0)


@dataclass(frozen=True)
class _KnownHead:
    head: Head | None
    wrote_it: bool  # this process's own transaction, answered with success
    # With no head: the tenant id's fence (the highest token of a deleted life of it),
    # when a transaction was refused by it; the first token must exceed it.
    fence: str | None = None

    def link(self, outlived: Callable[[str], bool]) -> Link:
        """The link after this head. A head older than the retention period is not
        checked: its deletions' entries may be gone by TTL (`api.domain.retention`),
        and a transaction is applied long before (docs/ordering.md, "Retention")."""
        if self.head is None:
            return Link(None)
        return Link.after(self.head, checked=not (self.wrote_it or outlived(self.head.token)))


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _contention_wait(state: RetryCallState) -> float:
    # A stale head is retried at once with the head it lost to (the loser now
    # knows it exactly), with a little jitter once it keeps losing, so that busy
    # writers stop colliding.
    outcome = state.outcome
    if outcome is not None and isinstance(outcome.exception(), TransactionConflict):
        return float(_conflict_wait(state))
    return float(_stale_head_wait(state)) if state.attempt_number > 2 else 0.0


class _TenantTurns:
    """One lock per tenant, forgotten when no writer holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def take(self, tenant_id: str, timeout: float) -> Iterator[None]:
        """The tenant's turn, or after `timeout` seconds none (the caller goes anyway)."""
        with self._guard:
            lock, users = self._locks.get(tenant_id, (threading.Lock(), 0))
            self._locks[tenant_id] = (lock, users + 1)
        acquired = lock.acquire(timeout=timeout)
        try:
            yield
        finally:
            if acquired:
                lock.release()
            with self._guard:
                lock, users = self._locks[tenant_id]
                if users == 1:
                    del self._locks[tenant_id]
                else:
                    self._locks[tenant_id] = (lock, users - 1)


class TokenOrdering:
    def __init__(
        self,
        read_head: Callable[[str], Head | None],
        clock_ms: Callable[[], int] = wall_clock_ms,
        retention: Retention | None = None,
    ) -> None:
        self._read_head = read_head
        self._clock_ms = clock_ms
        self._retention = retention or Retention()
        # The head last seen per tenant (None: the tenant has none). A hint: when it
        # is stale the store refuses the write and says what the head is.
        self._heads: dict[str, _KnownHead] = {}
        # Per tenant: how far this process's clock is behind that tenant's head.
        self._skews_ms: dict[str, int] = {}
        # Writers of one tenant in this process take turns: a write bound to lose
        # a race still costs a transaction.
        self._turns = _TenantTurns()

    def write(
        self,
        tenant_id: str,
        floor: str | None,
        attempt: Callable[[str, Link], _T],
        head_of: Callable[[_T], Head],
    ) -> _T:
        """Run `attempt(first_token, link)` until the store accepts a transaction
        whose tokens start at `first_token` as the link after `link.head`, retrying
        lost races for up to WRITE_BUDGET_S; `head_of` names the head it wrote.

        `floor` is a token known to exist (the greatest an update is based on): the
        new tokens must exceed it.
        """
        retrying = Retrying(
            retry=retry_if_exception_type(WriteContention),
            stop=stop_after_delay(WRITE_BUDGET_S),
            wait=_contention_wait,
            before_sleep=lambda state: self._learn_from_loss(tenant_id, state),
            reraise=True,
        )
        try:
            for try_ in retrying:
                with try_, self._turns.take(tenant_id, TURN_WAIT_S):
                    known = self._known(tenant_id)
                    link = known.link(self._outlived)
                    number = try_.retry_state.attempt_number
                    above = max(filter(None, (floor, known.fence)), default=None)
                    token = self._propose(tenant_id, link.head, above, number)
                    result = attempt(token, link)
        except WriteContention as exc:
            raise Unavailable("too many concurrent writes to this tenant; retry") from exc
        self._remember(tenant_id, _KnownHead(head_of(result), wrote_it=True))
        return result

    def _outlived(self, token: str) -> bool:
        return self._retention.outlived(token, self._clock_ms())

    def _known(self, tenant_id: str) -> _KnownHead:
        known = self._heads.get(tenant_id)
        if known is None:
            # A cold process reads the head once (1 read unit) rather than lose a
            # transaction to learn it (a cancelled transaction is paid for too).
            known = _KnownHead(self._read_head(tenant_id), wrote_it=False)
            self._remember(tenant_id, known)
        return known

    def _propose(
        self, tenant_id: str, head: str | None, floor: str | None, attempt_number: int
    ) -> str:
        """A token past the head and past `floor`.

        Bumping past the floor matters: another server may have bumped past the
        same stale head to exactly that entity's current token, and a write reusing
        it would name one log entry twice in its transaction. A write that lost a
        race aims further ahead with each loss, past the writers proposing from
        their clocks meanwhile; otherwise a server whose clock is behind, which can
        only propose "last head + 1", would lose every race to them.
        """
        after = max(filter(None, (head, floor)), default=None)
        now = self._clock_ms() + self._skews_ms.get(tenant_id, 0)
        if after is not None and attempt_number > 1:
            reach = min(RETRY_LEAD_MS * 2 ** (attempt_number - 2), MAX_RETRY_LEAD_MS)
            now = max(now, token_ms(after)) + random.randint(1, reach)
        return next_token(now, after)

    def _learn_from_loss(self, tenant_id: str, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if not isinstance(exc, StaleHead):
            return
        if exc.head is not None:
            # A clock far behind the tenant's head is wrong; follow the head's time.
            # Small gaps are left alone: they are in-flight writes, not a bad clock.
            skew_ms = self._skews_ms.get(tenant_id, 0)
            behind_ms = token_ms(exc.head.token) - (self._clock_ms() + skew_ms)
            if behind_ms > SKEW_THRESHOLD_MS:
                if len(self._skews_ms) >= REMEMBERED_TENANTS:
                    self._skews_ms.clear()
                self._skews_ms[tenant_id] = min(skew_ms + behind_ms, MAX_SKEW_MS)
        # What the store holds (and, with no head, the fence it was refused by).
        self._heads[tenant_id] = _KnownHead(exc.head, wrote_it=False, fence=exc.fence)

    def _remember(self, tenant_id: str, known: _KnownHead) -> None:
        if len(self._heads) > REMEMBERED_TENANTS:
            self._heads.clear()
        held = self._heads.get(tenant_id)
        newer = known.head is not None and (
            held is None or held.head is None or held.head.token < known.head.token
        )
        if held is None or newer:
            self._heads[tenant_id] = known
