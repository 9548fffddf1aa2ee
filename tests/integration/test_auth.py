"""Authentication and tenant isolation: every operation x every kind of bad token (contract 6)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from api.graphql.schema import default_schema
from tests.support.gql import TEST_AUTH_SECRET, GraphQLClient

VICTIM_MARKER = "victim-secret-name"
NOW = int(time.time())


def _hs256(claims: dict[str, Any], secret: str = TEST_AUTH_SECRET, **headers: Any) -> str:
    return jwt.encode(claims, secret, algorithm="HS256", headers=headers or None)


def _claims(tenant: str, **overrides: Any) -> dict[str, Any]:
    return {"sub": "mallory", "tenants": [tenant], "iat": NOW, "exp": NOW + 3600, **overrides}


def _unsigned(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)

# name -> (headers for a request on `tenant`, expected code; None means success)
TOKENS: dict[str, tuple[Callable[[str], dict[str, str]], str | None]] = {
    "no token": (lambda t: {}, "UNAUTHENTICATED"),
    "not bearer": (lambda t: {"Authorization": f"Basic {_hs256(_claims(t))}"}, "UNAUTHENTICATED"),
    "garbage": (lambda t: {"Authorization": "Bearer not.a.jwt"}, "UNAUTHENTICATED"),
    "expired": (
        lambda t: {"Authorization": f"Bearer {_hs256(_claims(t, exp=NOW - 3600))}"},
        "UNAUTHENTICATED",
    ),
    "not yet valid": (
        lambda t: {"Authorization": f"Bearer {_hs256(_claims(t, nbf=NOW + 3600))}"},
        "UNAUTHENTICATED",
    ),
    "wrong signature": (
        lambda t: {"Authorization": f"Bearer {_hs256(_claims(t), 'x' * 40)}"},
        "UNAUTHENTICATED",
    ),
    "alg none": (lambda t: {"Authorization": f"Bearer {_unsigned(_claims(t))}"}, "UNAUTHENTICATED"),
    "wrong algorithm HS512": (
        lambda t: {
            "Authorization": "Bearer " + jwt.encode(_claims(t), TEST_AUTH_SECRET, algorithm="HS512")
        },
        "UNAUTHENTICATED",
    ),
    "wrong algorithm RS256": (
        lambda t: {
            "Authorization": "Bearer " + jwt.encode(_claims(t), _RSA_KEY, algorithm="RS256")
        },
        "UNAUTHENTICATED",
    ),
    "no sub": (
        lambda t: {"Authorization": f"Bearer {_hs256({'tenants': [t], 'exp': NOW + 3600})}"},
        "UNAUTHENTICATED",
    ),
    "no exp": (
        lambda t: {"Authorization": f"Bearer {_hs256({'sub': 'm', 'tenants': [t]})}"},
        "UNAUTHENTICATED",
    ),
    "another tenant": (
        lambda t: {"Authorization": f"Bearer {_hs256(_claims(t + '-mine'))}"},
        "FORBIDDEN",
    ),
    "tenants claim missing": (
        lambda t: {"Authorization": f"Bearer {_hs256({'sub': 'm', 'exp': NOW + 3600})}"},
        "FORBIDDEN",
    ),
    "valid": (lambda t: {"Authorization": f"Bearer {_hs256(_claims(t))}"}, None),
}


def _operations() -> dict[str, tuple[str, Callable[[str, dict[str, Any]], dict[str, Any]]]]:
    """Every root field of the schema with variables for a victim's entity."""
    p, r = "Person", "Reminder"
    return {
        "changes": (
            "query($t: ID!) { changes(tenantID: $t) { items { id ... on Person { givenName } } "
            "cursor changeToken } }",
            lambda t, e: {"t": t},
        ),
        "catchUp": (
            "query($t: ID!, $u: ID!) { catchUp(tenantID: $t, upTo: $u, "
            'fields: ["Person.givenName"]) { items { id ... on Person { givenName } } cursor } }',
            lambda t, e: {"t": t, "u": e[p]["changeToken"]},
        ),
        "person": (
            "query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { id givenName } }",
            lambda t, e: {"t": t, "id": e[p]["id"]},
        ),
        "reminder": (
            "query($t: ID!, $id: ID!) { reminder(tenantID: $t, id: $id) { id title } }",
            lambda t, e: {"t": t, "id": e[r]["id"]},
        ),
        **{
            f"create{n}": (
                f"mutation($i: Create{n}Input!) {{ create{n}(input: $i) {{ __typename }} }}",
                lambda t, e, n=n: {"i": {"tenantID": t, n[0].lower() + n[1:]: {}}},  # type: ignore[misc]
            )
            for n in (p, r)
        },
        **{
            f"update{n}": (
                f"mutation($i: Update{n}Input!) {{ update{n}(input: $i) {{ __typename }} }}",
                lambda t, e, n=n: {  # type: ignore[misc]
                    "i": {
                        "tenantID": t,
                        "id": e[n]["id"],
                        "changeToken": e[n]["changeToken"],
                        "changes": {},
                    }
                },
            )
            for n in (p, r)
        },
        "member": (
            "query($t: ID!, $id: ID!) { member(tenantID: $t, id: $id) { role displayName } }",
            lambda t, e: {"t": t, "id": e["Member"]["id"]},
        ),
        "createMember": (
            "mutation($i: CreateMemberInput!) { createMember(input: $i) { __typename } }",
            lambda t, e: {"i": {"tenantID": t, "id": "mallory", "member": {"role": "OWNER"}}},
        ),
        "updateMember": (
            "mutation($i: UpdateMemberInput!) { updateMember(input: $i) { __typename } }",
            lambda t, e: {
                "i": {
                    "tenantID": t,
                    "id": e["Member"]["id"],
                    "changeToken": e["Member"]["changeToken"],
                    "changes": {"role": "WRITER"},
                }
            },
        ),
        "deleteMember": (
            "mutation($i: DeleteMemberInput!) { deleteMember(input: $i) { __typename } }",
            lambda t, e: {
                "i": {
                    "tenantID": t,
                    "id": e["Member"]["id"],
                    "changeToken": e["Member"]["changeToken"],
                }
            },
        ),
        "deleteTenant": (
            "mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { removedItems done } }",
            lambda t, e: {"t": t},
        ),
        "exportTenant": (
            "mutation($t: ID!) { exportTenant(tenantID: $t) { exportID done downloadURL } }",
            lambda t, e: {"t": t},
        ),
        "requestUpload": (
            "mutation($t: ID!, $sha: String!) { requestUpload(tenantID: $t, sha256: $sha, "
            'size: 5, contentType: "image/png") { alreadyPresent upload { url } } }',
            lambda t, e: {"t": t, "sha": "c" * 64},
        ),
        "attachment": (
            "query($t: ID!, $sha: String!) { attachment(tenantID: $t, sha256: $sha) { url } }",
            lambda t, e: {"t": t, "sha": e["Blob"]["id"]},
        ),
        "history": (
            "query($t: ID!, $id: ID!) { history(tenantID: $t, id: $id) { items { id } cursor } }",
            lambda t, e: {"t": t, "id": e[p]["id"]},
        ),
        "restoreVersion": (
            "mutation($i: RestoreVersionInput!) { restoreVersion(input: $i) "
            "{ item { id changeToken } } }",
            lambda t, e: {
                "i": {
                    "tenantID": t,
                    "id": e[p]["id"],
                    "changeToken": e[p]["changeToken"],
                    "version": e["earlier Person"]["changeToken"],
                }
            },
        ),
        "setVisibility": (
            "mutation($i: SetVisibilityInput!) { setVisibility(input: $i) "
            "{ item { id changeToken } } }",
            lambda t, e: {
                "i": {
                    "tenantID": t,
                    "id": e[p]["id"],
                    "changeToken": e[p]["changeToken"],
                    "visibility": {"sharedWith": []},
                }
            },
        ),
        "registerPushDevice": (
            "mutation($i: RegisterPushDeviceInput!) { registerPushDevice(input: $i) { deviceID } }",
            lambda t, e: {
                "i": {"tenantID": t, "platform": "APNS", "deviceToken": "ab" * 32, "deviceID": "d1"}
            },
        ),
        "unregisterPushDevice": (
            'mutation($t: ID!) { unregisterPushDevice(tenantID: $t, deviceID: "d1") }',
            lambda t, e: {"t": t},
        ),
        "pushDevices": (
            "query($t: ID!) { pushDevices(tenantID: $t) { deviceID } }",
            lambda t, e: {"t": t},
        ),
        "pushChanges": (
            "mutation($i: PushChangesInput!) { pushChanges(input: $i) "
            "{ results { status item { id } } } }",
            lambda t, e: {
                "i": {
                    "tenantID": t,
                    "mutations": [
                        {
                            "updatePerson": {
                                "tenantID": t,
                                "id": e[p]["id"],
                                "changeToken": e[p]["changeToken"],
                                "changes": {},
                            }
                        }
                    ],
                }
            },
        ),
        **{
            f"delete{n}": (
                f"mutation($i: Delete{n}Input!) {{ delete{n}(input: $i) {{ __typename }} }}",
                lambda t, e, n=n: {  # type: ignore[misc]
                    "i": {"tenantID": t, "id": e[n]["id"], "changeToken": e[n]["changeToken"]}
                },
            )
            for n in (p, r)
        },
    }


