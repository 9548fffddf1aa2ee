"""The realtime burst row of `scripts/bench`: six servers on one table, writes on four
of them as soon as every server has joined, the event after each write's response
on every other server's subscribers of its tenant, by how that server hears of it.

The servers (docs/realtime.md, "Any number of servers"): A, B, C and D each with its
own `REALTIME_PEER_URL`; E whose URL passes through a plain TCP proxy
(`tests.support.tcp_proxy`); M whose URL wrongly names C's port, so that it finds
out and reads the stream itself. Each holds 3 subscribers: the two shared tenants
and one of its own. One of A to E holds the lease and reads the stream. A, B, C and
D each write to the shared tenants and the others' own ones, concurrently, 0 to
150 ms apart. A's subscribers come first, so A joins the lease alone and reads
the stream; just after one of its heartbeats the others get their subscribers (a
server joins the lease at its first subscription) and the writes start as they
do: servers joining a cluster under way, as when it scales out.

Groups: the reader's own subscribers (the stream), the relayed ones (A to D but the
reader, posted to), E's (posted to through the proxy), M's (reads the stream
itself). Each group's p50, p99 and max, and when each tenant's last token reached
its last subscriber.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import time
from typing import Any

import httpx2

from api.realtime.lease import LeaseItems
from api.settings import Settings
from tests.support.servers import api_server, one_stream_reader, stream_readers
from tests.support.subscribers import ONE_USER_FLEET, Subscriber, close_all, subscribe_many, ws_url
from tests.support.tcp_proxy import TcpProxy

CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }"
SERVERS = ("A", "B", "C", "D", "E", "M")
WRITERS = ("A", "B", "C", "D")
SHARED = ["burst-shared0", "burst-shared1"]
OWN = {name: f"burst-{name.lower()}" for name in SERVERS}
BURST_TENANTS = [*SHARED, *OWN.values()]
# Writes per writer, by mode (the finding: 25, 100 in all).
WRITES = {"smoke": 5, "fast": 25, "full": 25}
GAP_S = (0.0, 0.15)
GROUPS = ("reader's own", "relayed", "through a TCP proxy", "reads the stream itself")


async def measure_burst(settings: Settings, authorization: str, writes: int) -> dict[str, Any]:
    """Six servers started for it, the burst, its figures (`print_burst`)."""
    with contextlib.ExitStack() as stack:
        proxy = stack.enter_context(TcpProxy())
        bases: dict[str, str] = {}
        for name in SERVERS:
            env = dict(ONE_USER_FLEET)
            if name == "E":
                env["REALTIME_PEER_URL"] = proxy.url
            elif name == "M":
                env["REALTIME_PEER_URL"] = bases["C"]  # wrongly: C's
            bases[name] = stack.enter_context(api_server(settings, extra_env=env, relayed=True))
            if name == "E":  # E probes its URL until it answers (30 s): it does now
                proxy.target = ("127.0.0.1", int(bases["E"].rsplit(":", 1)[1]))
        lease = LeaseItems(settings.dynamodb_client(), settings.table_name)
        return await _burst(bases, lease, authorization, writes)


async def _burst(
    bases: dict[str, str], lease: LeaseItems, authorization: str, writes: int
) -> dict[str, Any]:
    placed = [(name, tenant) for name in SERVERS for tenant in (*SHARED, OWN[name])]
    async with contextlib.AsyncExitStack() as clients:
        https = {
            name: await clients.enter_async_context(
                httpx2.AsyncClient(
                    base_url=base, headers={"Authorization": authorization}, timeout=30
                )
            )
            for name, base in bases.items()
        }
        heads = {t: await create_person(https["A"], t) for t in BURST_TENANTS}

        async def subscribe(name: str, tenant: str) -> tuple[list[Subscriber], Any]:
            return await subscribe_many(
                ws_url(bases[name]), authorization, tenant, heads[tenant], 1
            )

        # A's subscribers first: A joins the lease alone and takes it.
        joined = [await subscribe(name, tenant) for name, tenant in placed if name == "A"]
        try:
            await asyncio.to_thread(one_stream_reader, [bases["A"]], 60)
            reader = "A"
            # Just after one of its heartbeats (the lease's counter moves), the others
            # join, and the writes start as they do.
            _, counter = await asyncio.to_thread(lease.holder)
            while (await asyncio.to_thread(lease.holder))[1] == counter:
                await asyncio.sleep(0.05)
            beat = time.monotonic()
            others = [subscribe(name, tenant) for name, tenant in placed if name != "A"]
            joined += await asyncio.gather(*others)  # at once, as clients reconnecting
            subscribers: list[Subscriber] = [s for (subs, _) in joined for s in subs]
            written: list[tuple[str, str, str, float]] = []  # writer, tenant, token, answered
            chooser = random.Random(59)

            async def writer(name: str) -> None:
                targets = [*SHARED, *(OWN[other] for other in SERVERS if other != name)]
                for _ in range(writes):
                    tenant = chooser.choice(targets)
                    token = await create_person(https[name], tenant)
                    written.append((name, tenant, token, time.monotonic()))
                    await asyncio.sleep(chooser.uniform(*GAP_S))

            load = os.getloadavg()[0]
            started_s = time.monotonic() - beat  # the others joined meanwhile
            await asyncio.gather(*(writer(name) for name in WRITERS))
            pending = [
                (s, token)
                for name, tenant, token, _ in written
                for s, (at, t) in zip(subscribers, placed, strict=True)
                if t == tenant and at != name
            ]
            await until(lambda: all(s.got(token) is not None for s, token in pending), 60)
            m_reads = await asyncio.to_thread(stream_readers, [bases["M"]])
        finally:
            for subs, tasks in joined:
                await close_all(subs, tasks)
    groups: dict[str, list[float]] = {group: [] for group in GROUPS}
    for name, tenant, token, answered in written:
        for s, (at, t) in zip(subscribers, placed, strict=True):
            if t != tenant or at == name:
                continue  # another tenant's, or woken by its own server's commit
            got = s.got(token)
            assert got is not None
            groups[_group(at, reader)].append(max(0.0, got - answered) * 1000)
    # Each tenant's last write: when its token had reached every other server's subscribers.
    last_ms = 0.0
    for tenant in BURST_TENANTS:
        its = [w for w in written if w[1] == tenant]
        if not its:
            continue
        name, _, token, answered = max(its, key=lambda w: w[3])
        for s, (at, t) in zip(subscribers, placed, strict=True):
            got = s.got(token)
            if t == tenant and at != name and got is not None:
                last_ms = max(last_ms, (got - answered) * 1000)
    return {
        "writes": len(written),
        "servers": len(bases),
        "tenants": len(BURST_TENANTS),
        "subscribers": len(placed),
        "reader": reader,
        "m_reads_stream": m_reads == [bases["M"]],
        "load_average": [load, os.getloadavg()[0]],
        "groups": {group: _quantiles(values) for group, values in groups.items() if values},
        "last_token_max_ms": last_ms,
        "writes_after_heartbeat_s": started_s,
    }


def _group(server: str, reader: str) -> str:
    if server == reader:
        return GROUPS[0]
    return {"E": GROUPS[2], "M": GROUPS[3]}.get(server, GROUPS[1])


def _quantiles(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else values
    return {
        "n": len(values),
        "p50_ms": statistics.median(values),
        "p99_ms": cuts[98] if len(values) > 1 else values[0],
        "max_ms": max(values),
    }


async def create_person(http: httpx2.AsyncClient, tenant: str) -> str:
    """An empty person created in `tenant`: its change token (the realtime rows' writes)."""
    for attempt in range(5):  # a loaded engine may answer UNAVAILABLE: retryable
        response = await http.post(
            "/graphql",
            json={"query": CREATE, "variables": {"i": {"tenantID": tenant, "person": {}}}},
        )
        data = response.json().get("data")
        if (data and data.get("createPerson")) or attempt == 4:
            break
        await asyncio.sleep(0.5)
    token: str = data["createPerson"]["person"]["changeToken"]
    return token


async def until(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("realtime benchmark: an event did not arrive")
        await asyncio.sleep(0.002)


def print_burst(burst: dict[str, Any]) -> None:
    load = burst["load_average"]
    print(
        f"realtime under a burst ({burst['writes']} writes by 4 of {burst['servers']} servers, "
        f"0-150 ms apart, from when 5 of them join; {burst['tenants']} tenants, "
        f"{burst['subscribers']} subscribers; the event after the write's response on the "
        f"other servers; load average {load[0]:.1f} / {load[1]:.1f}):"
    )
    for group, q in burst["groups"].items():
        print(
            f"  {group:24} n={q['n']:4.0f}  p50 {q['p50_ms']:5.0f}  p99 {q['p99_ms']:5.0f}  "
            f"max {q['max_ms']:5.0f} ms"
        )
    print(
        f"  each tenant's last token everywhere within {burst['last_token_max_ms']:.0f} ms; the "
        f"writes began {burst['writes_after_heartbeat_s']:.1f} s after the reader's heartbeat "
        f"(its next: 5 s after)"
    )
