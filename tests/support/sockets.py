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


def opened(url: str) -> socket.socket:
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


def flooder(url: str, stop: threading.Event) -> socket.socket:
    """Opens a socket, never sends connection_init, floods pings, never reads."""
    sock = opened(url)
    ping = masked_text(json.dumps({"type": "ping"}).encode())

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
