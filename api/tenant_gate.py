"""Per-tenant admission of reads and of writes, so that one tenant's load can delay
only that tenant; and per caller, so that one caller's load, whatever tenants it
names, can delay only that caller.

Every read and write runs in the shared pool of worker threads (40 by default).
Writes of one tenant serialize on its head anyway (docs/ordering.md): more than a
few in flight only queue inside the pool. Reads do not serialize, but one
tenant's requests (30 aliases each) could take every worker: another tenant's
one-item read then waited 98.7 s. A gate lets `slots` calls of a tenant into the
pool at a time; the others wait on the event loop (no thread held), and past
`MAX_WAITING` a call is refused at once with UNAVAILABLE (retryable).

A tenant's gate alone does not bound a caller whose token lists many tenants: 12
tenants sent 29 aliases each held 4 x 12 = 48 calls, every one of the 40 workers,
and another tenant's one-item read went from 64 ms to 2.4 s. So each call first
passes its caller's gate (the token's subject): CALLS_PER_CALLER of its calls,
reads and writes of all its tenants together, in the pool at a time; then its
tenant's. The order matters: a call waiting for its caller's turn holds no slot
of its tenant, which another caller of that tenant may use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from api import request_log
from api.domain.errors import Unavailable

# A tenant's writes commit one at a time; four in flight keep the next one ready
# while the previous commits. 45 concurrent 30-entry pushes to one tenant used to
# hold every one of the 40 worker threads.
WRITERS_PER_TENANT = 4
# Reads of a tenant in the pool at once: a tenant holds at most 4 + 4 of its 40
# workers, and every other tenant finds one free.
READERS_PER_TENANT = 4
MAX_WAITING = 64
# A caller's calls in the pool at once, all its tenants' reads and writes together:
# one tenant's share (4 + 4), so a caller holds at most 8 of the 40 workers.
CALLS_PER_CALLER = READERS_PER_TENANT + WRITERS_PER_TENANT


class TenantGate:
    def __init__(
        self,
        slots: int = WRITERS_PER_TENANT,
        max_waiting: int = MAX_WAITING,
        what: str = "writes",
        whose: str = "tenant",
    ) -> None:
        self._writers = slots
        self._max_waiting = max_waiting
        self._what = what
        self._whose = whose
        self._gates: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @asynccontextmanager
    async def enter(self, tenant_id: str) -> AsyncIterator[None]:
        """Admitted in turn among the calls of `tenant_id` (a caller's subject, for
        a caller's gate)."""
        semaphore, users = self._gates.get(tenant_id, (asyncio.Semaphore(self._writers), 0))
        if users >= self._writers + self._max_waiting:
            log = request_log.current()
            if log is not None:  # the operators' TenantThrottled (api.metrics)
                log.throttled += 1
            raise Unavailable(f"too many concurrent {self._what} of this {self._whose}; retry")
        self._gates[tenant_id] = (semaphore, users + 1)
        try:
            async with semaphore:
                yield
        finally:
            semaphore, users = self._gates[tenant_id]
            if users == 1:
                del self._gates[tenant_id]
            else:
                self._gates[tenant_id] = (semaphore, users - 1)


def caller_gate() -> TenantGate:
    """A process's gate of callers (`CALLS_PER_CALLER` each)."""
    return TenantGate(CALLS_PER_CALLER, what="calls", whose="caller")
