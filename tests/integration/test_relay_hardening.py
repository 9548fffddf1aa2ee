"""The relay between servers under someone who can see its traffic, and a server
given a `REALTIME_PEER_URL` that reaches another one (issue 37, findings 4 and 9).

Real servers on the session's table, as in `test_stream_readers.py`: the posts a
follower is sent are captured on the way in (`tests.support.relay_capture`) and
replayed byte for byte later.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from api.realtime.lease import LeaseItems
from api.settings import Settings
from tests.support.gql import bearer, post_data
from tests.support.relay_capture import captured, replay
from tests.support.servers import api_server, one_stream_reader
from tests.support.subscribers import SUBSCRIBE, ws_url

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)

CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }"
DELETE = "mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { done } }"
LEASE_S = 6


class _Watcher:
    """One subscription over a real socket: the tokens it was sent, and its errors."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.tokens: list[str] = []
        self.errors: list[str] = []
        self.task: asyncio.Task[None] | None = None

    async def listen(self) -> None:
        with contextlib.suppress(Exception):
            async for raw in self.socket:
                message = json.loads(raw)
                payload = message.get("payload")
                if message.get("type") == "next" and payload.get("errors"):
                    self.errors += [e["extensions"]["code"] for e in payload["errors"]]
                elif message.get("type") == "next":
                    self.tokens.append(payload["data"]["changesAvailable"]["changeToken"])
                elif message.get("type") == "error":
                    self.errors += [e.get("extensions", {}).get("code", "") for e in payload]

    def got(self, token: str) -> bool:
        return any(t >= token for t in self.tokens)


async def _watch(base: str, authorization: str, tenant: str) -> _Watcher:
    socket = await connect(ws_url(base), subprotocols=["graphql-transport-ws"])  # type: ignore[list-item]
    await socket.send(
        json.dumps({"type": "connection_init", "payload": {"Authorization": authorization}})
    )
    assert json.loads(await socket.recv())["type"] == "connection_ack"
    await socket.send(
        json.dumps(
            {
                "id": "s",
                "type": "subscribe",
                "payload": {"query": SUBSCRIBE, "variables": {"t": tenant, "s": None}},
            }
        )
    )
    watcher = _Watcher(socket)
    watcher.task = asyncio.create_task(watcher.listen())
    return watcher


async def _until(done: Callable[[], bool], what: str, within_s: float = 30) -> None:
    """Wait for evidence that `done()`; fail naming `what` when it does not come."""
    deadline = time.monotonic() + within_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        await asyncio.sleep(0.1)


def _write(base: str, tenant: str, entity_id: str, headers: dict[str, str]) -> str:
    created = post_data(
        base,
        CREATE,
        {"i": {"tenantID": tenant, "id": entity_id, "person": {"givenName": "x"}}},
        headers,
    )
    return str(created["createPerson"]["person"]["changeToken"])


