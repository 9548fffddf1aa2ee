"""What a client that sends the wrong thing over graphql-transport-ws (or a
subscription over HTTP) gets: a coded answer, the documented close code, and no
traceback in the log (issue 25, point 9)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from api.app import create_app
from api.domain.tokens import next_token
from api.settings import Settings
from tests.integration.test_realtime import SUBSCRIBE, _acked, _connect, _receive, _subscribe
from tests.support.gql import GraphQLClient, bearer

MALFORMED: dict[str, Any] = {
    "a list": [],
    "a number": 5,
    "no type": {"id": "1"},
    "a complete whose id is an object": {"type": "complete", "id": {"a": 1}},
    "a subscribe whose payload is a list": {"type": "subscribe", "id": "x", "payload": []},
    "a subscribe without a query": {"type": "subscribe", "id": "x", "payload": {}},
    "variables that are a list": {
        "type": "subscribe",
        "id": "x",
        "payload": {"query": SUBSCRIBE, "variables": [1]},
    },
    "a ping whose payload is a string": {"type": "ping", "payload": "x"},
}


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info]


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_message_closes_the_socket_4400_without_a_traceback(
    app_client: TestClient, tenant: str, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO), _connect(app_client) as ws:
        _acked(ws, tenant)
        ws.send_text(json.dumps(MALFORMED[case]))
        with pytest.raises(WebSocketDisconnect) as closed:
            _receive(ws)
    assert closed.value.code == 4400, closed.value
    assert _tracebacks(caplog) == []


@pytest.mark.parametrize("authenticated", [True, False])
def test_a_subscription_over_http_is_a_coded_400(
    app_client: TestClient, tenant: str, authenticated: bool, caplog: pytest.LogCaptureFixture
) -> None:
    response = app_client.post(
        "/graphql",
        json={"query": SUBSCRIBE, "variables": {"t": tenant, "s": None}},
        headers=bearer([tenant]) if authenticated else {},
    )
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "WebSocket" in error["message"]
    assert _tracebacks(caplog) == []


def test_a_since_from_the_future_is_refused_over_http_and_websocket_alike(
    app_client: TestClient, gql: GraphQLClient, tenant: str
) -> None:
    gql.create(tenant, "Person", {"givenName": "Ann"})
    future = next_token(4_102_444_800_000, None)  # the year 2100
    body = gql.execute(
        "query($t: ID!, $s: ID) { changes(tenantID: $t, since: $s) { cursor } }",
        {"t": tenant, "s": future},
    )
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    with _connect(app_client) as ws:
        _acked(ws, tenant)
        _subscribe(ws, "s", tenant, since=future)
        message = _receive(ws)
    errors = message["payload"] if message["type"] == "error" else message["payload"]["errors"]
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT", message


def test_an_operation_over_the_sockets_limit_gets_a_coded_error(
    app_client: TestClient, tenant: str
) -> None:
    with _connect(app_client) as ws:
        _acked(ws, tenant)
        for i in range(11):  # WS_MAX_SUBSCRIPTIONS_PER_CONNECTION is 10
            _subscribe(ws, f"s{i}", tenant)
        refused: list[dict[str, Any]] = []
        while not refused:
            message = _receive(ws)
            if message["type"] == "error":
                refused.append(message)
    assert refused[0]["id"] == "s10"
    assert refused[0]["payload"][0]["extensions"]["code"] == "BAD_USER_INPUT"


def test_one_user_cannot_take_every_socket_or_subscription_of_a_server(
    settings: Settings,
) -> None:
    """Shares per user (WS_MAX_CONNECTIONS_PER_USER, WS_MAX_SUBSCRIPTIONS_PER_USER)
    beside the process's limits: a user over theirs is refused, another is not."""
    shares = dataclasses.replace(
        settings, ws_max_connections_per_user=2, ws_max_subscriptions_per_user=3
    )
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    greedy = bearer([tenant], sub="greedy")["Authorization"]
    other = bearer([tenant], sub="other")["Authorization"]
    with TestClient(create_app(shares)) as client, contextlib.ExitStack() as sockets:
        held = [sockets.enter_context(_connect(client)) for _ in range(2)]
        for ws in held:
            ws.send_json({"type": "connection_init", "payload": {"Authorization": greedy}})
            assert _receive(ws) == {"type": "connection_ack"}
        with _connect(client) as third:
            third.send_json({"type": "connection_init", "payload": {"Authorization": greedy}})
            with pytest.raises(WebSocketDisconnect) as refused:
                _receive(third)
        assert refused.value.code == 4403
        # Three subscriptions over the user's two sockets; the fourth is refused. Each
        # is seen live (its first event: the tenant has a change) before the next is
        # sent: a subscribe first reads the caller's access (contract 6), so several
        # sent at once reach the user's share in any order.
        GraphQLClient(client).create(tenant, "Person", {})
        for i, ws in enumerate([held[0], held[0], held[1]]):
            _subscribe(ws, f"s{i}", tenant)
            assert _receive(ws)["payload"]["data"]["changesAvailable"]["tenantID"] == tenant
        _subscribe(held[1], "s3", tenant)
        refusal = _receive(held[1])  # an error of the event stream: `next`, then `complete`
        assert refusal["id"] == "s3"
        assert refusal["payload"]["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
        assert _receive(held[1]) == {"id": "s3", "type": "complete"}
        # Another user is untouched by the first one's shares.
        with _connect(client) as ws:
            ws.send_json({"type": "connection_init", "payload": {"Authorization": other}})
            assert _receive(ws) == {"type": "connection_ack"}
            _subscribe(ws, "mine", tenant)
            _subscribe(ws, "mine too", tenant)
            events = [_receive(ws), _receive(ws)]
            assert {e["id"] for e in events} == {"mine", "mine too"}
            assert all("errors" not in e["payload"] for e in events), events
            with pytest.raises(AssertionError):  # no error comes: both are live
                _receive(ws, timeout=1)
        # A socket closed gives its share back.
        held[0].close()
        with _connect(client) as again:
            again.send_json({"type": "connection_init", "payload": {"Authorization": greedy}})
            assert _receive(again) == {"type": "connection_ack"}


def test_a_page_on_an_origin_in_cors_origins_gets_a_socket_and_another_does_not(
    settings: Settings,
) -> None:
    """A browser's handshake carries its page's Origin: the origins CORS_ORIGINS lets
    call the API over HTTP open sockets too; others are refused before any message."""
    allowed = "http://app.example"
    app = create_app(dataclasses.replace(settings, cors_origins=(allowed,)))
    protocol = ["graphql-transport-ws"]
    with TestClient(app) as client:
        with client.websocket_connect(
            "/graphql", subprotocols=protocol, headers={"origin": allowed}
        ) as ws:
            ws.send_json({"type": "connection_init", "payload": bearer(["t-origin"])})
            assert ws.receive_json()["type"] == "connection_ack"
        refused = (WebSocketDisconnect, WebSocketDenialResponse)
        with (
            pytest.raises(refused),
            client.websocket_connect(
                "/graphql", subprotocols=protocol, headers={"origin": "http://evil.example"}
            ),
        ):
            pass
