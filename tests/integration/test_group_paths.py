"""A record shared with a group, on the paths beyond sync (contract 3.12, "Groups"):
an export, a download link, a realtime poke. olga (an owner in group kids) gets it on
each; dave (an owner in no group) gets nothing of it. zed, a writer, owns it."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from api.domain.membership import OWNER
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility
from api.service import SyncService
from tests.integration.test_realtime import _connect, _init, _receive, _subscribe
from tests.integration.test_visibility_leaks import (
    ATTACHMENT,
    CREATE,
    _as,
    _call,
    _code,
    _exported,
    _token_of,
    _upload,
    _write,
    service,
)
from tests.support import family
from tests.support.blobs import sha256_of
from tests.support.gql import GraphQLClient

__all__ = ["service"]  # the fixture, from the leaks' tests

OLGA, DAVE, ZED = "olga", "dave", "zed"
KIDS = Visibility.of(ZED, [], ["kids"])


def _members(service: SyncService, tenant: str) -> None:
    """olga moves the tenant to membership as data: herself in kids, dave and zed."""
    for sub, role, groups in ((OLGA, "OWNER", ["kids"]), (DAVE, "OWNER", []), (ZED, "WRITER", [])):
        fields: dict[str, Any] = {"role": role, "groups": groups}
        mutation = Mutation("create", family.MEMBER, tenant, sub, None, fields)
        service.apply(mutation, OLGA, OWNER, moved=sub != OLGA)


def _create_for_kids(gql: GraphQLClient, tenant: str) -> str:
    """A person of zed's shared with kids, created through the API; its token."""
    visibility = {"sharedWith": [], "groups": ["kids"]}
    i = {"tenantID": tenant, "person": {"givenName": "kids"}, "visibility": visibility}
    body = gql.execute(CREATE, {"i": i}, headers=_as(ZED, tenant))
    assert "errors" not in body, body
    return str(body["data"]["createPerson"]["person"]["changeToken"])


@pytest.fixture
def kids(service: SyncService, tenant: str) -> str:
    _members(service, tenant)
    return tenant


def test_an_export_holds_a_group_record_for_a_member_of_the_group_only(
    gql: GraphQLClient, service: SyncService, kids: str, unhurried_exports: None
) -> None:
    record = _write(service, kids, ZED, {"givenName": "kids-only"}, KIDS)
    _, olgas = _exported(gql, OLGA, kids)
    _, daves = _exported(gql, DAVE, kids)
    assert record.id in {line["entity"]["id"] for line in olgas if "entity" in line}
    assert record.id not in str(daves) and "kids-only" not in str(daves)


def test_a_group_records_blob_is_linked_to_a_member_of_the_group_only(
    gql: GraphQLClient, service: SyncService, kids: str
) -> None:
    photo = b"kids photo " * 300
    ref = _upload(gql, ZED, kids, photo)
    record = _write(service, kids, ZED, {"givenName": "kids", "photo": ref}, KIDS)
    sha = sha256_of(photo)
    olgas = _call(gql, OLGA, kids, ATTACHMENT, sha=sha, id=record.id)
    assert "errors" not in olgas, olgas
    assert httpx2.get(olgas["data"]["attachment"]["url"]).content == photo
    assert _code(_call(gql, DAVE, kids, ATTACHMENT, sha=sha, id=record.id)) == "NOT_FOUND"


def test_a_group_records_change_pokes_a_member_of_the_group_only(
    app_client: TestClient, gql: GraphQLClient, service: SyncService, kids: str
) -> None:
    first = _write(service, kids, ZED, {"givenName": "everyone"})
    with _connect(app_client) as olgas, _connect(app_client) as daves:
        for ws, sub in ((olgas, OLGA), (daves, DAVE)):
            _init(ws, _as(sub, kids)["Authorization"])
            assert _receive(ws) == {"type": "connection_ack"}
            _subscribe(ws, sub, kids, since=first.change_token)
        # A change of a group's record committed by this server (its own poke), then
        # one by another process (the table's stream): each pokes olga.
        mine = _create_for_kids(gql, kids)
        assert _token_of(_receive(olgas)) == mine
        record = _write(service, kids, ZED, {"givenName": "kids"}, KIDS)
        assert _token_of(_receive(olgas)) == record.change_token
        # dave's next event is the next tenant-wide change's, never the group's.
        after = _write(service, kids, ZED, {"givenName": "Later"})
        assert _token_of(_receive(daves)) == after.change_token
        assert _token_of(_receive(olgas)) == after.change_token