OPERATIONS = _operations()
# Silent pushes' fields (contract 3.4.2): served only where SNS is configured.
PUSH_FIELDS = {"registerPushDevice", "unregisterPushDevice", "pushDevices"}


def test_the_matrix_covers_every_root_field() -> None:
    schema = default_schema()
    fields = set(schema.get_type_by_name("Query").fields) | set(  # type: ignore[union-attr]
        schema.get_type_by_name("Mutation").fields  # type: ignore[union-attr]
    )
    names = {f.graphql_name or f.python_name for f in fields}
    assert names == set(OPERATIONS)


# The fast loop (scripts/test) tries every operation with one token of each answer;
# the other ways a token is wrong run in scripts/test --all.
FAST_TOKENS = {"no token", "another tenant", "valid"}


@pytest.fixture(scope="module")
def victims() -> dict[str, tuple[str, dict[str, dict[str, Any]]]]:
    """The victim tenant and entities of each operation, seeded once for the 13 tokens
    refused (each test checks that its own call wrote nothing, against a sync of the
    tenant just before it): seeded for each of the 350 tests, the matrix took 185 s
    at load 11, against 58 s. A valid token's call writes: a tenant of its own."""
    return {}


@pytest.mark.parametrize(
    "token_case",
    [pytest.param(c, marks=() if c in FAST_TOKENS else pytest.mark.slow) for c in TOKENS],
)
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_every_operation_with_every_token(
    gql: GraphQLClient,
    tenant: str,
    operation: str,
    token_case: str,
    victims: dict[str, tuple[str, dict[str, dict[str, Any]]]],
) -> None:
    if TOKENS[token_case][1] is None:
        entities = _victim(gql, tenant, operation, valid=True)
    else:
        if operation not in victims:
            victims[operation] = (tenant, _victim(gql, tenant, operation, valid=False))
        tenant, entities = victims[operation]
    before = gql.sync(tenant).items
    query, variables = OPERATIONS[operation]
    make_headers, expected = TOKENS[token_case]
    body = gql.execute(query, variables(tenant, entities), headers=make_headers(tenant))

    if expected is None and operation in PUSH_FIELDS:
        # This test's server has no SNS platform application: a valid caller is told so.
        assert [e["extensions"]["code"] for e in body["errors"]] == ["UNAVAILABLE"], body
        assert "not configured" in body["errors"][0]["message"], body
        return
    if expected is None:
        assert "errors" not in body, body
        return
    assert not any((body["data"] or {}).values()), body  # null, or a nullable field null
    assert [e["extensions"]["code"] for e in body["errors"]] == [expected]
    text = json.dumps(body)
    assert VICTIM_MARKER not in text
    for entity in entities.values():
        assert entity["id"] not in text and entity["changeToken"] not in text
    assert gql.sync(tenant).items == before  # nothing written


