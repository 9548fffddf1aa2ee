"""`changesAvailable` over graphql-transport-ws on one server process (in-process).

Across server processes and with the real `graphql-ws` client: the ecosystem
tests (tests/ecosystem/js/subscribe.mjs).
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from api.auth import make_local_token
from tests.support.gql import TEST_AUTH_SECRET, GraphQLClient, bearer

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SUBSCRIBE = (
    "subscription($t: ID!, $s: ID) { changesAvailable(tenantID: $t, since: $s) "
    "{ tenantID changeToken } }"
)


def _receive(ws: Any, timeout: float = 10.0) -> Any:
    """The next message, or a failure instead of a hang when none comes."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(ws.receive_json)
    pool.shutdown(wait=False)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"no message within {timeout} s") from None


def _connect(client: TestClient) -> Any:
    return client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"])


def _init(ws: Any, authorization: str | None) -> None:
    payload = {} if authorization is None else {"Authorization": authorization}
    ws.send_json({"type": "connection_init", "payload": payload})


def _subscribe(ws: Any, sub_id: str, tenant: str, since: str | None = None) -> None:
    ws.send_json(
        {
            "id": sub_id,
            "type": "subscribe",
            "payload": {"query": SUBSCRIBE, "variables": {"t": tenant, "s": since}},
        }
    )


def _acked(ws: Any, tenant: str) -> None:
    _init(ws, bearer([tenant])["Authorization"])
    assert _receive(ws) == {"type": "connection_ack"}


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer not-a-jwt", f"Bearer {make_local_token('wrong-secret-' * 4, 's', ['t'], 60)}"],
    ids=["no token", "not a token", "bad signature"],
)
def test_a_connection_without_a_valid_token_is_refused(
    app_client: TestClient, authorization: str | None
) -> None:
    with _connect(app_client) as ws:
        _init(ws, authorization)
        with pytest.raises(WebSocketDisconnect) as closed:
            _receive(ws)
    assert closed.value.code == 4403


def test_an_expired_token_is_refused_and_a_token_expiring_later_closes_the_socket(
    app_client: TestClient, tenant: str
) -> None:
    expired = make_local_token(TEST_AUTH_SECRET, "s", [tenant], 60, now=time.time() - 3600)
    with _connect(app_client) as ws:
        _init(ws, f"Bearer {expired}")
        with pytest.raises(WebSocketDisconnect) as refused:
            _receive(ws)
    assert refused.value.code == 4403
    # Valid for about two more seconds (exp plus the leeway of 10 s).
    short = make_local_token(TEST_AUTH_SECRET, "s", [tenant], 1, now=time.time() - 9)
    with _connect(app_client) as ws:
        _init(ws, f"Bearer {short}")
        assert _receive(ws) == {"type": "connection_ack"}
        started = time.monotonic()
        with pytest.raises(WebSocketDisconnect) as closed:
            _receive(ws)
    assert closed.value.code == 4403 and closed.value.reason == "token expired"
    assert time.monotonic() - started < 10


def test_a_socket_lives_exactly_as_long_as_http_accepts_its_token(
    app_client: TestClient, gql: GraphQLClient, tenant: str
) -> None:
    """One rule for both transports: a token is accepted until its exp plus
    JWT_LEEWAY_SECONDS (10 s), and a socket opened with it closes 4403 then, not at
    exp (a client refreshing at exp would otherwise lose its socket early)."""
    # exp was 7 s ago: HTTP still accepts it for 3 s.
    token = make_local_token(TEST_AUTH_SECRET, "s", [tenant], 1, now=time.time() - 8)
    with _connect(app_client) as ws:
        _init(ws, f"Bearer {token}")
        assert _receive(ws) == {"type": "connection_ack"}
        started = time.monotonic()
        accepted = app_client.post(
            "/graphql",
            json={
                "query": "query($t: ID!) { changes(tenantID: $t) { changeToken } }",
                "variables": {"t": tenant},
            },
            headers={"Authorization": f"Bearer {token}"},
        ).json()
        assert "errors" not in accepted, accepted
        ws.send_json({"type": "ping"})
        assert _receive(ws) == {"type": "pong"}  # still open while HTTP accepts the token
        with pytest.raises(WebSocketDisconnect) as closed:
            _receive(ws, timeout=10)
    waited = time.monotonic() - started
    assert closed.value.code == 4403 and closed.value.reason == "token expired"
    assert 1.5 < waited < 8, waited


