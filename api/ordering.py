"""Getting a write's token accepted: proposals, lost races, retries.

The store accepts a write only if its token is above the tenant's head (see
`api.storage.keys`); this module proposes tokens and retries the writes that
lose a race. Clocks only propose; the store decides.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from api.domain.errors import StaleHead, TransactionConflict, Unavailable, WriteContention
from api.domain.tokens import next_token, token_ms

# A stale head costs one retry with a later token; a busy store costs a short,
# jittered wait. Past this many attempts the client is told to retry later.
MAX_WRITE_ATTEMPTS = 10
# A write that lost a race proposes its next token up to RETRY_LEAD_MS ahead of
# the head it lost to, doubling with each loss (capped).
RETRY_LEAD_MS = 10
MAX_RETRY_LEAD_MS = 1000
# A server whose clock is more than this behind a tenant's head corrects it by the gap.
SKEW_THRESHOLD_MS = 1000
MAX_SKEW_MS = 10 * 60 * 1000
_T = TypeVar("_T")
_conflict_wait = wait_random_exponential(multiplier=0.01, max=0.25)
_stale_head_wait = wait_random_exponential(multiplier=0.002, max=0.05)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _contention_wait(state: RetryCallState) -> float:
    # A stale head is retried at once with a later token, and with a little
    # jitter once it keeps losing, so that busy writers stop colliding; a
    # transaction conflict (another writer on the same item) waits longer.
    outcome = state.outcome
    if outcome is not None and isinstance(outcome.exception(), TransactionConflict):
        return float(_conflict_wait(state))
    return float(_stale_head_wait(state)) if state.attempt_number > 2 else 0.0


class _TenantLocks:
    """One lock per tenant, forgotten when no writer holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, tenant_id: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(tenant_id, (threading.Lock(), 0))
            self._locks[tenant_id] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[tenant_id]
                if users == 1:
                    del self._locks[tenant_id]
                else:
                    self._locks[tenant_id] = (lock, users - 1)


class TokenOrdering:
    def __init__(self, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self._clock_ms = clock_ms
        # Latest head seen per tenant, so a token can be proposed without a read.
        # Only a hint: the store's condition on the head is what orders writes.
        self._heads: dict[str, str] = {}
        self._skew_ms = 0
        # Writers of one tenant in this process take turns: the store orders them
        # anyway, and a write that is bound to lose a race still costs capacity.
        self._tenant_locks = _TenantLocks()

    def write(
        self,
        tenant_id: str,
        floor: str | None,
        attempt: Callable[[str], _T],
        token_of: Callable[[_T], str],
    ) -> _T:
        """Run `attempt(token)` until the store accepts its token, retrying lost races.

        `floor` is a token known to exist (the one an update is based on): the new
        token must exceed it.
        """
        retrying = Retrying(
            retry=retry_if_exception_type(WriteContention),
            stop=stop_after_attempt(MAX_WRITE_ATTEMPTS),
            wait=_contention_wait,
            before_sleep=lambda state: self._learn_from_loss(tenant_id, state),
            reraise=True,
        )
        try:
            with self._tenant_locks.hold(tenant_id):
                for try_ in retrying:
                    with try_:
                        number = try_.retry_state.attempt_number
                        result = attempt(self._propose(tenant_id, floor, number))
        except WriteContention as exc:
            raise Unavailable("too many concurrent writes to this tenant; retry") from exc
        self._remember_head(tenant_id, token_of(result))
        return result

    def _propose(self, tenant_id: str, floor: str | None, attempt_number: int) -> str:
        """A token past the last head seen here and past `floor`.

        Bumping past the floor matters: another server may have bumped past the
        same stale head to exactly that entity's current token, and a write reusing
        it would name one log entry twice in its transaction. A write that lost a
        race aims further ahead with each loss, past the writers proposing from
        their clocks meanwhile; otherwise a server whose clock is behind, which can
        only propose "last head + 1", would lose every race to them.
        """
        after = max(filter(None, (self._heads.get(tenant_id), floor)), default=None)
        now = self._clock_ms() + self._skew_ms
        if after is not None and attempt_number > 1:
            reach = min(RETRY_LEAD_MS * 2 ** (attempt_number - 2), MAX_RETRY_LEAD_MS)
            now = max(now, token_ms(after)) + random.randint(1, reach)
        return next_token(now, after)

    def _learn_from_loss(self, tenant_id: str, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if not isinstance(exc, StaleHead):
            return
        # A clock far behind the tenant's head is wrong; follow the head's time.
        # Small gaps are left alone: they are in-flight writes, not a bad clock.
        behind_ms = token_ms(exc.head) - (self._clock_ms() + self._skew_ms)
        if behind_ms > SKEW_THRESHOLD_MS:
            self._skew_ms = min(self._skew_ms + behind_ms, MAX_SKEW_MS)
        self._remember_head(tenant_id, exc.head)

    def _remember_head(self, tenant_id: str, head: str) -> None:
        if len(self._heads) > 10_000:
            self._heads.clear()
        if head > self._heads.get(tenant_id, ""):
            self._heads[tenant_id] = head