def _victim(
    gql: GraphQLClient, tenant: str, operation: str, valid: bool
) -> dict[str, dict[str, Any]]:
    """The victim's entities in `tenant`, for `operation` (its Member, its blob)."""
    earlier = gql.create(tenant, "Person", {"givenName": VICTIM_MARKER})
    entities = {
        "Person": gql.update(
            tenant, "Person", earlier["id"], earlier["changeToken"], {"familyName": VICTIM_MARKER}
        ),
        "earlier Person": earlier,  # kept in the person's history
        "Reminder": gql.create(tenant, "Reminder", {"title": VICTIM_MARKER}),
    }
    if operation in ("member", "updateMember", "deleteMember"):
        # The victim's tenant moved to membership as data (contract 6): its owner is
        # the test's caller; the valid token's sub is an owner member too.
        entities["Member"] = _moved_with_victim(gql, tenant, valid=valid)
    if operation == "attachment":  # a blob of the victim's, its sha256 never shown to others
        sha = _uploaded_blob(gql, tenant)
        entities["Blob"] = {"id": sha, "changeToken": sha}
    return entities


def _moved_with_victim(gql: GraphQLClient, tenant: str, valid: bool) -> dict[str, Any]:
    create = (
        "mutation($i: CreateMemberInput!) { createMember(input: $i) { member { id changeToken } } }"
    )
    members = [("tester", "OWNER"), *([("mallory", "OWNER")] if valid else [])]
    for sub, role in members:
        gql.data(create, {"i": {"tenantID": tenant, "id": sub, "member": {"role": role}}})
    victim = {"role": "READER", "displayName": VICTIM_MARKER}
    made = gql.data(create, {"i": {"tenantID": tenant, "id": "victim-7q", "member": victim}})
    return dict(made["createMember"]["member"])


