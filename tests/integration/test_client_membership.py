"""The reference client lets go of a tenant it lost (contract 3.5, FORBIDDEN with
reason NOT_A_MEMBER): its versions, sync position, attachments' bytes and outbox go,
each queued edit reported refused; a refusal for its role, or an unreachable server,
drops nothing. Against the in-process server; the device's token is replaced as an
app's would be when the user was removed from the tenant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from sync_client import SyncClient, TransportError
from sync_client.client import PushOutcome

from tests.support.gql import bearer

PHOTO = b"\xff\xd8\xff" + b"Zebediah's photo " * 64


class _Device:
    """The client's transport over the in-process app, with the token of the moment;
    `online = False` is an unreachable server. Counts the requests that went."""

    def __init__(self, client: TestClient, tenants: list[str]) -> None:
        self._client = client
        self.headers = bearer(tenants)
        self.online = True
        self.requests = 0

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        if not self.online:
            raise TransportError("connection refused")
        self.requests += 1
        response = self._client.post(
            "/graphql", json={"query": query, "variables": variables}, headers=self.headers
        )
        body: dict[str, Any] = response.json()
        return body


def _synced(app_client: TestClient, tenant: str, path: Path) -> tuple[SyncClient, _Device, Any]:
    """A device holding the tenant (Ann with a photo uploaded, Bob), with two edits
    queued since (a create and an update); its outcomes recorded."""
    transport = _Device(app_client, [tenant])
    outcomes: list[PushOutcome] = []
    device = SyncClient(path, tenant, transport, on_push_result=outcomes.append)
    photo = device.attach(PHOTO, "image/jpeg")
    ann = device.create("Person", {"givenName": "Zebediah", "photo": photo})
    device.create("Person", {"givenName": "Bob"})
    assert device.sync().applied == 2
    device.create("Person", {"givenName": "Carl"})
    device.update(ann, {"familyName": "Lee"})
    outcomes.clear()
    return device, transport, (ann, photo["sha256"], outcomes)


def test_a_device_removed_from_a_tenant_lets_go_of_its_copy_and_reports_its_outbox(
    app_client: TestClient, tenant: str, tmp_path: Path
) -> None:
    device, transport, (ann, sha256, outcomes) = _synced(app_client, tenant, tmp_path / "d.db")
    assert device.store.since() is not None and device.store.blob(sha256) is not None
    transport.headers = bearer([f"{tenant}-other"])  # the token no longer lists it
    transport.requests = 0
    report = device.sync()
    assert report.not_a_member and not report.tenant_deleted
    refused = [(r["entry"].verb, r["error"]["code"], r["error"]["reason"]) for r in report.rejected]
    assert refused == [
        ("create", "FORBIDDEN", "NOT_A_MEMBER"),
        ("update", "FORBIDDEN", "NOT_A_MEMBER"),
    ]
    assert [(o.status, o.error and o.error["reason"]) for o in outcomes] == [
        ("REJECTED", "NOT_A_MEMBER")
    ] * 2
    assert transport.requests == 1  # the refused push: nothing asked after it
    assert device.items() == {} and device.pending() == 0
    assert device.store.since() is None and device.store.blob(sha256) is None
    # Not in the file's free pages or its write-ahead log either, the app still open.
    for leftover in tmp_path.glob("d.db*"):
        assert b"Zebediah" not in leftover.read_bytes(), leftover.name
    device.close()
    # Nothing of the queued edits was written; the tenant is as it was.
    owner = SyncClient(tmp_path / "owner.db", tenant, _Device(app_client, [tenant]))
    owner.sync()
    assert sorted(p["givenName"] for p in owner.items().values()) == ["Bob", "Zebediah"]
    assert "familyName" not in (owner.get(ann) or {})


def test_a_pull_refused_not_a_member_lets_go_too(
    app_client: TestClient, tenant: str, tmp_path: Path
) -> None:
    """With nothing queued, the first request is the pull."""
    transport = _Device(app_client, [tenant])
    device = SyncClient(tmp_path / "d.db", tenant, transport)
    device.create("Person", {"givenName": "Ann"})
    device.sync()
    transport.headers = bearer([f"{tenant}-other"])
    report = device.sync()
    assert report.not_a_member and report.rejected == []
    assert device.items() == {} and device.store.since() is None


def test_signing_out_forgets_the_tenant_without_a_request(
    app_client: TestClient, tenant: str, tmp_path: Path
) -> None:
    device, transport, (_, sha256, outcomes) = _synced(app_client, tenant, tmp_path / "d.db")
    transport.requests = 0
    refused = device.forget_tenant()
    assert [r["error"]["code"] for r in refused] == ["SIGNED_OUT"] * 2
    assert [o.error and o.error["code"] for o in outcomes] == ["SIGNED_OUT"] * 2
    assert transport.requests == 0
    assert device.items() == {} and device.pending() == 0
    assert device.store.since() is None and device.store.blob(sha256) is None


def test_a_refusal_for_the_role_keeps_the_copy(
    app_client: TestClient, tenant: str, tmp_path: Path
) -> None:
    """A reader's writes are refused (FORBIDDEN, ROLE), as before: the outbox drains
    with them rejected, and everything else stays."""
    device, transport, (ann, sha256, _) = _synced(app_client, tenant, tmp_path / "d.db")
    since = device.store.since()
    transport.headers = bearer([f"{tenant}:reader"])
    report = device.sync()
    assert not report.not_a_member
    assert [(r["error"]["code"], r["error"]["reason"]) for r in report.rejected] == [
        ("FORBIDDEN", "ROLE")
    ] * 2
    assert sorted(p["givenName"] for p in device.items().values()) == ["Bob", "Zebediah"]
    assert device.store.since() == since and device.store.blob(sha256) is not None
    assert device.get(ann) is not None


def test_an_unreachable_server_drops_nothing(
    app_client: TestClient, tenant: str, tmp_path: Path
) -> None:
    device, transport, (_, sha256, outcomes) = _synced(app_client, tenant, tmp_path / "d.db")
    since, items = device.store.since(), device.items()
    transport.online = False
    with pytest.raises(TransportError):
        device.sync()
    assert device.items() == items and device.pending() == 2 and outcomes == []
    assert device.store.since() == since and device.store.blob(sha256) is not None
