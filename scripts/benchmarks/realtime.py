"""Realtime figures for `scripts/bench`: `changesAvailable` on real server processes.

- latency from a mutation's response to the event, on a subscriber of the same
  server (its own commit wakes it), of another server (which reads the table's
  stream itself) and of a third server among three (the one stream reader posts
  to it: `REALTIME_PEER_URL`), against the mutation's own latency in the same run;
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
from tests.support.servers import api_server, one_stream_reader
from tests.support.subscribers import (
    ONE_USER_FLEET,
    close_all,
    pid_listening,
    rss_kb,
    subscribe_many,
    ws_url,
)

CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }"


# By mode: latency rounds, subscribers fanned out to, and fan-out writes. The smoke's
# least still fills every figure (a quantile needs 2 latencies).
SIZES = {"smoke": (5, 50, 2), "fast": (30, 300, 3), "full": (200, 1000, 10)}
# The burst (issue 48, finding 10): servers with one stream reader, tenants, their
# subscribers spread over the servers, and by mode the bursts of writes (each a write
# to every tenant through every server at once: 20 writes).
BURST_SERVERS = 4
BURST_TENANTS = [f"burst{i}" for i in range(5)]
BURST_SUBSCRIBERS = 12
BURSTS = {"smoke": 2, "fast": 5, "full": 10}


def measure_realtime(settings: Settings, ddb: Any, authorization: str, mode: str) -> dict[str, Any]:
    return asyncio.run(_measure(settings, ddb, authorization, *SIZES[mode], BURSTS[mode]))


async def _measure(
    settings: Settings,
    ddb: Any,
    authorization: str,
    rounds: int,
    fan: int,
    writes: int,
    bursts: int,
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
                for _ in range(writes):
                    written = await _create(http_a, tenant)
                    started = time.monotonic()
                    await _until(lambda w=written: all(s.got(w) for s in subscribers), 60)
                    rates.append(fan / (time.monotonic() - started))
            finally:
                await close_all(subscribers, tasks)
    relayed, burst = await _relayed_latencies(settings, authorization, tenant, rounds, bursts)
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


async def _relayed_latencies(
    settings: Settings, authorization: str, tenant: str, rounds: int, bursts: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """BURST_SERVERS servers with one stream reader: writes on the reader, the event
    on a server that neither writes nor reads the stream (the reader posts to it);
    then `bursts` bursts of writes on every server (`_burst_latencies`)."""
    with contextlib.ExitStack() as stack:
        bases = [
            stack.enter_context(api_server(settings, extra_env=ONE_USER_FLEET, relayed=True))
            for _ in range(BURST_SERVERS)
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
                written = await _create(http, tenant)
                ((warm,), _) = joined[index]
                await _until(lambda: warm.got(written) is not None, 30)
                relayed = await _latencies(http, ws_url(follower), authorization, tenant, rounds)
            burst = await _burst_latencies(bases, reader, authorization, bursts)
        finally:
            for subscribers, tasks in joined:
                await close_all(subscribers, tasks)
    relayed.pop("mutation_ms")
    return relayed, burst


async def _burst_latencies(
    bases: list[str], reader: str, authorization: str, bursts: int
) -> dict[str, Any]:
    """Writes in bursts across the servers at `bases` (`reader` reads the stream and
    posts to the others) and BURST_TENANTS tenants, BURST_SUBSCRIBERS subscribers
    spread over them: for each write, the time from its response to the first event
    carrying its token (or a newer one) on each subscriber of its tenant on another
    server, split by whether that server is the stream's reader (its own
    subscribers) or is posted to by it (relayed)."""
    placed = [
        (bases[i % len(bases)], BURST_TENANTS[i % len(BURST_TENANTS)])
        for i in range(BURST_SUBSCRIBERS)
    ]
    heads: dict[str, str] = {}
    async with contextlib.AsyncExitStack() as clients:
        https = {
            base: await clients.enter_async_context(
                httpx2.AsyncClient(
                    base_url=base, headers={"Authorization": authorization}, timeout=30
                )
            )
            for base in bases
        }
        for tenant in BURST_TENANTS:
            heads[tenant] = await _create(https[bases[0]], tenant, "burst")
        joined = [
            await subscribe_many(ws_url(base), authorization, tenant, heads[tenant], 1)
            for base, tenant in placed
        ]
        try:
            # A write per tenant reaches every subscriber first.
            warm = {t: await _create(https[reader], t, "burst") for t in BURST_TENANTS}
            subscribers = [s for (subs, _) in joined for s in subs]
            await _until(
                lambda: all(
                    s.got(warm[t]) is not None
                    for s, (_, t) in zip(subscribers, placed, strict=True)
                ),
                60,
            )
            written: list[tuple[str, str, str, float]] = []  # server, tenant, token, at

            async def write(base: str, tenant: str) -> None:
                token = await _create(https[base], tenant, "burst")
                written.append((base, tenant, token, time.monotonic()))

            for _ in range(bursts):
                await asyncio.gather(
                    *(write(base, tenant) for base in bases for tenant in BURST_TENANTS)
                )
                await asyncio.sleep(0.3)
            pending = [
                (s, token)
                for base, tenant, token, _ in written
                for s, (at, t) in zip(subscribers, placed, strict=True)
                if t == tenant and at != base
            ]
            await _until(lambda: all(s.got(token) is not None for s, token in pending), 60)
            own: list[float] = []
            relayed: list[float] = []
            for base, tenant, token, answered in written:
                for s, (at, t) in zip(subscribers, placed, strict=True):
                    if t != tenant or at == base:
                        continue  # another tenant's, or woken by its own server's commit
                    got = s.got(token)
                    assert got is not None
                    (own if at == reader else relayed).append(max(0.0, got - answered) * 1000)
        finally:
            for subs, tasks in joined:
                await close_all(subs, tasks)
    return {
        "writes": len(written),
        "servers": len(bases),
        "tenants": len(BURST_TENANTS),
        "subscribers": len(placed),
        "own": _quantiles(own),
        "relayed": _quantiles(relayed),
    }


def _quantiles(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")  # within the values
    return {
        "n": len(values),
        "p50_ms": statistics.median(values),
        "p99_ms": cuts[98],
        "max_ms": max(values),
    }


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


async def _create(http: httpx2.AsyncClient, tenant: str, name: str | None = None) -> str:
    person = {} if name is None else {"givenName": name}
    for attempt in range(5):  # a loaded engine may answer UNAVAILABLE: retryable
        response = await http.post(
            "/graphql",
            json={"query": CREATE, "variables": {"i": {"tenantID": tenant, "person": person}}},
        )
        data = response.json().get("data")
        if (data and data.get("createPerson")) or attempt == 4:
            break
        await asyncio.sleep(0.5)
    token: str = data["createPerson"]["person"]["changeToken"]
    return token


async def _until(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("realtime benchmark: an event did not arrive")
        await asyncio.sleep(0.002)


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
    burst, own = r["burst"], r["burst"]["own"]
    brelayed = burst["relayed"]
    print(
        f"realtime under a burst ({burst['writes']} writes, bursts of 20 across "
        f"{burst['servers']} servers and {burst['tenants']} tenants, {burst['subscribers']} "
        f"subscribers; the event after the write's response on the other servers): the "
        f"stream reader's own subscribers p50 {own['p50_ms']:.0f} / p99 {own['p99_ms']:.0f} / "
        f"max {own['max_ms']:.0f} ms, relayed p50 {brelayed['p50_ms']:.0f} / p99 "
        f"{brelayed['p99_ms']:.0f} / max {brelayed['max_ms']:.0f} ms "
        f"({brelayed['p50_ms'] / max(own['p50_ms'], 1.0):.2f}x the reader's own at p50, "
        f"{brelayed['p50_ms'] - own['p50_ms']:+.0f} ms)"
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
