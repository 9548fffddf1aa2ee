"""Hostile requests get a clear error, write nothing, and the server keeps serving."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from tests.support.gql import GraphQLClient, bearer

CHANGES = "query($t: ID!) { changes(tenantID: $t) { changeToken } }"


@pytest.fixture(scope="module")
def strict_client(settings: Settings) -> Iterator[TestClient]:
    """An app as production runs it: no introspection, no GraphiQL, tight limits."""
    strict = dataclasses.replace(
        settings,
        introspection=False,
        graphiql=False,
        max_body_bytes=64 * 1024,
        max_query_depth=1,
        max_aliases=5,
        max_query_tokens=400,
    )
    with TestClient(create_app(strict)) as client:
        yield client


def _post(client: TestClient, tenant: str, query: str, variables: Any = None) -> Any:
    return client.post(
        "/graphql",
        json={"query": query, "variables": variables or {"t": tenant}},
        headers=bearer([tenant]),
    )


def _assert_still_serving(client: TestClient, tenant: str) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    body = _post(client, tenant, CHANGES).json()
    assert "errors" not in body, body


def _code(response: Any) -> str:
    return str(response.json()["errors"][0]["extensions"]["code"])


def test_thousands_of_aliases_are_rejected(strict_client: TestClient, tenant: str) -> None:
    few = " ".join(f"a{i}: changes(tenantID: $t) {{ changeToken }}" for i in range(6))
    response = _post(strict_client, tenant, f"query($t: ID!) {{ {few} }}")
    assert _code(response) == "BAD_USER_INPUT" and "aliases" in response.text.lower()
    many = " ".join(f"a{i}: changes(tenantID: $t) {{ changeToken }}" for i in range(3000))
    response = _post(strict_client, tenant, f"query($t: ID!) {{ {many} }}")
    assert response.status_code in (200, 413)
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    _assert_still_serving(strict_client, tenant)


def test_deep_queries_are_rejected(strict_client: TestClient, tenant: str) -> None:
    deep = "query($t: ID!) { changes(tenantID: $t) { items { ... on Person { id } } } }"
    assert _code(_post(strict_client, tenant, deep)) == "BAD_USER_INPUT"
    nested = '{ changes(tenantID: "x", limit: ' + "[" * 2000 + "1" + "]" * 2000 + ") { cursor } }"
    assert _code(_post(strict_client, tenant, nested)) == "BAD_USER_INPUT"
    _assert_still_serving(strict_client, tenant)


def test_a_huge_body_is_413_and_writes_nothing(
    strict_client: TestClient, gql: GraphQLClient, tenant: str
) -> None:
    mutation = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }"
    variables = {"i": {"tenantID": tenant, "person": {"givenName": "x" * 100_000}}}
    response = _post(strict_client, tenant, mutation, variables)
    assert response.status_code == 413
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert response.headers["x-request-id"]

    # Without a Content-Length (chunked), the limit holds while reading.
    def chunks() -> Iterator[bytes]:
        payload = json.dumps({"query": mutation, "variables": variables}).encode()
        for start in range(0, len(payload), 8192):
            yield payload[start : start + 8192]

    response = strict_client.post(
        "/graphql",
        content=chunks(),
        headers={**bearer([tenant]), "content-type": "application/json"},
    )
    assert response.status_code == 413
    assert gql.sync(tenant).items == []
    _assert_still_serving(strict_client, tenant)


def test_huge_strings_and_wrong_types_are_bad_input_and_write_nothing(
    strict_client: TestClient, gql: GraphQLClient, tenant: str
) -> None:
    mutation = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }"
    cases = [
        {"givenName": "x" * 20_000},
        {"givenName": 12},
        {"givenName": ["a"]},
        {"dateOfBirth": True},
        {"relationship": "BOSS"},
        {"profileColor": "#12345G"},
        {"unknownField": "x"},
    ]
    for person in cases:
        response = _post(
            strict_client, tenant, mutation, {"i": {"tenantID": tenant, "person": person}}
        )
        assert response.status_code == 200
        assert _code(response) == "BAD_USER_INPUT", (person, response.text)
    assert _code(_post(strict_client, tenant, CHANGES, {"t": {"a": 1}})) == "BAD_USER_INPUT"
    assert _code(_post(strict_client, tenant, CHANGES, {"t": None})) == "BAD_USER_INPUT"
    assert gql.sync(tenant).items == []
    _assert_still_serving(strict_client, tenant)


def test_malformed_http_requests(strict_client: TestClient, tenant: str) -> None:
    headers = {**bearer([tenant]), "content-type": "application/json"}
    nested = '{"query": "{ __typename }", "variables": {"x": ' + "[" * 20_000 + "]" * 20_000 + "}}"
    for content in (b"not json", b"\xff\xfe\xfa", nested.encode(), b"[1, 2"):
        response = strict_client.post("/graphql", content=content, headers=headers)
        assert response.status_code == 400, (content[:20], response.text)
    batch = [{"query": CHANGES, "variables": {"t": tenant}}] * 2
    response = strict_client.post("/graphql", json=batch, headers=bearer([tenant]))
    assert response.status_code == 400  # batching is off: one operation per request
    response = strict_client.get(
        "/graphql",
        params={
            "query": f'mutation {{ createPerson(input: {{tenantID: "{tenant}", person: {{}}}}) '
            "{ person { id } } }"
        },
        headers=bearer([tenant]),
    )
    assert response.status_code in (400, 405)
    _assert_still_serving(strict_client, tenant)


def test_introspection_and_graphiql_can_be_switched_off(
    strict_client: TestClient, app_client: TestClient, tenant: str
) -> None:
    query = "{ __schema { queryType { name } } }"
    assert _code(_post(strict_client, tenant, query)) == "BAD_USER_INPUT"
    assert strict_client.get("/graphql", headers={"accept": "text/html"}).status_code == 404
    # The development defaults keep both.
    assert "errors" not in _post(app_client, tenant, query).json()
    assert "graphiql" in app_client.get("/graphql", headers={"accept": "text/html"}).text.lower()


def test_no_response_carries_a_stack_trace_or_internals(
    strict_client: TestClient, tenant: str
) -> None:
    responses = [
        _post(strict_client, tenant, "{ nope }"),
        _post(strict_client, tenant, CHANGES, {"t": "x" * 500}),
        _post(
            strict_client,
            tenant,
            'query($t: ID!) { changes(tenantID: $t, cursor: "zz") { cursor } }',
        ),
        strict_client.post("/graphql", content=b"{", headers={"content-type": "application/json"}),
    ]
    for response in responses:
        for leak in ("Traceback", 'File "', "botocore", "pynamodb", "sync-test", "T#"):
            assert leak not in response.text, (leak, response.text)


def test_one_json_log_line_per_request_without_secrets(
    app_client: TestClient, gql: GraphQLClient, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "SecretGivenName"})
    headers = bearer([tenant], sub="alice")
    token = headers["Authorization"].split()[1]
    caplog.set_level(logging.INFO)
    caplog.clear()
    response = app_client.post(
        "/graphql",
        json={
            "query": "mutation Rename($i: UpdatePersonInput!) { updatePerson(input: $i) "
            "{ person { id } } }",
            "variables": {
                "i": {
                    "tenantID": tenant,
                    "id": person["id"],
                    "changeToken": person["changeToken"],
                    "changes": {"givenName": "AnotherSecret"},
                }
            },
        },
        headers={**headers, "x-request-id": "req-123"},
    )
    assert response.headers["x-request-id"] == "req-123"
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "api.request"]
    assert len(lines) == 1
    line = lines[0]
    assert line["requestId"] == "req-123" and line["operation"] == "Rename"
    assert line["sub"] == "alice" and line["tenant"] == tenant
    assert line["status"] == 200 and line["result"] == "OK"
    assert line["durationMs"] > 0
    assert line["capacityUnits"] > 0  # the GetItem and the transaction were counted
    # The transaction's share: 2 units per KB of each item it writes (AWS's rule).
    assert 0 < line["writeUnits"] < line["capacityUnits"]
    everything = caplog.text
    for secret in (token, "SecretGivenName", "AnotherSecret"):
        assert secret not in everything

    # An expected error is one line, not a traceback; a hostile request id is replaced.
    caplog.clear()
    response = app_client.post(
        "/graphql",
        json={"query": CHANGES, "variables": {"t": tenant + "-not-mine"}},
        headers={**headers, "x-request-id": "bad id\n{injected}"},
    )
    assert response.json()["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    assert response.headers["x-request-id"] != "bad id\n{injected}"
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "api.request"]
    assert [line["result"] for line in lines] == ["FORBIDDEN"]
    assert all(r.exc_info is None for r in caplog.records)
    assert "Traceback" not in caplog.text
