"""Token order against the real store when the clock misbehaves (contract 3.1)."""

from __future__ import annotations

from typing import Any

from api.domain.cursor import CursorCodec
from api.service import SyncService
from api.settings import Settings
from api.storage.store import DynamoStore
from tests.support.family import PERSON
from tests.support.store_state import assert_consistent, tenant_state

NOW_MS = 1_795_300_000_000


def _service(clock: list[int]) -> SyncService:
    return SyncService(DynamoStore(), CursorCodec("x"), clock_ms=lambda: clock[0])


def test_many_writes_in_one_millisecond(tenant: str, ddb: Any, settings: Settings) -> None:
    service = _service([NOW_MS])
    tokens = [service.create(PERSON, tenant, None, {}).change_token for _ in range(50)]
    assert tokens == sorted(tokens) and len(set(tokens)) == 50
    assert_consistent(tenant_state(ddb, settings.table_name, tenant))


def test_a_clock_going_backwards_and_a_second_server_far_behind(
    tenant: str, ddb: Any, settings: Settings
) -> None:
    clock = [NOW_MS]
    ahead, behind = _service(clock), _service([NOW_MS - 60_000])
    record = ahead.create(PERSON, tenant, "p1", {"givenName": "a"})
    tokens = [record.change_token]
    for i in range(30):
        clock[0] -= 250  # this server's clock keeps going backwards
        server = behind if i % 3 == 0 else ahead
        record = server.update(PERSON, tenant, "p1", record.change_token, {"givenName": str(i)})
        tokens.append(record.change_token)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    state = tenant_state(ddb, settings.table_name, tenant)
    assert_consistent(state)
    assert state.head == tokens[-1]


def test_one_tenants_future_head_leaves_another_tenants_times_alone(
    tenant: str, settings: Settings
) -> None:
    """The clock correction learnt from one tenant's head is that tenant's: a head an
    hour ahead (a fast server, imported tokens) must not move every tenant's
    updatedAt on this process, nor from here onto other servers."""
    slow = _service([NOW_MS])
    fast = _service([NOW_MS + 3_600_000])
    ahead, other = f"{tenant}-ahead", f"{tenant}-other"
    slow.create(PERSON, ahead, "p1", {})  # the slow server knows this tenant's head
    fast.create(PERSON, ahead, "p2", {})  # the head is now an hour ahead of its clock
    corrected = slow.create(PERSON, ahead, "p3", {})  # loses a race to it, corrects
    assert corrected.updated_at.timestamp() * 1000 > NOW_MS + 3_599_000  # past the head
    untouched = slow.create(PERSON, other, "q1", {})
    assert abs(untouched.updated_at.timestamp() * 1000 - NOW_MS) < 1000, untouched.updated_at
