"""A member removed from a tenant of membership as data stops holding push devices
(docs/realtime.md, "Silent pushes"): its registrations are removed, and stop
counting toward the bounds, by the next push round of the tenant (a server's own,
`scripts/serve`'s path) or by a registration that finds a bound reached (the
Lambda HTTP function's path, which runs no round). SNS on the local engine,
DynamoDB Local."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_app, create_lambda_app
from api.settings import Settings
from api.storage import keys
from scripts.local_s3 import LocalS3
from tests.integration.test_push_audiences import DELETE_MEMBER, MEMBER, _data, _tokens
from tests.integration.test_silent_pushes import _endpoints, _partition, _register, _wait
from tests.support import sns

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def push_settings(settings: Settings, sns_engine: LocalS3) -> Settings:
    return sns.push_settings(settings, sns_engine.endpoint, push_devices_per_tenant=2)


@pytest.fixture(scope="module")
def server(push_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(push_settings)) as client:
        yield client


@pytest.fixture(scope="module")
def lambda_http(push_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_lambda_app(push_settings)) as client:
        yield client


def _counts(ddb: Any, tenant: str) -> dict[str, int]:
    """The tenant's device counts by sort key (N: the tenant's; N#<sub>: a member's)."""
    return {
        i["sk"]["S"]: int(i["n"]["N"])
        for i in _partition(ddb, tenant)
        if i["sk"]["S"].startswith(keys.DEVICE_COUNT_SK)
    }


def _members(http: TestClient, tenant: str, subs: list[str]) -> dict[str, str]:
    """Olga owns the tenant (membership as data) and adds `subs` as writers: each
    one's Member record's change token."""
    owner = {"tenantID": tenant, "id": "olga", "member": {"role": "OWNER"}}
    _data(http, MEMBER, {"i": owner}, tenant, "olga")
    added = {}
    for sub in subs:
        member = {"tenantID": tenant, "id": sub, "member": {"role": "WRITER"}}
        added[sub] = _data(http, MEMBER, {"i": member}, tenant, "olga")["createMember"]["member"]
    return {sub: m["changeToken"] for sub, m in added.items()}


def _remove(http: TestClient, tenant: str, sub: str, token: str) -> str:
    removal = {"tenantID": tenant, "id": sub, "changeToken": token}
    removed = _data(http, DELETE_MEMBER, {"i": removal}, tenant, "olga")
    token = removed["deleteMember"]["deletedItem"]["changeToken"]
    assert isinstance(token, str)
    return token


def test_the_round_after_a_removal_removes_the_former_members_devices(
    server: TestClient, tenant: str, ddb: Any, push_settings: Settings
) -> None:
    """Bob's removal is a change: its round pushes Cat's device, leaves Bob's out and
    removes Bob's registration, so that it no longer counts toward the bounds."""
    tokens = _members(server, tenant, ["bob", "cat"])
    for sub, device in [("bob", "bob-phone"), ("cat", "cat-phone")]:
        assert "errors" not in _register(server, tenant, sub, device)
    arns = _endpoints(ddb, tenant)
    assert _counts(ddb, tenant) == {"N": 2, "N#bob": 1, "N#cat": 1}
    token = _remove(server, tenant, "bob", tokens["bob"])
    _wait(lambda: _tokens(push_settings, arns)["cat-phone"] != [], "Cat's device's push")
    assert _tokens(push_settings, arns) == {"bob-phone": [], "cat-phone": [token]}
    _wait(lambda: "bob-phone" not in _endpoints(ddb, tenant), "Bob's registration removed")
    assert set(_endpoints(ddb, tenant)) == {"cat-phone"}
    assert _counts(ddb, tenant) == {"N": 1, "N#bob": 0, "N#cat": 1}


def test_a_registration_at_the_bound_removes_former_members_devices_first(
    lambda_http: TestClient, tenant: str, ddb: Any
) -> None:
    """Through the Lambda HTTP function (no push round there): Bob and Cat fill the
    tenant's 2 devices; Bob is removed; Olga's registration is not refused for Bob's
    device, which is removed instead; a third member's then is (both are members')."""
    tokens = _members(lambda_http, tenant, ["bob", "cat"])
    for sub, device in [("bob", "bob-phone"), ("cat", "cat-phone")]:
        assert "errors" not in _register(lambda_http, tenant, sub, device)
    _remove(lambda_http, tenant, "bob", tokens["bob"])
    assert set(_endpoints(ddb, tenant)) == {"bob-phone", "cat-phone"}  # no round ran
    answer = _register(lambda_http, tenant, "olga", "olga-phone")
    assert "errors" not in answer, answer
    assert set(_endpoints(ddb, tenant)) == {"cat-phone", "olga-phone"}
    assert _counts(ddb, tenant) == {"N": 2, "N#bob": 0, "N#cat": 1, "N#olga": 1}
    dan = {"tenantID": tenant, "id": "dan", "member": {"role": "WRITER"}}
    _data(lambda_http, MEMBER, {"i": dan}, tenant, "olga")
    refused = _register(lambda_http, tenant, "dan", "dan-phone")
    assert refused["errors"][0]["extensions"]["code"] == "QUOTA_EXCEEDED", refused
    assert set(_endpoints(ddb, tenant)) == {"cat-phone", "olga-phone"}
