"""A socket slot cannot be held without a token: a client that opens a socket, never
sends connection_init, floods pings and never reads is dropped by the ack deadline,
and its slot goes to the next client. A socket over the process's limit is refused
with the documented 1013, not an HTTP 403. Against a real uvicorn server (real
socket buffers; the in-process client has none)."""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
from urllib.parse import urlparse

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from api.app import WS_ACK_DEADLINE_S
from api.settings import Settings
from tests.support.gql import bearer
from tests.support.servers import api_server

PROTOCOL = Subprotocol("graphql-transport-ws")


def _masked_text(payload: bytes) -> bytes:
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    if len(payload) < 126:
        return bytes([0x81, 0x80 | len(payload)]) + mask + body
    return bytes([0x81, 0x80 | 126]) + len(payload).to_bytes(2, "big") + mask + body


def _opened(url: str) -> socket.socket:
    """A raw socket past the WebSocket handshake (the server's 101 read: the slot is
    taken, since admission precedes the accept)."""
    host, port = urlparse(url).hostname, urlparse(url).port
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills fast
    sock.connect((host, port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /graphql HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n"
        ).encode()
    )
    sock.settimeout(10)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(1024)
        assert chunk, "the server closed the socket before its handshake"
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 101"), answer[:80]
    sock.settimeout(None)
    return sock


def _flooder(url: str, stop: threading.Event) -> socket.socket:
    """Opens a socket, never sends connection_init, floods pings, never reads."""
    sock = _opened(url)
    ping = _masked_text(json.dumps({"type": "ping"}).encode())

    def flood() -> None:
        # Blocking sends (a partial send would cut a frame): when the server stops
        # reading, this blocks until the test closes the socket or the server drops it.
        while not stop.is_set():
            try:
                sock.sendall(ping * 64)
            except OSError:
                return

    threading.Thread(target=flood, daemon=True).start()
    return sock


def _ws(url: str) -> str:
    return url.replace("http://", "ws://") + "/graphql"


@pytest.mark.slow
def test_a_silent_flooding_socket_that_never_reads_loses_its_slot(
    settings: Settings, tenant: str
) -> None:
    with api_server(settings, extra_env={"WS_MAX_CONNECTIONS": "1"}) as url:
        stop = threading.Event()
        flooder = _flooder(url, stop)
        try:
            # The slot is taken: refused with 1013 (try again later), not HTTP 403.
            with (
                pytest.raises((ConnectionClosed, InvalidStatus)) as refused,
                connect(_ws(url), subprotocols=[PROTOCOL], open_timeout=5) as ws,
            ):
                ws.recv(timeout=5)
            assert isinstance(refused.value, ConnectionClosed), refused.value
            assert refused.value.rcvd is not None and refused.value.rcvd.code == 1013
            # After the ack deadline the flooder is gone and a real client gets in.
            deadline = time.monotonic() + WS_ACK_DEADLINE_S + 15
            while True:
                try:
                    with connect(_ws(url), subprotocols=[PROTOCOL], open_timeout=5) as ws:
                        payload = {"Authorization": bearer([tenant])["Authorization"]}
                        ws.send(json.dumps({"type": "connection_init", "payload": payload}))
                        assert json.loads(ws.recv(timeout=5)) == {"type": "connection_ack"}
                        break
                except (ConnectionClosed, TimeoutError):  # refused (1013), or busy: again
                    assert time.monotonic() < deadline, "the flooder kept its slot"
                    time.sleep(1)
        finally:
            stop.set()
            flooder.close()


def _wait_for_the_slot(url: str, tenant: str, within_s: float) -> float:
    """Seconds until a real client is acknowledged (refused 1013 meanwhile)."""
    started = time.monotonic()
    while True:
        try:
            with connect(_ws(url), subprotocols=[PROTOCOL], open_timeout=5) as ws:
                payload = {"Authorization": bearer([tenant])["Authorization"]}
                ws.send(json.dumps({"type": "connection_init", "payload": payload}))
                assert json.loads(ws.recv(timeout=5)) == {"type": "connection_ack"}
                return time.monotonic() - started
        except (ConnectionClosed, TimeoutError):  # refused (1013), or busy: again
            assert time.monotonic() - started < within_s, "the silent socket kept its slot"
            time.sleep(0.5)


@pytest.mark.slow
def test_an_acknowledged_socket_that_stops_answering_pings_loses_its_slot(
    settings: Settings, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keepalive: a device acknowledged and subscribed that then goes silent (it
    neither reads nor answers the server's pings, as behind a dead network) is
    dropped once a ping goes unanswered, and its slot goes to the next client."""
    monkeypatch.setenv("TEST_UVICORN_ARGS", "--ws-ping-interval 1 --ws-ping-timeout 1")
    with api_server(settings, extra_env={"WS_MAX_CONNECTIONS": "1"}) as url:
        silent = _opened(url)
        try:
            payload = {"Authorization": bearer([tenant])["Authorization"]}
            silent.sendall(
                _masked_text(json.dumps({"type": "connection_init", "payload": payload}).encode())
            )
            silent.settimeout(5)
            assert b"connection_ack" in silent.recv(4096)
            subscribe = {
                "id": "s",
                "type": "subscribe",
                "payload": {
                    "query": "subscription($t: ID!) { changesAvailable(tenantID: $t) "
                    "{ changeToken } }",
                    "variables": {"t": tenant},
                },
            }
            silent.sendall(_masked_text(json.dumps(subscribe).encode()))
            # From now on it reads nothing and answers no ping.
            waited = _wait_for_the_slot(url, tenant, within_s=20)
        finally:
            silent.close()
    assert waited < 20
