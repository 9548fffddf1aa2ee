"""Per-tenant admission of writes, so that one tenant's writers can delay only that tenant.

Writes of one tenant serialize on its head anyway (docs/ordering.md): more than a
few of them in flight in one process only queue up inside the shared worker
threads, where they would hold threads that other tenants' requests need. The
gate lets `WRITERS_PER_TENANT` writes of a tenant into the thread pool at a time;
the others wait on the event loop (no thread held), and past `MAX_WAITING` a
write is refused at once with UNAVAILABLE (retryable).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from api.domain.errors import Unavailable

# A tenant's writes commit one at a time; four in flight keep the next one ready
# while the previous commits. 45 concurrent 30-entry pushes to one tenant used to
# hold every one of the 40 worker threads.
WRITERS_PER_TENANT = 4
MAX_WAITING = 64


class TenantGate:
    def __init__(self, writers: int = WRITERS_PER_TENANT, max_waiting: int = MAX_WAITING) -> None:
        self._writers = writers
        self._max_waiting = max_waiting
        self._gates: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @asynccontextmanager
    async def enter(self, tenant_id: str) -> AsyncIterator[None]:
        semaphore, users = self._gates.get(tenant_id, (asyncio.Semaphore(self._writers), 0))
        if users >= self._writers + self._max_waiting:
            raise Unavailable("too many concurrent writes to this tenant; retry")
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
