"""Many `changesAvailable` subscribers over real WebSockets (the `websockets` client),
for the load test and the benchmark."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect

SUBSCRIBE = (
    "subscription($t: ID!, $s: ID) { changesAvailable(tenantID: $t, since: $s) "
    "{ tenantID changeToken } }"
)


@dataclass
class Subscriber:
    socket: ClientConnection
    events: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, token)

    async def listen(self) -> None:
        async for raw in self.socket:
            message = json.loads(raw)
            if message.get("type") == "next":
                token = message["payload"]["data"]["changesAvailable"]["changeToken"]
                self.events.append((time.monotonic(), token))

    def got(self, token: str) -> float | None:
        """When this subscriber received `token` (or a newer one), if it did."""
        return next((at for at, t in self.events if t >= token), None)


# `subscribe_many` connects every socket with one token, one user: a server it
# loads lifts the per-user shares (WS_MAX_*_PER_USER) to the process's limits.
ONE_USER_FLEET = {"WS_MAX_CONNECTIONS_PER_USER": "5000", "WS_MAX_SUBSCRIPTIONS_PER_USER": "10000"}


async def subscribe_many(
    ws_url: str, authorization: str, tenant: str, since: str | None, count: int
) -> tuple[list[Subscriber], list[asyncio.Task[None]]]:
    """`count` connections, each with one subscription; returns when all are acked."""

    async def one(i: int) -> Subscriber:
        socket = await connect(ws_url, subprotocols=["graphql-transport-ws"])  # type: ignore[list-item]
        await socket.send(
            json.dumps({"type": "connection_init", "payload": {"Authorization": authorization}})
        )
        ack = json.loads(await socket.recv())
        assert ack["type"] == "connection_ack", ack
        await socket.send(
            json.dumps(
                {
                    "id": f"s{i}",
                    "type": "subscribe",
                    "payload": {"query": SUBSCRIBE, "variables": {"t": tenant, "s": since}},
                }
            )
        )
        return Subscriber(socket)

    subscribers: list[Subscriber] = []
    for start in range(0, count, 100):  # at most 100 handshakes in flight
        subscribers += await asyncio.gather(
            *(one(i) for i in range(start, min(count, start + 100)))
        )
    tasks = [asyncio.create_task(s.listen()) for s in subscribers]
    return subscribers, tasks


async def close_all(subscribers: list[Subscriber], tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.gather(*(s.socket.close() for s in subscribers), return_exceptions=True)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def rss_kb(pid: int) -> int:
    """The resident memory of a process, in KB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def pid_listening(url: str) -> int | None:
    """The uvicorn process serving `url` (started by `tests.support.servers`)."""
    port = url.rsplit(":", 1)[1].split("/", 1)[0]
    for pid in Path("/proc").iterdir():
        if not pid.name.isdigit():
            continue
        try:
            cmdline = (pid / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"uvicorn" in b" ".join(cmdline) and port.encode() in cmdline:
            return int(pid.name)
    return None


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/graphql"
