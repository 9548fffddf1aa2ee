"""Raw WebSocket clients that misbehave, for tests and scripts/bench-hostile: one that
never sends connection_init and floods pings without reading, one that goes
silent after its ack; and how long a real client then waits for a slot."""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
from urllib.parse import urlparse

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.typing import Subprotocol

PROTOCOL = Subprotocol("graphql-transport-ws")


def masked_text(payload: bytes) -> bytes:
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    if len(payload) < 126:
        return bytes([0x81, 0x80 | len(payload)]) + mask + body
    return bytes([0x81, 0x80 | 126]) + len(payload).to_bytes(2, "big") + mask + body


def opened(url: str, receive_buffer: int = 4096) -> socket.socket:
    """A raw socket past the WebSocket handshake (the server's 101 read: the slot is
    taken, since admission precedes the accept)."""
    host, port = urlparse(url).hostname, urlparse(url).port
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)  # fills fast
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


def masked_ping() -> bytes:
    """A WebSocket ping frame (a control frame, answered by the server's WebSocket
    layer itself), empty, masked as a client's must be."""
    return bytes([0x89, 0x80]) + os.urandom(4)


def flooder(
    url: str,
    stop: threading.Event,
    pings: int | None = None,
    receive_buffer: int = 4096,
    frames: bool = False,
    go: threading.Event | None = None,
) -> socket.socket:
    """Opens a socket, never sends connection_init, floods pings (`pings` of them, then
    stays silent; None: until stopped), never reads. The pings are graphql-transport-ws
    `ping` messages, or with `frames` WebSocket ping frames; they start once `go` is
    set (None: at once)."""
    sock = opened(url, receive_buffer)
    ping = masked_ping() if frames else masked_text(json.dumps({"type": "ping"}).encode())

    def flood() -> None:
        if go is not None:
            go.wait()
        # Blocking sends (a partial send would cut a frame): when the server stops
        # reading, this blocks until the test closes the socket or the server drops it.
        sent = 0
        while not stop.is_set() and (pings is None or sent < pings):
            batch = 64 if pings is None else min(64, pings - sent)
            try:
                sock.sendall(ping * batch)
            except OSError:
                return
            sent += batch

    threading.Thread(target=flood, daemon=True).start()
    return sock


def server_end_open(url: str, client: socket.socket) -> bool:
    """Whether the server's end of `client`'s connection is still ESTABLISHED (Linux's
    /proc/net/tcp: local address the server's port, remote the client's)."""
    server_port = urlparse(url).port
    client_port = client.getsockname()[1]
    with open("/proc/net/tcp") as table:
        for row in table.read().splitlines()[1:]:
            local, remote, state = row.split()[1:4]
            if (
                int(local.split(":")[1], 16) == server_port
                and int(remote.split(":")[1], 16) == client_port
            ):
                return state == "01"  # TCP_ESTABLISHED
    return False


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/graphql"


def wait_for_a_slot(url: str, authorization: str, within_s: float) -> float:
    """Seconds until a real client (with `authorization`, a bearer header) is
    acknowledged; refused meanwhile with 1013 (busy), or timed out."""
    started = time.monotonic()
    while True:
        try:
            with connect(ws_url(url), subprotocols=[PROTOCOL], open_timeout=5) as ws:
                ws.send(
                    json.dumps(
                        {"type": "connection_init", "payload": {"Authorization": authorization}}
                    )
                )
                assert json.loads(ws.recv(timeout=5)) == {"type": "connection_ack"}
                return time.monotonic() - started
        except (ConnectionClosed, TimeoutError) as refused:
            if isinstance(refused, ConnectionClosed) and refused.rcvd is not None:
                assert refused.rcvd.code == 1013, refused  # busy; anything else is a bug
            assert time.monotonic() - started < within_s, "the silent socket kept its slot"
            time.sleep(0.5)