def _uploaded_blob(gql: GraphQLClient, tenant: str) -> str:
    data = os.urandom(64)
    sha = hashlib.sha256(data).hexdigest()
    answer = gql.data(
        "mutation($t: ID!, $sha: String!) { requestUpload(tenantID: $t, sha256: $sha, size: 64, "
        'contentType: "image/png") { upload { url headers { name value } } } }',
        {"t": tenant, "sha": sha},
    )["requestUpload"]["upload"]
    headers = {h["name"]: h["value"] for h in answer["headers"]}
    assert httpx2.put(answer["url"], content=data, headers=headers).status_code == 200
    return sha


def test_a_cursor_from_one_tenant_cannot_read_another(gql: GraphQLClient, tenant: str) -> None:
    mine, theirs = tenant + "-mine", tenant
    for t in (mine, theirs):
        for i in range(3):
            gql.create(t, "Person", {"givenName": f"{t}-{i}"})
    cursor = gql.changes_page(mine, limit=1)["cursor"]
    # A caller allowed on both tenants still cannot move a cursor across them.
    body = gql.execute(
        "query($t: ID!, $c: String) { changes(tenantID: $t, cursor: $c) { items { id } } }",
        {"t": theirs, "c": cursor},
        headers={"Authorization": f"Bearer {_hs256(_claims(theirs, tenants=[mine, theirs]))}"},
    )
    assert body["errors"][0]["extensions"]["code"] == "INVALID_CURSOR"
    assert body["data"] is None


def test_a_token_for_several_tenants_reaches_each(gql: GraphQLClient, tenant: str) -> None:
    other = tenant + "-2"
    headers = {"Authorization": f"Bearer {_hs256(_claims(tenant, tenants=[tenant, other]))}"}
    for t in (tenant, other):
        body = gql.execute(
            "query($t: ID!) { changes(tenantID: $t) { changeToken } }", {"t": t}, headers=headers
        )
        assert "errors" not in body


def test_a_verified_token_is_not_verified_again_until_it_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataclasses

    from api.auth import Authenticator, make_local_token
    from api.domain.errors import Unauthenticated
    from api.settings import Settings

    settings = dataclasses.replace(
        Settings.from_env({}), auth_secret=TEST_AUTH_SECRET, jwt_leeway_seconds=0
    )
    authenticator = Authenticator(settings)
    decodes: list[str] = []
    real_decode = jwt.decode

    def counting_decode(token: str, *args: Any, **kwargs: Any) -> Any:
        decodes.append(token)
        return real_decode(token, *args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counting_decode)
    token = make_local_token(TEST_AUTH_SECRET, "ann", ["t1"], 2)
    first = authenticator.authenticate(f"Bearer {token}")
    again = authenticator.authenticate(f"Bearer {token}")
    assert again == first and len(decodes) == 1  # the second request did no JWT work
    other = make_local_token(TEST_AUTH_SECRET, "bob", ["t2"], 60)
    assert authenticator.authenticate(f"Bearer {other}").sub == "bob" and len(decodes) == 2
    # A bad token is never remembered as good, and a remembered one expires.
    with pytest.raises(Unauthenticated):
        authenticator.authenticate(f"Bearer {token}x")
    time.sleep(2.1)
    with pytest.raises(Unauthenticated):
        authenticator.authenticate(f"Bearer {token}")
