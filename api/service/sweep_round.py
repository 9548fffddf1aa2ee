"""A round of the scheduled sweep of unreferenced blobs (`api.sweep_handler`,
hourly; `scripts/sweep` on a server): which tenants' passes
(`api.service.blob_sweep`) it runs, in what order, and for how long.

Each tenant gets a turn of at most `turn_calls` calls, in registry order: a pass
that its turn does not end keeps its state (saved by each call) and stays due, and
the round goes on with the next tenant. Once every shard is read, the time left
gives the unfinished passes further turns, in the same order; what the round does
not reach, the next round resumes. So a tenant's size delays the tenants after it
by one turn a round, never a whole pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Protocol

from api.service.sweep_ports import SweepTable

logger = logging.getLogger(__name__)


class _Call(Protocol):
    @property
    def done(self) -> bool: ...


def sweep_due(
    sweep: Callable[[str], _Call],
    table: SweepTable,
    clock_s: Callable[[], float],
    shards: int,
    budget_s: float,
    start_shard: int,
    turn_calls: int,
) -> int:
    """Run `sweep` (one call of a tenant's pass) for the tenants whose pass is due,
    shard by shard from `start_shard`, until `budget_s` seconds have passed; how many
    calls it made."""
    started = time.monotonic()
    calls = 0

    def out_of_time() -> bool:
        return time.monotonic() - started >= budget_s

    def turn(tenant: str) -> bool:
        """Up to `turn_calls` calls of the tenant's pass: whether it is over (or
        failed, or is busy: nothing more this round)."""
        nonlocal calls
        for _ in range(turn_calls):
            if out_of_time():
                return False
            calls += 1
            try:
                if sweep(tenant).done:
                    return True
            except Exception:
                # Whatever fails for this tenant (S3 or DynamoDB unwell or refusing, a
                # record this code cannot read) fails it alone: it stays due (its
                # lease lapses after HOLD_S) and the round goes on with the tenants
                # after it.
                logger.exception("blob sweep of tenant %s failed", tenant)
                return True
        return False

    unfinished: list[str] = []
    order = [(start_shard + i) % shards for i in range(shards)]
    # Every shard's first page is read at the round's start, the first shard's here
    # and the others' at once: most hours no tenant is due, and the round is only
    # those reads, one round trip each when made one after another (65-90 ms of 16
    # Queries in process, against DynamoDB Local), in a function whose every hourly
    # start is cold. The first read makes the store's client (a cold start's), so
    # that the others do not race to make one each. A tenant that falls due
    # meanwhile waits for the next round, as it would for a shard read earlier.
    # Later pages (a shard of more than some 20,000 tenants) are read at their turn.
    now = int(clock_s())
    with ThreadPoolExecutor(max_workers=len(order)) as pool:
        firsts = [pool.submit(table.due, order[0], now, None)]
        wait(firsts)
        firsts += [pool.submit(table.due, shard, now, None) for shard in order[1:]]
    for shard, first in zip(order, firsts, strict=True):
        after: str | None = None
        while True:
            try:
                if after is None:
                    tenants, after = first.result()
                else:
                    tenants, after = table.due(shard, int(clock_s()), after)
            except Exception:
                # The registry unreadable (throttled, say): the next shard, and this
                # one at the next round.
                logger.exception("blob sweep: shard %d unreadable", shard)
                break
            for tenant in tenants:
                if not turn(tenant):
                    unfinished.append(tenant)
                if out_of_time():
                    return calls
            if after is None:
                break
    # Every due tenant had its turn: the time left goes on with the passes under way.
    while unfinished and not out_of_time():
        unfinished = [tenant for tenant in unfinished if not turn(tenant)]
    return calls
