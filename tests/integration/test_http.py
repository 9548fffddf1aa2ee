"""GraphQL over HTTP as clients expect it: media types, status codes, CORS, compression."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Iterator
from typing import Any

import brotli
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.graphiql import ASSETS
from api.settings import Settings
from tests.support.gql import ITEM_SELECTION, GraphQLClient, bearer

GRAPHQL_RESPONSE = "application/graphql-response+json"
CHANGES = (
    f"query($t: ID!) {{ changes(tenantID: $t, limit: 100) {{ items {{ {ITEM_SELECTION} }} }} }}"
)


@pytest.fixture(scope="module")
def cors_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(
        create_app(dataclasses.replace(settings, cors_origins=("https://app.example.com",)))
    ) as client:
        yield client


def _post(client: TestClient, tenant: str, query: str, accept: str, **kw: Any) -> Any:
    return client.post(
        "/graphql",
        json={"query": query, "variables": {"t": tenant}},
        headers={**bearer([tenant]), "accept": accept, **kw},
    )


def test_graphql_response_json_when_asked_for(app_client: TestClient, tenant: str) -> None:
    ok = _post(
        app_client, tenant, "query($t: ID!) { changes(tenantID: $t) { cursor } }", GRAPHQL_RESPONSE
    )
    assert ok.status_code == 200
    assert ok.headers["content-type"].startswith(GRAPHQL_RESPONSE)
    # A document that cannot be executed at all: 400 with this media type...
    bad = _post(app_client, tenant, "{ changes(", GRAPHQL_RESPONSE)
    assert bad.status_code == 400
    assert bad.headers["content-type"].startswith(GRAPHQL_RESPONSE)
    assert bad.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert "data" not in bad.json()  # never executed: no data at all, not even null
    invalid = _post(app_client, tenant, "{ nope }", GRAPHQL_RESPONSE)
    assert invalid.status_code == 400 and "data" not in invalid.json()
    # ...while a field error is still a GraphQL result: 200.
    forbidden = app_client.post(
        "/graphql",
        json={"query": '{ changes(tenantID: "not-mine") { cursor } }'},
        headers={**bearer([tenant]), "accept": GRAPHQL_RESPONSE},
    )
    assert forbidden.status_code == 200
    assert forbidden.json()["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    # Classic clients keep application/json and 200.
    classic = _post(app_client, tenant, "{ changes(", "application/json")
    assert classic.status_code == 200 and classic.headers["content-type"].startswith(
        "application/json"
    )
    assert classic.json()["data"] is None


def test_malformed_requests_get_4xx(app_client: TestClient, tenant: str) -> None:
    assert (
        app_client.post(
            "/graphql", content=b"{", headers={"content-type": "application/json"}
        ).status_code
        == 400
    )
    assert (
        app_client.post("/graphql", json={"variables": {}}, headers=bearer([tenant])).status_code
        == 400
    )  # no query
    response = app_client.get("/graphql", params={"query": "mutation { __typename }"})
    assert response.status_code in (400, 405)
    assert app_client.put("/graphql", json={"query": "{ __typename }"}).status_code == 405


def test_queries_over_get(app_client: TestClient, tenant: str) -> None:
    response = app_client.get(
        "/graphql",
        params={
            "query": "query($t: ID!) { changes(tenantID: $t) { cursor } }",
            "variables": json.dumps({"t": tenant}),
        },
        headers=bearer([tenant]),
    )
    assert response.status_code == 200 and "errors" not in response.json()


def test_cors_for_allowed_origins_only(cors_client: TestClient, app_client: TestClient) -> None:
    preflight = cors_client.options(
        "/graphql",
        headers={
            "origin": "https://app.example.com",
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example.com"
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    # A browser app's writes name its device (silent pushes skip it: docs/realtime.md).
    device = cors_client.options(
        "/graphql",
        headers={
            "origin": "https://app.example.com",
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type, x-device-id",
        },
    )
    assert device.status_code == 200, device.text
    denied = cors_client.options(
        "/graphql",
        headers={"origin": "https://evil.example.com", "access-control-request-method": "POST"},
    )
    assert "access-control-allow-origin" not in denied.headers
    response = cors_client.post(
        "/graphql", json={"query": "{ __typename }"}, headers={"origin": "https://app.example.com"}
    )
    assert response.headers["access-control-allow-origin"] == "https://app.example.com"
    # Without CORS_ORIGINS, no browser origin is allowed.
    plain = app_client.post(
        "/graphql", json={"query": "{ __typename }"}, headers={"origin": "https://app.example.com"}
    )
    assert "access-control-allow-origin" not in plain.headers


def test_a_100_item_page_is_compressed(
    app_client: TestClient, gql: GraphQLClient, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = [
        {
            "createPerson": {
                "tenantID": tenant,
                "person": {
                    "givenName": f"Alexandra {i}",
                    "familyName": "Montgomery-Smith",
                    "dateOfBirth": "1984-03-12",
                    "relationship": "SIBLING",
                    "phoneNumber": "+1 415 555 0100",
                    "emailAddress": f"alexandra{i}@example.com",
                    "profileColor": "#3366CC",
                    "occupation": "Architect and urban planner",
                },
            }
        }
        for i in range(100)
    ]
    gql.execute(
        "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }",
        {"i": {"tenantID": tenant, "mutations": entries}},
    )
    sizes = {}
    for encoding in ("identity", "gzip", "br"):
        with app_client.stream(
            "POST",
            "/graphql",
            json={"query": CHANGES, "variables": {"t": tenant}},
            headers={**bearer([tenant]), "accept-encoding": encoding},
        ) as r:
            raw = b"".join(r.iter_raw())
            assert r.headers.get("content-encoding", "identity") == encoding
        body = {"identity": lambda b: b, "gzip": gzip.decompress, "br": brotli.decompress}[
            encoding
        ](raw)
        assert len(json.loads(body)["data"]["changes"]["items"]) == 100
        sizes[encoding] = len(raw)
    with capsys.disabled():
        print(
            f"\n100-item page: {sizes['identity']} bytes, gzip {sizes['gzip']} "
            f"({sizes['gzip'] / sizes['identity']:.0%}), brotli {sizes['br']} "
            f"({sizes['br'] / sizes['identity']:.0%})"
        )
    assert sizes["gzip"] < sizes["identity"] / 4 and sizes["br"] < sizes["identity"] / 4
    # Small answers are not worth compressing.
    small = app_client.post(
        "/graphql", json={"query": "{ __typename }"}, headers={"accept-encoding": "gzip"}
    )
    assert "content-encoding" not in small.headers


def test_graphiql_is_served_by_the_api_itself(app_client: TestClient, settings: Settings) -> None:
    page = app_client.get("/graphql", headers={"accept": "text/html"})
    assert page.status_code == 200
    html = page.text
    assert "https://" not in html and "http://" not in html  # nothing from a CDN
    assert "changes(tenantID" in html and "Authorization" in html
    for name in ASSETS:
        assert f"/graphiql/assets/{name}" in html
        asset = app_client.get(f"/graphiql/assets/{name}")
        assert asset.status_code == 200 and len(asset.content) > 1000, name
    assert app_client.get("/graphiql/assets/../../pyproject.toml").status_code == 404
    with TestClient(create_app(dataclasses.replace(settings, graphiql=False))) as off:
        assert off.get("/graphql", headers={"accept": "text/html"}).status_code == 404
        assert off.get("/graphiql/assets/graphiql.js").status_code == 404
