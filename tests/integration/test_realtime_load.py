"""1,000 subscriptions on one server process: memory stays within budget, and one
write reaches every one of them."""

from __future__ import annotations

import asyncio
import time

import httpx2
import pytest

from api.settings import Settings
from tests.support.gql import bearer
from tests.support.servers import api_server
from tests.support.subscribers import (
    ONE_USER_FLEET,
    close_all,
    pid_listening,
    rss_kb,
    subscribe_many,
    ws_url,
)

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)

SUBSCRIBERS = 1000
# Per connection with one subscription: the socket's buffers, uvicorn's and
# Strawberry's per-connection objects, the subscription task and its slot. Measured
# about 60 KB (see the closing note of the realtime issue); the budget leaves room.
BUDGET_KB_PER_SUBSCRIBER = 150


@pytest.mark.slow
def test_a_thousand_subscribers_fit_the_budget_and_all_get_the_write(
    settings: Settings, tenant: str
) -> None:
    with api_server(settings, extra_env=ONE_USER_FLEET) as url:
        pid = pid_listening(url)
        assert pid is not None
        headers = bearer([tenant])
        asyncio.run(_run(url, pid, headers, tenant))


async def _run(url: str, pid: int, headers: dict[str, str], tenant: str) -> None:
    async with httpx2.AsyncClient(base_url=url, headers=headers) as http:
        await _create(http, tenant)  # so that the tenant has a head
        before = rss_kb(pid)
        subscribers, tasks = await subscribe_many(
            ws_url(url), headers["Authorization"], tenant, None, SUBSCRIBERS
        )
        try:
            # Each got the tenant's current token at once; then settle.
            await _until(lambda: all(s.events for s in subscribers), 30)
            grown = rss_kb(pid) - before
            assert grown <= SUBSCRIBERS * BUDGET_KB_PER_SUBSCRIBER, f"{grown} KB"
            written = await _create(http, tenant)
            await _until(lambda: all(s.got(written) for s in subscribers), 30)
        finally:
            await close_all(subscribers, tasks)
    print(f"\n{SUBSCRIBERS} subscribers: +{grown} KB ({grown / SUBSCRIBERS:.0f} KB each)")


async def _create(http: httpx2.AsyncClient, tenant: str) -> str:
    response = await http.post(
        "/graphql",
        json={
            "query": "mutation($i: CreatePersonInput!) "
            "{ createPerson(input: $i) { person { changeToken } } }",
            "variables": {"i": {"tenantID": tenant, "person": {}}},
        },
    )
    token: str = response.json()["data"]["createPerson"]["person"]["changeToken"]
    return token


async def _until(condition: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
