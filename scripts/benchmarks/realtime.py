"""Realtime figures for `scripts/bench`: `changesAvailable` on real server processes.

- latency from a mutation's response to the event, on a subscriber of the same
  server (its own commit wakes it) and of another server (the table's stream),
  against the mutation's own latency measured in the same run;
- how many events per second one process delivers to many subscribers;
- memory per connection (server RSS growth over N subscribers);
- DynamoDB reads: what a subscribe costs, per write, and per idle subscriber.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import httpx2

from api.realtime.streams import POLL_INTERVAL_S
from api.settings import Settings
from api.storage import keys
from scripts.benchmarks.prices import STREAM_READ_USD
from tests.support.servers import api_server
from tests.support.subscribers import (
    ONE_USER_FLEET,
    close_all,
    pid_listening,
    rss_kb,
    subscribe_many,
    ws_url,
)

CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }"


def measure_realtime(
    settings: Settings, ddb: Any, authorization: str, fast: bool
) -> dict[str, Any]:
    return asyncio.run(_measure(settings, ddb, authorization, fast))


async def _measure(settings: Settings, ddb: Any, authorization: str, fast: bool) -> dict[str, Any]:
    tenant = "realtime"
    rounds = 30 if fast else 200
    fan = 300 if fast else 1000
    headers = {"Authorization": authorization}
    with (
        api_server(settings, extra_env=ONE_USER_FLEET) as a,
        api_server(settings, extra_env=ONE_USER_FLEET) as b,
    ):
        async with (
            httpx2.AsyncClient(base_url=a, headers=headers, timeout=30) as http_a,
        ):
            await _create(http_a, tenant)
            same = await _latencies(http_a, ws_url(a), authorization, tenant, rounds)
            cross = await _latencies(http_a, ws_url(b), authorization, tenant, rounds)
            mutation = same.pop("mutation_ms")
            cross.pop("mutation_ms")
            pid = pid_listening(b)
            assert pid is not None
            before = rss_kb(pid)
            subscribers, tasks = await subscribe_many(ws_url(b), authorization, tenant, None, fan)
            try:
                await _until(lambda: all(s.events for s in subscribers), 60)
                per_connection_kb = (rss_kb(pid) - before) / fan
                rates = []
                for _ in range(3 if fast else 10):
                    written = await _create(http_a, tenant)
                    started = time.monotonic()
                    await _until(lambda w=written: all(s.got(w) for s in subscribers), 60)
                    rates.append(fan / (time.monotonic() - started))
            finally:
                await close_all(subscribers, tasks)
    subscribe_units = _subscribe_read_units(ddb, settings.table_name, tenant)
    polls_per_hour = 3600 / POLL_INTERVAL_S
    return {
        "mutation_p50_ms": mutation,
        "same_server": same,
        "cross_server": cross,
        "fan_out_subscribers": fan,
        "events_per_s": statistics.median(rates),
        "memory_per_connection_kb": per_connection_kb,
        "subscribe_read_units": subscribe_units,
        "read_units_per_write": 0.0,
        "read_units_per_idle_subscriber_hour": 0.0,
        "stream_reads_per_process_hour": polls_per_hour,
        "stream_cost_per_process_month_usd": polls_per_hour * 24 * 30 * STREAM_READ_USD,
    }


async def _latencies(
    http: httpx2.AsyncClient, ws: str, authorization: str, tenant: str, rounds: int
) -> dict[str, float]:
    """Event time after the mutation's response, for one subscriber at `ws`."""
    head = await _create(http, tenant)
    subscribers, tasks = await subscribe_many(ws, authorization, tenant, head, 1)
    (subscriber,) = subscribers
    after_response: list[float] = []
    after_send: list[float] = []
    mutation: list[float] = []
    try:
        await asyncio.sleep(0.5)  # registered
        for _ in range(rounds):
            sent = time.monotonic()
            written = await _create(http, tenant)
            answered = time.monotonic()
            mutation.append((answered - sent) * 1000)
            await _until(lambda w=written: subscriber.got(w) is not None, 10)
            got = subscriber.got(written)
            assert got is not None
            # The same server's own commit can poke before the response is out: 0.
            after_response.append(max(0.0, got - answered) * 1000)
            after_send.append((got - sent) * 1000)
            await asyncio.sleep(0.05)
    finally:
        await close_all(subscribers, tasks)
    quantiles = statistics.quantiles(after_response, n=100)
    return {
        "p50_ms": statistics.median(after_response),
        "p99_ms": quantiles[98],
        "from_send_p50_ms": statistics.median(after_send),
        "from_send_p99_ms": statistics.quantiles(after_send, n=100)[98],
        "mutation_ms": statistics.median(mutation),
    }


def _subscribe_read_units(ddb: Any, table: str, tenant: str) -> float:
    """The read a new subscription makes (`SyncService.latest_change`): the head and
    the newest entry, one consistent Query."""
    response = ddb.query(
        TableName=table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": keys.log_pk(tenant)}},
        ScanIndexForward=False,
        Limit=2,
        ConsistentRead=True,
        ReturnConsumedCapacity="TOTAL",
    )
    return float(response["ConsumedCapacity"]["CapacityUnits"])


async def _create(http: httpx2.AsyncClient, tenant: str) -> str:
    response = await http.post(
        "/graphql", json={"query": CREATE, "variables": {"i": {"tenantID": tenant, "person": {}}}}
    )
    token: str = response.json()["data"]["createPerson"]["person"]["changeToken"]
    return token


async def _until(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("realtime benchmark: an event did not arrive")
        await asyncio.sleep(0.002)


def print_realtime(r: dict[str, Any]) -> None:
    same, cross = r["same_server"], r["cross_server"]
    base = r["mutation_p50_ms"]
    print(
        f"realtime: the event after the mutation's response: same server p50 "
        f"{same['p50_ms']:.2f} / p99 {same['p99_ms']:.2f} ms, other server p50 "
        f"{cross['p50_ms']:.2f} / p99 {cross['p99_ms']:.2f} ms"
    )
    print(
        f"realtime: from sending the mutation, against its own p50 {base:.2f} ms: same "
        f"server p50 {same['from_send_p50_ms']:.2f} ms ({same['from_send_p50_ms'] / base:.2f}x), "
        f"other server {cross['from_send_p50_ms']:.2f} ms ({cross['from_send_p50_ms'] / base:.2f}x)"
    )
    print(
        f"realtime: {r['events_per_s']:.0f} events/s to {r['fan_out_subscribers']} subscribers "
        f"of one process, {r['memory_per_connection_kb']:.0f} KB per connection"
    )
    print(
        f"realtime reads: {r['subscribe_read_units']:g} RCU per subscribe, "
        f"{r['read_units_per_write']:g} per write, "
        f"{r['read_units_per_idle_subscriber_hour']:g} per idle subscriber-hour; the stream: "
        f"{r['stream_reads_per_process_hour']:.0f} GetRecords per process-hour "
        f"(${r['stream_cost_per_process_month_usd']:.2f} per process-month)"
    )
