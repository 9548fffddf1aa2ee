"""The release an app declares (docs/evolution.md, "What an app declares") is read
by one parser for both transports: a whole number from 1, written in digits; anything
else is BAD_USER_INPUT on every field, over HTTP (X-Sync-Release) as over a WebSocket
(`release` in connection_init's payload), never served as another release and never
an INTERNAL_SERVER_ERROR. Against a real uvicorn server: its own HTTP parser reads
the header, and the socket's payload arrives as the JSON text a client sent."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
from websockets.sync.client import connect

from api.settings import Settings
from tests.support.gql import bearer
from tests.support.servers import api_server
from tests.support.sockets import PROTOCOL, ws_url

pytestmark = pytest.mark.slow  # a server process of its own, and sockets

QUERY = 'query { changes(tenantID: "%s", limit: 1) { changeToken } }'
# What the header's text may not be (sent byte for byte: the padded ones too).
REFUSED_OVER_HTTP = ["+2", " 2 ", "0002", "1_0", "2.0", "0", "-1", "two", "1 0", "\t2\t", "2 "]
# connection_init's `release`, as JSON text.
REFUSED_OVER_A_SOCKET = [
    "2.5",
    "2.0",
    "1e400",
    "-Infinity",
    "Infinity",
    "NaN",
    "0",
    "true",
    '"+2"',
    '"1_0"',
    "null",
    "[2]",
]


@pytest.fixture(scope="module")
def server(settings: Settings) -> Iterator[str]:
    with api_server(settings) as url:
        yield url


def _over_http(url: str, tenant: str, release: str) -> dict[str, Any]:
    """The answer to a `changes` query whose X-Sync-Release is `release`, sent byte for
    byte (an HTTP client library refuses or trims some of these values)."""
    parsed = urlparse(url)
    body = json.dumps({"query": QUERY % tenant}).encode()
    head = (
        f"POST /graphql HTTP/1.1\r\nHost: {parsed.netloc}\r\n"
        f"Authorization: {bearer([tenant])['Authorization']}\r\n"
        "Content-Type: application/json\r\nConnection: close\r\n"
        f"X-Sync-Release: {release}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((parsed.hostname, parsed.port), timeout=30) as sock:
        sock.sendall(head + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    _, _, payload = answer.partition(b"\r\n\r\n")
    result: dict[str, Any] = json.loads(payload)
    return result


def _over_a_socket(url: str, tenant: str, release: str) -> dict[str, Any]:
    """The payload of the `next` message answering a `changes` query on a socket whose
    connection_init declares `release` (JSON text, sent as written)."""
    authorization = json.dumps(bearer([tenant])["Authorization"])
    init = f'{{"type":"connection_init","payload":{{"Authorization":{authorization},'
    init += f'"release":{release}}}}}'
    with connect(ws_url(url), subprotocols=[PROTOCOL], open_timeout=30) as ws:
        ws.send(init)
        assert json.loads(ws.recv(timeout=30)) == {"type": "connection_ack"}
        subscribe = {"id": "1", "type": "subscribe", "payload": {"query": QUERY % tenant}}
        ws.send(json.dumps(subscribe))
        message = json.loads(ws.recv(timeout=30))
    assert message["type"] == "next", message
    payload: dict[str, Any] = message["payload"]
    return payload


def _codes(answer: dict[str, Any]) -> list[str]:
    return [e.get("extensions", {}).get("code") for e in answer.get("errors", [])]


@pytest.mark.parametrize("release", REFUSED_OVER_HTTP)
def test_a_release_header_that_is_not_a_whole_number_in_digits_is_bad_user_input(
    server: str, tenant: str, release: str
) -> None:
    answer = _over_http(server, tenant, release)
    assert _codes(answer) == ["BAD_USER_INPUT"], answer
    assert answer.get("data") is None, answer


@pytest.mark.parametrize("release", REFUSED_OVER_A_SOCKET)
def test_a_socket_release_that_is_not_a_whole_number_is_bad_user_input(
    server: str, tenant: str, release: str
) -> None:
    answer = _over_a_socket(server, tenant, release)
    assert _codes(answer) == ["BAD_USER_INPUT"], answer
    assert answer.get("data") is None, answer


@pytest.mark.parametrize("release", ["1", "2", "10"])
def test_a_whole_number_is_a_release_over_both_transports(
    server: str, tenant: str, release: str
) -> None:
    """A later release than the server's is served too (an app during a rollback)."""
    for answer in (_over_http(server, tenant, release), _over_a_socket(server, tenant, release)):
        assert "errors" not in answer, answer
        assert answer["data"]["changes"]["changeToken"] is None, answer
