"""The hub's slots: a deletion's poke ends only the subscriptions of the tenant's
life it names (issue 37, finding 4)."""

from __future__ import annotations

import asyncio

import pytest

from api.domain.errors import TenantDeleted
from api.realtime.signals import DELETING, TenantSignals, deleting, is_deletion

BEFORE = "01KAXW0000000000000000000A"  # the tenant's last token before its deletion
AGAIN = "01KAXW0000000000000000000Z"  # a token of the tenant written again


def test_a_deletion_ends_only_the_subscriptions_of_the_life_it_names() -> None:
    async def run() -> None:
        signals = TenantSignals(10)
        old, new, fresh = (signals.register("t") for _ in range(3))
        old.held, new.held = BEFORE, AGAIN  # fresh holds nothing yet
        for slot in (old, new, fresh):
            slot.offer(deleting(BEFORE))
        with pytest.raises(TenantDeleted):
            await old.take()
        with pytest.raises(TenantDeleted):
            await fresh.take()
        assert not new.ready.is_set()  # the deletion is of an earlier life: ignored
        new.offer("01KAXW0000000000000000001A")
        assert await new.take() == "01KAXW0000000000000000001A"
        new.offer(DELETING)  # this process deleting the tenant now: every slot ends
        with pytest.raises(TenantDeleted):
            await new.take()

    asyncio.run(run())


def test_a_deletion_names_a_token_or_nothing() -> None:
    assert deleting(BEFORE) == f"{DELETING}/{BEFORE}" and is_deletion(deleting(BEFORE))
    assert deleting(None) == DELETING == deleting("not a token")
    assert not is_deletion(f"{DELETING}/x") and not is_deletion(BEFORE)
