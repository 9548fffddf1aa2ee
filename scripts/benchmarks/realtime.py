"""Realtime figures for `scripts/bench`: `changesAvailable` on real server processes.

- latency from a mutation's response to the event, on a subscriber of the same
  server (its own commit wakes it), of another server (which reads the table's
  stream itself) and of a third server among three (the one stream reader posts
  to it: `REALTIME_PEER_URL`), against the mutation's own latency in the same run;
- the same under a burst of writes on six servers (`scripts.benchmarks.realtime_burst`);
- how many events per second one process delivers to many subscribers;
- memory per connection (server RSS growth over N subscribers);
- DynamoDB reads: what a subscribe costs, per write, and per idle subscriber.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from typing import Any

import httpx2

from api.realtime.streams import POLL_INTERVAL_S
from api.settings import Settings
from api.storage import keys
from scripts.benchmarks.prices import STREAM_READ_USD
from scripts.benchmarks.realtime_burst import WRITES as BURST_WRITES
from scripts.benchmarks.realtime_burst import create_person, measure_burst, print_burst, until
from tests.support.servers import api_server, one_stream_reader
from tests.support.subscribers import (
    ONE_USER_FLEET,
    close_all,
    pid_listening,
    rss_kb,
    subscribe_many,
    ws_url,
)

# By mode: latency rounds, subscribers fanned out to, and fan-out writes. The smoke's
# least still fills every figure (a quantile needs 2 latencies).
SIZES = {"smoke": (5, 50, 2), "fast": (30, 300, 3), "full": (200, 1000, 10)}
# Servers with one stream reader for the relayed row (the reader posts to the others).
RELAY_SERVERS = 4


def measure_realtime(settings: Settings, ddb: Any, authorization: str, mode: str) -> dict[str, Any]:
    return asyncio.run(_measure(settings, ddb, authorization, *SIZES[mode], BURST_WRITES[mode]))


async def _measure(
    settings: Settings,
    ddb: Any,
    authorization: str,
    rounds: int,
    fan: int,
    writes: int,
    burst_writes: int,
) -> dict[str, Any]:
    tenant = "realtime"
    headers = {"Authorization": authorization}
    with (
        api_server(settings, extra_env=ONE_USER_FLEET) as a,
        api_server(settings, extra_env=ONE_USER_FLEET) as b,
    ):
        async with (
            httpx2.AsyncClient(base_url=a, headers=headers, timeout=30) as http_a,
        ):
            await create_person(http_a, tenant)
            same = await _latencies(http_a, ws_url(a), authorization, tenant, rounds)
            cross = await _latencies(http_a, ws_url(b), authorization, tenant, rounds)
            mutation = same.pop("mutation_ms")
            cross.pop("mutation_ms")
            pid = pid_listening(b)
            assert pid is not None
            before = rss_kb(pid)
            subscribers, tasks = await subscribe_many(ws_url(b), authorization, tenant, None, fan)
            try:
                await until(lambda: all(s.events for s in subscribers), 60)
                per_connection_kb = (rss_kb(pid) - before) / fan
                rates = []
                for _ in range(writes):
                    written = await create_person(http_a, tenant)
                    started = time.monotonic()
                    await until(lambda w=written: all(s.got(w) for s in subscribers), 60)
                    rates.append(fan / (time.monotonic() - started))
            finally:
                await close_all(subscribers, tasks)
    relayed = await _relayed_latencies(settings, authorization, tenant, rounds)
    burst = await measure_burst(settings, authorization, burst_writes)
    subscribe_units = subscribe_read_units(ddb, settings.table_name, tenant)
    polls_per_hour = 3600 / POLL_INTERVAL_S
    return {
        "mutation_p50_ms": mutation,
        "same_server": same,
        "cross_server": cross,
        "relayed": relayed,
        "burst": burst,
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
    head = await create_person(http, tenant)
    subscribers, tasks = await subscribe_many(ws, authorization, tenant, head, 1)
    (subscriber,) = subscribers
    after_response: list[float] = []
    after_send: list[float] = []
    mutation: list[float] = []
    try:
        await asyncio.sleep(0.5)  # registered
        for _ in range(rounds):
            sent = time.monotonic()
            written = await create_person(http, tenant)
            answered = time.monotonic()
            mutation.append((answered - sent) * 1000)
            await until(lambda w=written: subscriber.got(w) is not None, 10)
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


async def _relayed_latencies(
    settings: Settings, authorization: str, tenant: str, rounds: int
) -> dict[str, float]:
    """RELAY_SERVERS servers with one stream reader: writes on the reader, the event
    on a server that neither writes nor reads the stream (the reader posts to it)."""
    with contextlib.ExitStack() as stack:
        bases = [
            stack.enter_context(api_server(settings, extra_env=ONE_USER_FLEET, relayed=True))
            for _ in range(RELAY_SERVERS)
        ]
        # A server joins the lease at its first subscription.
        joined = [
            await subscribe_many(ws_url(base), authorization, tenant, None, 1) for base in bases
        ]
        try:
            reader = await asyncio.to_thread(one_stream_reader, bases, 40)  # two leases
            index, follower = next((i, b) for i, b in enumerate(bases) if b != reader)
            async with httpx2.AsyncClient(
                base_url=reader, headers={"Authorization": authorization}, timeout=30
            ) as http:
                # The reader posts to a server once its next heartbeat has seen it join.
                written = await create_person(http, tenant)
                ((warm,), _) = joined[index]
                await until(lambda: warm.got(written) is not None, 30)
                relayed = await _latencies(http, ws_url(follower), authorization, tenant, rounds)
        finally:
            for subscribers, tasks in joined:
                await close_all(subscribers, tasks)
    relayed.pop("mutation_ms")
    return relayed


def subscribe_read_units(ddb: Any, table: str, tenant: str) -> float:
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


def print_realtime(r: dict[str, Any]) -> None:
    same, cross, relayed = r["same_server"], r["cross_server"], r["relayed"]
    base = r["mutation_p50_ms"]
    print(
        f"realtime: the event after the mutation's response: same server p50 "
        f"{same['p50_ms']:.2f} / p99 {same['p99_ms']:.2f} ms, other server p50 "
        f"{cross['p50_ms']:.2f} / p99 {cross['p99_ms']:.2f} ms, a third server through "
        f"the stream reader's relay p50 {relayed['p50_ms']:.2f} / p99 {relayed['p99_ms']:.2f} ms"
    )
    print(
        f"realtime: from sending the mutation, against its own p50 {base:.2f} ms: same "
        f"server p50 {same['from_send_p50_ms']:.2f} ms ({same['from_send_p50_ms'] / base:.2f}x), "
        f"other server {cross['from_send_p50_ms']:.2f} ms "
        f"({cross['from_send_p50_ms'] / base:.2f}x), relayed "
        f"{relayed['from_send_p50_ms']:.2f} ms ({relayed['from_send_p50_ms'] / base:.2f}x)"
    )
    print_burst(r["burst"])
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
