"""Exporting a tenant (contract 3.9) against DynamoDB Local: the file holds what a
first sync returns and the history, in calls that resume after a crash of the
server; only owners export; a download link is signed, expires, and is refused
when altered."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import httpx2
import pytest
from starlette.testclient import TestClient

from api.domain.cursor import CursorCodec
from api.domain.errors import NotFound
from api.domain.exports import ExportJob
from api.service import SyncService
from api.service.exports import DOWNLOAD_LINK_S, Link
from api.settings import Settings
from api.storage import keys
from api.storage.exports import ExportTable
from api.storage.store import DynamoStore
from tests.support.bulk import bulk_people
from tests.support.gql import GraphQLClient, GraphQLError, bearer, post_data
from tests.support.servers import api_server, crash

EXPORT = (
    "mutation($t: ID!, $e: ID) { exportTenant(tenantID: $t, exportID: $e) "
    "{ exportID done entities versions bytes downloadURL downloadExpiresAt } }"
)
HISTORY = (
    "query($t: ID!, $id: ID!) { history(tenantID: $t, id: $id, limit: 100) "
    "{ items { id changeToken } } }"
)


def _export(call: Callable[[str | None], dict[str, Any]]) -> tuple[dict[str, Any], int]:
    """Call until done; the last payload and how many calls it took."""
    payload = call(None)
    calls = 1
    while not payload["done"]:
        payload = call(payload["exportID"])
        calls += 1
    return payload, calls


def _lines(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(body).splitlines()]


def _fill(gql: GraphQLClient, tenant: str) -> str:
    """People (some edited twice: history), a reminder, a deletion; the deleted id."""
    for i in range(12):
        person = gql.create(tenant, "Person", {"givenName": f"p{i}", "familyName": "Ünïcode"})
        if i % 3 == 0:
            person = gql.update(
                tenant, "Person", person["id"], person["changeToken"], {"givenName": f"q{i}"}
            )
            person = gql.update(
                tenant, "Person", person["id"], person["changeToken"], {"occupation": "x"}
            )
        if i == 5:
            gql.delete(tenant, "Person", person["id"], person["changeToken"])
            deleted = person["id"]
    gql.create(tenant, "Reminder", {"title": "call", "notes": "n" * 3000})
    return deleted


def test_an_owner_exports_the_first_sync_and_the_history(
    gql: GraphQLClient, app_client: TestClient, tenant: str, settings: Settings
) -> None:
    deleted = _fill(gql, tenant)
    synced = gql.sync(tenant)
    live = [i for i in synced.items if i["__typename"] != "DeletedItem"]

    def call(export_id: str | None) -> dict[str, Any]:
        return gql.data(EXPORT, {"t": tenant, "e": export_id})["exportTenant"]

    payload, _ = _export(call)
    assert payload["entities"] == len(live) == 12
    response = app_client.get(payload["downloadURL"])
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/gzip"
    assert "content-encoding" not in response.headers  # the file is the gzip, not the transfer
    assert len(response.content) == payload["bytes"]
    lines = _lines(response.content)

    header, *body, end = lines
    assert header["export"]["tenantID"] == tenant
    assert header["export"]["exportID"] == payload["exportID"]
    assert header["export"]["askedBy"] == "tester"
    entities = [line["entity"] for line in body if "entity" in line]
    versions = [line["version"] for line in body if "version" in line]
    assert len(entities) + len(versions) == len(body)
    # Exactly what a first sync returns, field for field (and who wrote each).
    assert len(entities) == len(live)
    for item, entity in zip(live, entities, strict=True):
        assert {k: entity[k] for k in item} == item
        assert entity["writtenBy"] == "tester"
    # Every earlier version, as `history` returns it, a deleted entity's included.
    expected = {
        (v["id"], v["changeToken"])
        for entity_id in [*(i["id"] for i in live), deleted]
        for v in gql.data(HISTORY, {"t": tenant, "id": entity_id})["history"]["items"]
    }
    assert {(v["id"], v["changeToken"]) for v in versions} == expected
    assert len(versions) == len(expected) == 4 * 2 + 1  # two edits of 4 people, a deletion
    assert end == {
        "end": {"entities": 12, "versions": len(versions), "changeToken": synced.change_token}
    }


def test_only_owners_export_and_links_are_signed_and_expire(
    gql: GraphQLClient, app_client: TestClient, tenant: str, settings: Settings
) -> None:
    gql.create(tenant, "Person", {"givenName": "a"})
    for role in ("reader", "writer"):
        body = gql.execute(
            EXPORT, {"t": tenant, "e": None}, headers=bearer([f"{tenant}:{role}"], sub=role)
        )
        assert body["errors"][0]["extensions"]["code"] == "FORBIDDEN", body
    with pytest.raises(GraphQLError) as missing:
        gql.data(EXPORT, {"t": tenant, "e": "01JZZZZZZZZZZZZZZZZZZZZZZZ"})
    assert missing.value.errors[0]["extensions"]["code"] == "NOT_FOUND"

    payload = gql.data(EXPORT, {"t": tenant, "e": None})["exportTenant"]
    assert payload["done"] and payload["downloadURL"]
    url = urlparse(payload["downloadURL"])
    path, query = url.path, dict(p.split("=") for p in url.query.split("&"))
    assert app_client.get(f"{path}?until={query['until']}&sig={query['sig']}").status_code == 200
    for altered in (
        f"{path}?until={int(query['until']) + 1}&sig={query['sig']}",  # a later expiry
        f"{path}?until={query['until']}&sig={'0' * 32}",
        f"{path}?until={query['until']}",
        path,
        path.replace(tenant, tenant + "x") + f"?until={query['until']}&sig={query['sig']}",
        f"{path}?until=x&sig={query['sig']}",
    ):
        assert app_client.get(altered).status_code == 404, altered

    # A link is valid for DOWNLOAD_LINK_S: a service whose clock is past it says so.
    later = SyncService(
        DynamoStore(),
        CursorCodec(settings.cursor_secret),
        clock_ms=lambda: int(query["until"]) + 1,
        exports=ExportTable(),
    )
    assert later.exports is not None
    export_id = payload["exportID"]
    assert later.exports.check_link(tenant, export_id, int(query["until"]), query["sig"]) == (
        Link.EXPIRED,
        payload["bytes"],
    )
    until = int(query["until"])
    assert until - time.time() * 1000 <= DOWNLOAD_LINK_S * 1000


def test_two_calls_racing_on_one_export_write_each_line_once(
    gql: GraphQLClient, app_client: TestClient, tenant: str, settings: Settings
) -> None:
    for i in range(250):
        gql.create(tenant, "Person", {"givenName": f"p{i}"})
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret), exports=ExportTable())
    assert service.exports is not None
    job = service.exports.export_tenant(tenant, None, "owner", steps=0)
    threads = [
        threading.Thread(
            target=lambda: service.exports.export_tenant(tenant, job.export_id, "o")  # type: ignore[union-attr]
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = service.exports.export_tenant(tenant, job.export_id, "owner")
    assert done.done and done.entities == 250
    lines = _lines(b"".join(service.exports.file(tenant, job.export_id)))
    ids = [line["entity"]["id"] for line in lines if "entity" in line]
    assert len(ids) == len(set(ids)) == 250


@pytest.mark.slow
def test_a_10000_item_export_survives_a_crash_of_the_server_and_matches_the_first_sync(
    settings: Settings, tenant: str
) -> None:
    bulk_people(tenant, 10_000)
    headers = bearer([tenant], sub="owner")

    def call(base: str, export_id: str | None) -> dict[str, Any]:
        data = post_data(base, EXPORT, {"t": tenant, "e": export_id}, headers)
        result: dict[str, Any] = data["exportTenant"]
        return result

    with api_server(settings) as first:
        started = call(first, None)
        assert not started["done"] and 0 < started["entities"] < 10_000
        # The server dies in the middle of the next call (or just before or after it:
        # whichever it is, nothing may be lost or written twice).
        dying = threading.Thread(target=lambda: _swallow(lambda: call(first, started["exportID"])))
        dying.start()
        time.sleep(0.3)
        crash(first)
        dying.join()
    with api_server(settings) as second:
        payload, calls = _export(lambda e: call(second, e or started["exportID"]))
        response = httpx2.get(payload["downloadURL"], timeout=60)
        assert response.status_code == 200
        lines = _lines(response.content)
        with httpx2.Client(base_url=second, timeout=60, headers=headers) as http:
            synced = GraphQLClient(http).sync(tenant, limit=1000)
    entities = [line["entity"] for line in lines if "entity" in line]
    assert [e["id"] for e in entities] == [i["id"] for i in synced.items]
    assert [e["changeToken"] for e in entities] == [i["changeToken"] for i in synced.items]
    assert lines[-1]["end"] == {
        "entities": 10_000,
        "versions": 0,
        "changeToken": synced.change_token,
    }
    assert payload["entities"] == 10_000 and calls >= 2


def _swallow(call: Callable[[], object]) -> None:
    with contextlib.suppress(httpx2.TransportError, AssertionError, ValueError):
        call()  # the server dies under the call


def test_a_step_from_a_stale_job_writes_nothing(settings: Settings, tenant: str) -> None:
    """Two calls that read the job at the same point: the second step is refused
    whole, its parts with it (a transaction conditioned on the parts written)."""
    table = ExportTable()
    job = ExportJob(tenant, "01JEXPORTSTALE000000000000", "owner", 0, key="k" * 32)
    table.create(job, expires_at=2_000_000_000)
    first = dataclasses.replace(job, parts=1, entities=1, position="c1")
    assert table.advance(job, first, [b"first"], expires_at=2_000_000_000)
    second = dataclasses.replace(job, parts=2, entities=9, position="c9")
    assert not table.advance(job, second, [b"stale", b"stale"], expires_at=2_000_000_000)
    assert table.get(tenant, job.export_id) == first
    assert list(table.parts(tenant, job.export_id)) == [b"first"]


def test_what_changes_during_an_export_is_in_the_file_in_sync_order(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    """An entity updated while the first sync's pages are read leaves its old place
    behind them: the file still has it (the sync from their token), and applying
    the lines in order gives the tenant as it stands."""
    people = [gql.create(tenant, "Person", {"givenName": f"p{i}"}) for i in range(250)]
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret), exports=ExportTable())
    assert service.exports is not None
    job = service.exports.export_tenant(tenant, None, "owner", steps=1)  # the first 100
    last, first = people[-1], people[0]
    gql.update(tenant, "Person", last["id"], last["changeToken"], {"givenName": "moved"})
    gql.delete(tenant, "Person", first["id"], first["changeToken"])
    done = service.exports.export_tenant(tenant, job.export_id, "owner")
    assert done.done
    lines = _lines(b"".join(service.exports.file(tenant, job.export_id)))
    applied: dict[str, dict[str, Any]] = {}
    for line in lines:
        if "entity" in line:
            applied[line["entity"]["id"]] = line["entity"]
        elif "deleted" in line:
            applied.pop(line["deleted"]["id"], None)
    synced = {i["id"]: i for i in gql.sync(tenant).items if i["__typename"] == "Person"}
    assert set(applied) == set(synced) and len(synced) == 249
    assert applied[last["id"]]["givenName"] == "moved"
    assert lines[-1]["end"]["changeToken"] == gql.sync(tenant).change_token


def test_an_export_whose_tenant_is_deleted_meanwhile_is_not_found(
    gql: GraphQLClient, tenant: str, settings: Settings, ddb: Any
) -> None:
    """The deletion sweeps the job while a call is in a step: the step's transaction
    is refused (its job is gone), nothing is written, the call says NOT_FOUND."""
    for i in range(150):
        gql.create(tenant, "Person", {"givenName": f"p{i}"})

    class SweptMidStep(ExportTable):
        def advance(self, before: ExportJob, *args: Any) -> bool:
            key = {"pk": {"S": keys.export_pk(tenant)}, "sk": {"S": before.export_id}}
            ddb.delete_item(TableName=settings.table_name, Key=key)
            return super().advance(before, *args)

    service = SyncService(
        DynamoStore(), CursorCodec(settings.cursor_secret), exports=SweptMidStep()
    )
    assert service.exports is not None
    with pytest.raises(NotFound):
        service.exports.export_tenant(tenant, None, "owner")
    left = ddb.query(
        TableName=settings.table_name,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": keys.export_pk(tenant)}},
    )["Items"]
    assert left == []  # no part was written without its job


def test_a_retried_job_creation_whose_first_answer_was_lost_is_no_error(
    settings: Settings, tenant: str
) -> None:
    """botocore retries a put that DynamoDB applied and whose answer it lost: the
    retry meets the job it created, which is not an uncoded error."""
    table = ExportTable()
    job = ExportJob(tenant, "01JEXPORTRETRY000000000000", "owner", 0, key="k" * 32)
    table.create(job, expires_at=2_000_000_000)
    table.create(job, expires_at=2_000_000_000)  # the retry
    assert table.get(tenant, job.export_id) == job