def test_a_stale_since_gets_an_event_at_once_and_each_write_its_token(
    app_client: TestClient, gql: GraphQLClient, tenant: str
) -> None:
    first = gql.create(tenant, "Person", {"givenName": "Ann"})
    second = gql.create(tenant, "Person", {"givenName": "Bo"})
    with _connect(app_client) as ws:
        _acked(ws, tenant)
        _subscribe(ws, "stale", tenant, since=first["changeToken"])
        event = _receive(ws)
        assert event["id"] == "stale" and event["type"] == "next"
        assert event["payload"]["data"]["changesAvailable"] == {
            "tenantID": tenant,
            "changeToken": second["changeToken"],
        }
        # Up to date: nothing at once; the next write is the next event.
        _subscribe(ws, "current", tenant, since=second["changeToken"])
        third = gql.update(tenant, "Person", first["id"], first["changeToken"], {"givenName": "A"})
        events = {_receive(ws)["id"]: None for _ in range(2)}
        assert set(events) == {"stale", "current"}
    assert third["changeToken"] > second["changeToken"]


def test_the_event_carries_the_writes_token_and_null_since_means_any_change(
    app_client: TestClient, gql: GraphQLClient, tenant: str
) -> None:
    with _connect(app_client) as ws:
        _acked(ws, tenant)
        _subscribe(ws, "s1", tenant)  # an empty tenant: no event yet
        written = gql.create(tenant, "Reminder", {"title": "x"})
        event = _receive(ws)
        assert (
            event["payload"]["data"]["changesAvailable"]["changeToken"] == (written["changeToken"])
        )


def test_a_foreign_tenant_is_forbidden_on_that_subscription_only(
    app_client: TestClient, gql: GraphQLClient, tenant: str
) -> None:
    with _connect(app_client) as ws:
        _acked(ws, tenant)
        _subscribe(ws, "foreign", "someone-else")
        refused = _receive(ws)  # graphql-transport-ws: `error` ends that operation
        assert refused["id"] == "foreign" and refused["type"] == "error"
        assert refused["payload"][0]["extensions"]["code"] == "FORBIDDEN"
        _subscribe(ws, "mine", tenant)
        written = gql.create(tenant, "Person", {})
        event = _receive(ws)
        assert event["id"] == "mine"
        assert (
            event["payload"]["data"]["changesAvailable"]["changeToken"] == (written["changeToken"])
        )


def test_bad_arguments_and_too_many_subscriptions_are_coded_errors(
    app_client: TestClient, tenant: str
) -> None:
    with _connect(app_client) as ws:
        _acked(ws, tenant)
        _subscribe(ws, "bad", tenant, since="not-a-token")
        refused = _receive(ws)
        assert refused["type"] == "error"
        assert refused["payload"][0]["extensions"]["code"] == "BAD_USER_INPUT"
        for i in range(10):  # WS_MAX_SUBSCRIPTIONS_PER_CONNECTION
            _subscribe(ws, f"s{i}", tenant)
        _subscribe(ws, "one-too-many", tenant)
        error = _receive(ws)
        assert error["id"] == "one-too-many" and error["type"] == "error"
        ws.send_json({"type": "ping"})
        assert _receive(ws) == {"type": "pong"}


def _operation(ws: Any, op_id: str, query: str, variables: dict[str, Any]) -> Any:
    ws.send_json(
        {"id": op_id, "type": "subscribe", "payload": {"query": query, "variables": variables}}
    )
    result = _receive(ws)
    assert result["id"] == op_id, result
    if result["type"] == "next":
        assert _receive(ws) == {"id": op_id, "type": "complete"}
    return result


def test_each_operation_over_a_socket_has_its_own_budget_and_log_line(
    app_client: TestClient, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Queries and mutations over WebSocket are requests of their own: after a push
    of 100 a push of 1 still applies, eleven default pages are all served, and each
    operation writes its request log line (a 2,000-call read left no trace)."""
    push = "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }"
    creates = [{"createPerson": {"tenantID": tenant, "person": {}}} for _ in range(100)]
    page = "query($t: ID!) { changes(tenantID: $t) { changeToken } }"
    with caplog.at_level("INFO", logger="api.request"), _connect(app_client) as ws:
        _acked(ws, tenant)
        full = _operation(ws, "p1", push, {"i": {"tenantID": tenant, "mutations": creates}})
        assert full["type"] == "next" and "errors" not in full["payload"], full
        one = _operation(ws, "p2", push, {"i": {"tenantID": tenant, "mutations": creates[:1]}})
        assert "errors" not in one["payload"], one
        assert one["payload"]["data"]["pushChanges"]["results"] == [{"status": "APPLIED"}]
        for i in range(11):
            served = _operation(ws, f"q{i}", page, {"t": tenant})
            assert "errors" not in served["payload"], (i, served)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "api.request"]
    socket_lines = [line for line in lines if line["requestId"].startswith("ws-")]
    assert len(socket_lines) == 13, socket_lines
    assert {line["tenant"] for line in socket_lines} == {tenant}
    assert all(line["dynamodbCalls"] >= 1 for line in socket_lines)
