"""Hostile input: no request may crash a write, block an outbox, or slow the server
for others. Each reproduction of the hostile-input issue, and variants."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from api import http as api_http
from api.app import create_app
from api.auth import Authenticator
from api.domain.cursor import CursorCodec
from api.domain.errors import Unavailable
from api.graphql import documents as documents_module
from api.graphql.context import Context
from api.graphql.documents import CACHE_BUDGET, MAX_FRAGMENTS
from api.graphql.schema import make_schema
from api.request_log import RequestLog
from api.service import SyncService, deciding
from api.service.reading import MAX_LIMIT
from api.service.writing import MAX_PUSH
from api.settings import Settings
from api.storage.store import DynamoStore
from api.tenant_gate import WRITERS_PER_TENANT, TenantGate
from tests.support.gql import TEST_AUTH_SECRET, GraphQLClient, bearer

PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { "
    "clientMutationID status replayed error { code message } item { id changeToken } } } }"
)
HIGHEST_ULID = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"


def _create(tenant: str, cmid: str, given_name: str) -> dict[str, Any]:
    return {
        "createPerson": {
            "tenantID": tenant,
            "clientMutationID": cmid,
            "person": {"givenName": given_name},
        }
    }


def _push(gql: GraphQLClient, tenant: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    body = gql.execute(PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    assert "errors" not in body, body
    results: list[dict[str, Any]] = body["data"]["pushChanges"]["results"]
    return results


# --- 1, 2: values that cannot be stored, tokens out of range ------------------------


@pytest.mark.parametrize(
    ("value", "why"),
    [("\ud800", "unpaired surrogate"), ("bell\x07", "control characters"), ("\x00", "control")],
)
def test_unstorable_text_is_bad_input_naming_the_field(
    gql: GraphQLClient, tenant: str, value: str, why: str
) -> None:
    body = gql.execute(
        "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }",
        {"i": {"tenantID": tenant, "person": {"familyName": value}}},
    )
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["message"].startswith("Person.familyName:") and why in error["message"]
    assert gql.sync(tenant).items == []  # nothing written


def test_text_with_tabs_newlines_and_any_language_is_stored() -> None:
    from tests.support.family import PERSON

    value = "Zoë\tO'Brien\n李 👩‍👩‍👧"
    assert PERSON.normalize_changes({"givenName": value}) == {"givenName": value}


def test_a_poisoned_entry_is_rejected_alone_and_a_resend_is_answered_entry_by_entry(
    gql: GraphQLClient, tenant: str
) -> None:
    entries = [
        _create(tenant, "a", "first"),
        _create(tenant, "b", "\udfff"),
        {
            "deletePerson": {
                "tenantID": tenant,
                "clientMutationID": "c",
                "id": "nobody",
                "changeToken": HIGHEST_ULID,
            }
        },
        _create(tenant, "d", "last"),
    ]
    first = _push(gql, tenant, entries)
    assert [r["status"] for r in first] == ["APPLIED", "REJECTED", "REJECTED", "APPLIED"]
    assert [(r["error"] or {}).get("code") for r in first] == [
        None,
        "BAD_USER_INPUT",
        "BAD_USER_INPUT",
        None,
    ]
    assert "changeToken" in first[2]["error"]["message"]
    again = _push(gql, tenant, entries)  # the outbox resends the same batch
    assert [r["status"] for r in again] == [r["status"] for r in first]
    assert [r["replayed"] for r in again] == [True, False, False, True]
    assert [r["item"]["id"] for r in again if r["item"]] == [
        first[0]["item"]["id"],
        first[3]["item"]["id"],
    ]


@pytest.mark.parametrize("token", [HIGHEST_ULID, "7ZZZZZZZZZ0000000000000000"])
def test_a_token_past_year_9999_is_bad_input_everywhere(
    gql: GraphQLClient, tenant: str, token: str
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "x"})
    for query, variables in (
        (
            "mutation($i: DeletePersonInput!) { deletePerson(input: $i) { replayed } }",
            {"i": {"tenantID": tenant, "id": person["id"], "changeToken": token}},
        ),
        (
            "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { replayed } }",
            {"i": {"tenantID": tenant, "id": "x", "changeToken": token, "changes": {}}},
        ),
        (
            "query($t: ID!, $s: ID) { changes(tenantID: $t, since: $s) { changeToken } }",
            {"t": tenant, "s": token},
        ),
    ):
        (error,) = gql.execute(query, variables)["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT", error


def test_an_unexpected_failure_in_one_entry_rejects_that_entry_only(
    gql: GraphQLClient,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    real_decide = deciding.decide

    def decide(entry: Any, known: Any, history: bool = False) -> Any:
        if entry.mutation.changes.get("givenName") == "boom":
            raise RuntimeError("injected bug")
        return real_decide(entry, known, history)

    monkeypatch.setattr(deciding, "decide", decide)
    with caplog.at_level(logging.ERROR, logger="api.service.writing"):
        results = _push(
            gql,
            tenant,
            [_create(tenant, "1", "ok"), _create(tenant, "2", "boom"), _create(tenant, "3", "ok")],
        )
    assert [r["status"] for r in results] == ["APPLIED", "REJECTED", "APPLIED"]
    assert results[1]["error"]["code"] == "INTERNAL_SERVER_ERROR"
    assert "injected bug" not in results[1]["error"]["message"]
    assert any(r.exc_info and "injected bug" in str(r.exc_info[1]) for r in caplog.records)


# --- 3, 4: no token needed: memory and CPU -----------------------------------------


def _fragments_query(n: int, tenant: str = "t") -> str:
    fragments = "\n".join(f"fragment F{i} on Person {{ id givenName }}" for i in range(n))
    spreads = " ".join(f"...F{i}" for i in range(n))
    return f'query Q {{ person(tenantID: "{tenant}", id: "x") {{ {spreads} }} }}\n{fragments}'


def test_without_a_token_a_long_document_is_refused_before_it_is_parsed(
    app_client: TestClient,
) -> None:
    attack = _fragments_query(550)  # 19.6 KB, 0.5-0.8 s of validation before
    response = app_client.post("/graphql", json={"query": attack})
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "UNAUTHENTICATED"


def test_with_a_token_too_many_fragments_are_refused_before_validation(
    app_client: TestClient, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    validated: list[Any] = []
    real = documents_module.validate_document

    def spy(*args: Any) -> Any:
        validated.append(args)
        return real(*args)

    monkeypatch.setattr(documents_module, "validate_document", spy)
    for attack, why in ((_fragments_query(550), "tokens"), (_fragments_query(100), "fragments")):
        response = app_client.post("/graphql", json={"query": attack}, headers=bearer([tenant]))
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT" and why in error["message"]
    assert validated == []
    ok = app_client.post(
        "/graphql",
        json={"query": _fragments_query(MAX_FRAGMENTS, tenant)},
        headers=bearer([tenant]),
    )
    assert ok.json()["data"] == {"person": None} and len(validated) == 1


def test_only_valid_authenticated_documents_are_cached_within_a_byte_budget(
    settings: Settings, tenant: str
) -> None:
    schema = make_schema(settings)
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret))
    authenticator = Authenticator(settings)
    header = bearer([tenant])["Authorization"]

    def run(query: str, signed: bool) -> Any:
        request = type("Request", (), {"headers": {"authorization": header}})()
        context = Context(
            request=request,
            service=service,
            principal=authenticator.authenticate(header) if signed else None,
        )
        return asyncio.run(schema.execute(query, context_value=context))

    invalid = "query { nope " + " ".join(f"x{i}" for i in range(2000)) + " }"
    assert run(invalid, signed=True).errors
    assert schema.documents.used == 0  # failures are not kept
    assert run("{ __typename }", signed=False).errors is None
    assert schema.documents.used == 0  # nor anonymous documents
    padding = " " * 15_000
    for i in range(80):  # 80 distinct ~15 KB valid documents: 1.2 MB of text
        assert run(f"query Q{i} {{ __typename{padding} }}", signed=True).errors is None
    assert 0 < schema.documents.used <= CACHE_BUDGET


# --- 5: one tenant cannot starve the others ------------------------------------------


def test_a_tenants_writers_wait_outside_the_worker_pool_and_a_flood_is_refused() -> None:
    async def scenario() -> list[str]:
        gate = TenantGate(slots=2, max_waiting=2)
        release = asyncio.Event()
        outcomes: list[str] = []

        async def write() -> None:
            try:
                async with gate.enter("t"):
                    await release.wait()
                outcomes.append("done")
            except Unavailable:
                outcomes.append("UNAVAILABLE")

        tasks = [asyncio.create_task(write()) for _ in range(6)]
        await asyncio.sleep(0.05)
        async with gate.enter("other tenant"):  # never waits behind "t"
            outcomes.append("other")
        release.set()
        await asyncio.gather(*tasks)
        return outcomes

    outcomes = asyncio.run(scenario())
    assert outcomes[:3] == ["UNAVAILABLE", "UNAVAILABLE", "other"]
    assert outcomes.count("done") == 4


@pytest.mark.slow
def test_another_tenants_reads_are_served_during_a_push_flood(
    app_client: TestClient, gql: GraphQLClient, tenant: str, inject: Any
) -> None:
    """45 pushes of one tenant, every one held inside DynamoDB until the reads are done:
    another tenant's reads (another caller's) are answered while none of the pushes has
    finished, and at most WRITERS_PER_TENANT of the pushes are in the pool at a time.
    (A real flood of 45 pushes of 100 raced the reads: all done first on an idle
    machine, past the client's 120 s on a loaded one.)"""
    flooder, reader = f"{tenant}-flood", f"{tenant}-calm"
    read = "query($t: ID!) { changes(tenantID: $t) { items { id } changeToken } }"
    release = threading.Event()
    inside = [0, 0]  # now, most at once
    lock = threading.Lock()

    def hold_flood(params: dict[str, Any], **_: Any) -> None:
        if flooder not in str(params):
            return
        with lock:
            inside[0] += 1
            inside[1] = max(inside[1], inside[0])
        release.wait(60)
        with lock:
            inside[0] -= 1

    # The flood's commits (not each push's check of the caller's access, outside the gate).
    inject("before-call.dynamodb.TransactWriteItems", hold_flood)
    finished: list[dict[str, Any]] = []

    def flood(i: int) -> None:
        entry = {"createPerson": {"tenantID": flooder, "person": {"givenName": f"p{i}"}}}
        finished.append(gql.execute(PUSH, {"i": {"tenantID": flooder, "mutations": [entry]}}))

    threads = [threading.Thread(target=flood, args=(i,)) for i in range(45)]
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        for t in threads:
            t.start()
        while inside[1] < WRITERS_PER_TENANT:  # the flood's writes are held
            threading.Event().wait(0.05)
        calm = bearer([reader], sub="calm-reader")
        for _ in range(5):
            body = pool.submit(gql.execute, read, {"t": reader}, calm).result(timeout=60)
            assert "errors" not in body and body["data"]["changes"]["items"] == [], body
        # The reads did not queue behind the flood of writes: none of it has finished.
        assert finished == []
        assert inside[1] == WRITERS_PER_TENANT, inside
    finally:
        release.set()
        for t in threads:
            t.join()
        pool.shutdown(wait=True)
    assert len(finished) == 45
    for body in finished:  # applied, or refused beyond the queue: never a 500
        codes = {e["extensions"]["code"] for e in body.get("errors", [])}
        assert codes <= {"UNAVAILABLE"}, body
        if not codes:
            assert body["data"]["pushChanges"]["results"][0]["status"] == "APPLIED", body


# --- 6: aliases share the request's limits ----------------------------------------------


def test_aliased_pushes_share_one_pushs_limit(gql: GraphQLClient, tenant: str) -> None:
    aliases = " ".join(
        f"p{i}: pushChanges(input: $i) {{ results {{ status }} }}" for i in range(10)
    )
    entries = [
        {"createPerson": {"tenantID": tenant, "person": {"givenName": f"g{i}"}}}
        for i in range(MAX_PUSH)
    ]
    body = gql.execute(
        f"mutation($i: PushChangesInput!) {{ {aliases} }}",
        {"i": {"tenantID": tenant, "mutations": entries}},
    )
    # pushChanges is non-null: the first refused alias nulls the response's data and
    # ends the (serial) execution of mutations; the first push stays applied.
    assert {e["extensions"]["code"] for e in body["errors"]} == {"BAD_USER_INPUT"}
    assert len(gql.sync(tenant).items) == MAX_PUSH


def test_aliased_changes_share_one_pages_limit(
    gql: GraphQLClient, tenant: str, app_client: TestClient
) -> None:
    gql.execute(
        PUSH,
        {
            "i": {
                "tenantID": tenant,
                "mutations": [
                    {"createPerson": {"tenantID": tenant, "person": {"givenName": "x" * 60}}}
                    for _ in range(MAX_PUSH)
                ],
            }
        },
    )
    one = (
        f"changes(tenantID: $t, limit: {MAX_LIMIT}) "
        "{ items { id ... on Person { givenName } } }"
    )
    single = app_client.post(
        "/graphql",
        json={"query": f"query($t: ID!) {{ {one} }}", "variables": {"t": tenant}},
        headers=bearer([tenant]),
    )
    aliases = " ".join(f"c{i}: {one}" for i in range(30))
    body = gql.execute(f"query($t: ID!) {{ {aliases} }}", {"t": tenant})
    assert {e["extensions"]["code"] for e in body["errors"]} == {"BAD_USER_INPUT"}
    assert "aliases included" in body["errors"][0]["message"]
    # Thirty aliases cost no more than one page (they built a 75.6 MB response before).
    assert len(json.dumps(body)) <= len(single.text)


# --- 7, 8: logs and bodies ----------------------------------------------------------------


def test_log_fields_are_bounded(
    app_client: TestClient, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = "N" * 50_000
    with caplog.at_level(logging.INFO, logger="api.request"):
        app_client.post(
            "/graphql",
            json={"query": f"query {name} {{ __typename }}", "operationName": name},
            headers=bearer([tenant]),
        )
    (line,) = [r.getMessage() for r in caplog.records if r.name == "api.request"]
    assert len(line) < 1000 and "(50000 chars)" in line


@pytest.mark.parametrize("body", [b'"x"', b"1", b"null", b"true"])
def test_a_json_body_that_is_not_an_object_is_a_coded_400(
    app_client: TestClient, tenant: str, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {**bearer([tenant]), "content-type": "application/json"}
    with caplog.at_level(logging.INFO, logger="api.request"):
        response = app_client.post("/graphql", content=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    (line,) = [r.getMessage() for r in caplog.records if r.name == "api.request"]
    assert json.loads(line)["result"] == "BAD_USER_INPUT"


def test_a_server_error_is_logged_as_an_error() -> None:
    assert json.loads(RequestLog("r").line(500, 1.0))["result"] == "INTERNAL_SERVER_ERROR"
    assert json.loads(RequestLog("r").line(200, 1.0))["result"] == "OK"


# --- 9: JWKS ------------------------------------------------------------------------------


@pytest.fixture
def failing_issuer() -> Iterator[tuple[str, list[float]]]:
    """A JWKS endpoint that answers slowly, then with an error; records each fetch."""
    fetches: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            fetches.append(time.monotonic())
            time.sleep(1.0)
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json", fetches
    server.shutdown()
    server.server_close()


def test_a_slow_key_set_fetch_blocks_nobody_and_a_failed_one_starts_the_cooldown(
    settings: Settings, failing_issuer: tuple[str, list[float]]
) -> None:
    url, fetches = failing_issuer
    jwks_settings = Settings(
        **{
            **settings.__dict__,
            "jwt_jwks_url": url,
            "jwt_issuer": "https://issuer.example",
            "jwt_jwks_cooldown_seconds": 60,
        }
    )
    token = jwt.encode(
        {"sub": "a", "exp": int(time.time()) + 60, "tenants": ["t"]},
        "k" * 64,
        algorithm="HS256",
        headers={"kid": "unknown"},
    )
    query = {"query": 'query { changes(tenantID: "t") { changeToken } }'}
    with TestClient(create_app(jwks_settings)) as client:
        results: list[Any] = []
        slow = threading.Thread(
            target=lambda: results.append(
                client.post("/graphql", json=query, headers={"Authorization": f"Bearer {token}"})
            )
        )
        slow.start()
        while not fetches:
            time.sleep(0.01)
        quick = client.post("/graphql", json={"query": "{ __typename }"})
        assert quick.json()["data"] == {"__typename": "Query"}
        assert slow.is_alive()  # answered while the key-set fetch was still running
        slow.join()
        assert results[0].json()["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
        for _ in range(3):  # within the cooldown after a failure: no new fetch
            again = client.post(
                "/graphql", json=query, headers={"Authorization": f"Bearer {token}"}
            )
            assert again.json()["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
    assert len(fetches) == 1


# --- 10: the smaller items ----------------------------------------------------------------


def test_a_mutation_over_get_is_a_coded_405_and_a_batch_a_coded_400(
    app_client: TestClient, tenant: str
) -> None:
    mutation = (
        'mutation { deletePerson(input: {tenantID: "t", id: "x", changeToken: "x"}) { replayed } }'
    )
    got = app_client.get("/graphql", params={"query": mutation}, headers=bearer([tenant]))
    assert got.status_code == 405 and got.headers["allow"] == "POST"
    assert got.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    batch = app_client.post(
        "/graphql", json=[{"query": "{ __typename }"}], headers=bearer([tenant])
    )
    assert batch.status_code == 400
    assert batch.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


def test_graphiql_is_not_frameable_runs_only_its_scripts_and_forgets_tokens(
    app_client: TestClient,
) -> None:
    page = app_client.get("/graphql", headers={"accept": "text/html"})
    assert page.status_code == 200
    assert page.headers["x-frame-options"] == "DENY"
    policy = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self' 'sha256-" in policy
    assert "shouldPersistHeaders: false" in page.text


def test_exp_must_be_a_number(gql: GraphQLClient, tenant: str) -> None:
    token = jwt.encode(
        {"sub": "a", "exp": str(int(time.time()) + 600), "tenants": [tenant]},
        TEST_AUTH_SECRET,
        algorithm="HS256",
    )
    body = gql.execute(
        "query($t: ID!) { changes(tenantID: $t) { changeToken } }",
        {"t": tenant},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(
    ("query", "variables"),
    [
        ('query { changes(tenantID: "T", limit: ' + "9" * 5000 + ") { changeToken } }", {}),
        (
            "mutation($i: CreateReminderInput!) { createReminder(input: $i) { replayed } }",
            {
                "i": {
                    "tenantID": "T",
                    "reminder": {"title": "x", "dueAt": "2026-01-01T00:00:00+99:00"},
                }
            },
        ),
        (
            "mutation($i: CreatePersonInput!) { createPerson(input: $i) { replayed } }",
            {"i": {"tenantID": "T", "person": {"dateOfBirth": "2026-02-30"}}},
        ),
    ],
)
def test_error_messages_name_no_python_internals(
    gql: GraphQLClient, tenant: str, query: str, variables: dict[str, Any]
) -> None:
    text = json.dumps(
        gql.execute(
            query.replace('"T"', json.dumps(tenant)),
            json.loads(json.dumps(variables).replace('"T"', json.dumps(tenant))),
        )
    )
    assert "BAD_USER_INPUT" in text
    for internal in ("sys.", "timedelta", "Traceback", "datetime."):
        assert internal not in text


def test_a_slow_body_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_http, "BODY_TIMEOUT_S", 0.2)
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app must not see a request whose body never came")

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "headers": [], "method": "POST", "path": "/graphql"}
    asyncio.run(api_http.RequestMiddleware(app, 1024)(scope, receive, send))
    assert sent[0]["status"] == 408
    assert json.loads(sent[1]["body"])["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


# --- the fuzz run of the push path -----------------------------------------------------

_ULID_CHARS = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_text = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=40)
_token = st.one_of(
    st.text(alphabet=_ULID_CHARS, min_size=26, max_size=26),
    st.just(HIGHEST_ULID),
    _text,
)
_id = st.one_of(st.text(alphabet="abcXYZ019_.:-", min_size=1, max_size=8), _text)


def _entry(tenant: str) -> Any:
    person = st.fixed_dictionaries(
        {},
        optional={
            "givenName": _text,
            "familyName": _text,
            "occupation": _text,
            "profileColor": _text,
        },
    )
    cmid = st.one_of(st.none(), _id)
    create = st.builds(
        lambda i, p, c: {
            "createPerson": {"tenantID": tenant, "id": i, "person": p, "clientMutationID": c}
        },
        st.one_of(st.none(), _id),
        person,
        cmid,
    )
    update = st.builds(
        lambda i, t, p, c: {
            "updatePerson": {
                "tenantID": tenant,
                "id": i,
                "changeToken": t,
                "changes": p,
                "clientMutationID": c,
            }
        },
        _id,
        _token,
        person,
        cmid,
    )
    delete = st.builds(
        lambda i, t, c: {
            "deletePerson": {"tenantID": tenant, "id": i, "changeToken": t, "clientMutationID": c}
        },
        _id,
        _token,
        cmid,
    )
    return st.one_of(create, update, delete)


@pytest.mark.slow  # fuzzing: 60 examples, some 5 s
def test_fuzzed_pushes_never_fail_internally_and_the_rest_applies(
    gql: GraphQLClient, tenant: str
) -> None:
    counter = iter(range(10**9))

    @hypothesis_settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(entries=st.lists(_entry(tenant), max_size=6))
    def run(entries: list[dict[str, Any]]) -> None:
        sentinel = f"sentinel-{next(counter)}"
        batch = [*entries, {"createPerson": {"tenantID": tenant, "id": sentinel, "person": {}}}]
        results = _push(gql, tenant, batch)
        assert len(results) == len(batch)
        for result in results:
            code = (result["error"] or {}).get("code")
            assert code != "INTERNAL_SERVER_ERROR", (batch, result)
        assert results[-1]["status"] == "APPLIED" and results[-1]["item"]["id"] == sentinel

    run()