@pytest.mark.slow
def test_replayed_relay_posts_change_nothing(settings: Settings) -> None:
    """Every post a follower was sent, replayed after the tenant was deleted and
    written again: none is taken (each is refused before any work), and the live
    subscription of the tenant written again is not ended by the old deletion."""
    tenant = f"replay-{time.monotonic_ns()}"
    headers = bearer([tenant])
    env = {"REALTIME_LEASE_S": str(LEASE_S)}
    with contextlib.ExitStack() as stack:
        bases = [
            stack.enter_context(
                api_server(
                    settings,
                    extra_env=env,
                    app="tests.support.relay_capture:create_app",
                    relayed=True,
                )
            )
            for _ in range(2)
        ]
        _write(bases[0], tenant, "first", headers)

        async def run() -> tuple[list[int], _Watcher]:
            old = {base: await _watch(base, headers["Authorization"], tenant) for base in bases}
            watchers = list(old.values())
            try:
                reader = await asyncio.to_thread(one_stream_reader, bases, LEASE_S * 3)
                follower = next(b for b in bases if b != reader)
                # A write on the reader reaches the follower through the relay.
                token = await asyncio.to_thread(_write, reader, tenant, "second", headers)
                await _until(lambda: old[follower].got(token), "the relayed write")
                # So does the deletion: the follower's subscription ends.
                deleted = await asyncio.to_thread(post_data, reader, DELETE, {"t": tenant}, headers)
                assert deleted["deleteTenant"]["done"] is True
                await _until(lambda: "TENANT_DELETED" in old[follower].errors, "the deletion")
                # The tenant is written again; a new subscription on the follower.
                again = await asyncio.to_thread(_write, reader, tenant, "again", headers)
                new = await _watch(follower, headers["Authorization"], tenant)
                watchers.append(new)
                await _until(lambda: new.got(again), "the new subscription's first event")
                posts = await asyncio.to_thread(captured, follower)
                assert any(b"~deleting" in body for _, body in posts), "no deletion captured"
                answers = [await asyncio.to_thread(replay, follower, post) for post in posts]
                # Replayed, the old deletion must not end the new subscription: the
                # next write reaches it.
                last = await asyncio.to_thread(_write, reader, tenant, "last", headers)
                await _until(
                    lambda: new.got(last) or bool(new.errors), "the write after the replays"
                )
                return answers, new
            finally:
                for watcher in watchers:
                    await watcher.socket.close()
                    assert watcher.task is not None
                    watcher.task.cancel()

        answers, new = asyncio.run(run())
        assert new.errors == [], f"the replayed deletion ended a live subscription: {new.errors}"
        assert answers and 204 not in answers, f"replayed posts were taken: {answers}"


def _logged(path: Path, *words: str) -> Callable[[], bool]:
    def found() -> bool:
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        return any(all(w in line for w in words) for line in lines)

    return found


@pytest.mark.slow
def test_a_server_whose_url_reaches_another_finds_out_and_reads_the_stream(
    settings: Settings, ddb: Any, tmp_path: Path
) -> None:
    """M is given A's URL as its own: it says so in its log and reads the stream
    itself, so its subscribers still get writes made on A. And the reader's log names
    the server a refused post was for, and the answer."""
    tenant = f"misrouted-{time.monotonic_ns()}"
    headers = bearer([tenant])
    env = {"REALTIME_LEASE_S": str(LEASE_S)}
    a_log, m_log = tmp_path / "a.log", tmp_path / "m.log"
    ghost = f"ghost{time.monotonic_ns()}"
    items = LeaseItems(ddb, settings.table_name)
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(api_server(settings, extra_env=env, relayed=True, log_file=a_log))
        m = stack.enter_context(
            api_server(
                settings,
                extra_env={**env, "REALTIME_PEER_URL": a},
                relayed=True,
                log_file=m_log,
            )
        )
        _write(a, tenant, "first", headers)

        async def run() -> None:
            watchers = [await _watch(a, headers["Authorization"], tenant)]
            try:
                await asyncio.to_thread(one_stream_reader, [a], LEASE_S * 3)
                watchers.append(await _watch(m, headers["Authorization"], tenant))
                await _until(
                    _logged(m_log, "REALTIME_PEER_URL", "reads the table's stream itself"),
                    "M saying its URL reaches another server",
                )
                token = await asyncio.to_thread(_write, a, tenant, "second", headers)
                await _until(lambda: watchers[1].got(token), "M's subscriber getting A's write")
                # A server item whose URL reaches A: the reader's posts to it are
                # refused (409), and its log says for whom and what it got.
                await asyncio.to_thread(items.announce, ghost, a, 1)
                await _until(_logged(a_log, ghost, "409"), "the reader naming the post's server")
            finally:
                for watcher in watchers:
                    await watcher.socket.close()
                    assert watcher.task is not None
                    watcher.task.cancel()
                items.leave(ghost)

        asyncio.run(run())
