"""Silent pushes go where pokes go (docs/realtime.md, "Silent pushes" and "Who is
poked"): a change in some members' streams pushes only their devices, and a member
removed from a tenant of membership as data gets nothing more, through a server's
own rounds (`scripts/serve`'s path: SNS on the local engine, DynamoDB Local)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.graphql.context import RELEASE_HEADER
from api.settings import Settings
from scripts.local_s3 import LocalS3
from tests.integration.test_silent_pushes import DEVICES, _call, _endpoints, _register, _wait
from tests.support import sns
from tests.support.gql import GraphQLClient, bearer

pytestmark = pytest.mark.slow

CREATE = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }"
)
MEMBER = "mutation($i: CreateMemberInput!) { createMember(input: $i) { member { changeToken } } }"
DELETE_MEMBER = (
    "mutation($i: DeleteMemberInput!) { deleteMember(input: $i) { deletedItem { changeToken } } }"
)


@pytest.fixture(scope="module")
def push_settings(settings: Settings, sns_engine: LocalS3) -> Settings:
    return sns.push_settings(settings, sns_engine.endpoint)


@pytest.fixture(scope="module")
def http(push_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(push_settings)) as client:
        yield client


def _data(http: TestClient, query: str, variables: dict[str, Any], tenant: str, sub: str) -> Any:
    headers = {**bearer([tenant], sub=sub), RELEASE_HEADER: "3"}
    body = GraphQLClient(http).execute(query, variables, headers=headers)
    assert not body.get("errors"), body
    return body["data"]


def _tokens(push_settings: Settings, arns: dict[str, str]) -> dict[str, list[str]]:
    """Device -> the change tokens pushed to it, in order."""
    endpoint = push_settings.sns_endpoint
    assert endpoint is not None
    found = sns.published(endpoint)
    return {d: [sns.payload(m)["changeToken"] for m in found.get(a, [])] for d, a in arns.items()}


def test_a_private_change_pushes_only_its_owners_devices(
    http: TestClient, tenant: str, ddb: Any, push_settings: Settings
) -> None:
    """Ann's private record: her device is pushed, Bob's not (its view did not change);
    the next tenant-wide change (Cat's) pushes Bob's, with its own token."""
    for sub, device in [("ann", "ann-phone"), ("bob", "bob-phone")]:
        assert "errors" not in _register(http, tenant, sub, device)
    arns = _endpoints(ddb, tenant)
    private = {"tenantID": tenant, "person": {"givenName": "Ann"}, "visibility": {"sharedWith": []}}
    mine = _data(http, CREATE, {"i": private}, tenant, "ann")["createPerson"]["person"]
    _wait(lambda: _tokens(push_settings, arns)["ann-phone"] != [], "Ann's device's push")
    wide = {"tenantID": tenant, "person": {"givenName": "Cat"}}
    everyone = _data(http, CREATE, {"i": wide}, tenant, "cat")["createPerson"]["person"]
    _wait(lambda: _tokens(push_settings, arns)["bob-phone"] != [], "Bob's device's push")
    pushed = _tokens(push_settings, arns)
    assert pushed["bob-phone"] == [everyone["changeToken"]]  # never Ann's private change
    # Ann's device had its push of the private change; Cat's waits for its window.
    assert pushed["ann-phone"] == [mine["changeToken"]]


def test_a_removed_members_devices_get_nothing_more(
    http: TestClient, tenant: str, ddb: Any, push_settings: Settings
) -> None:
    """Olga moves the tenant to membership as data and adds Bob and Cat, whose devices
    register; Bob's removal (a change every member's view holds) pushes Cat's device
    alone. Bob may not register another device, nor list his (NOT_A_MEMBER)."""
    _data(
        http,
        MEMBER,
        {"i": {"tenantID": tenant, "id": "olga", "member": {"role": "OWNER"}}},
        tenant,
        "olga",
    )
    added = {}
    for sub in ("bob", "cat"):
        member = {"tenantID": tenant, "id": sub, "member": {"role": "WRITER"}}
        added[sub] = _data(http, MEMBER, {"i": member}, tenant, "olga")["createMember"]["member"]
    for sub, device in [("bob", "bob-phone"), ("cat", "cat-phone")]:
        assert "errors" not in _register(http, tenant, sub, device)
    arns = _endpoints(ddb, tenant)
    removal = {"tenantID": tenant, "id": "bob", "changeToken": added["bob"]["changeToken"]}
    removed = _data(http, DELETE_MEMBER, {"i": removal}, tenant, "olga")
    token = removed["deleteMember"]["deletedItem"]["changeToken"]
    # One round pushes the tenant's devices: Bob's was left out before any was pushed.
    _wait(lambda: _tokens(push_settings, arns)["cat-phone"] != [], "Cat's device's push")
    assert _tokens(push_settings, arns) == {"bob-phone": [], "cat-phone": [token]}

    before = _endpoints(ddb, tenant)
    refused = _register(http, tenant, "bob", "bob-tablet")
    assert refused["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    assert refused["errors"][0]["extensions"]["reason"] == "NOT_A_MEMBER"
    assert _endpoints(ddb, tenant) == before  # nothing written
    listed = _call(http, DEVICES, {"t": tenant}, [tenant], "bob")
    assert listed["errors"][0]["extensions"]["reason"] == "NOT_A_MEMBER"
