"""Two `deleteTenant` calls race, and a member writes the tenant again between them
(contract 3.8): on real servers over DynamoDB Local, the second call's DynamoDB
calls go through a proxy that holds them as a slower DynamoDB would. The write
acknowledged meanwhile survives, and the tenant stays usable. And a deletion an
earlier release's call left marked on the blob usage item alone is taken on."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from api.settings import Settings
from api.storage import keys
from api.storage.blob_usage import DELETING
from api.storage.deletion_usage import MARK_ID
from tests.integration.test_tenant_deletion import DELETE
from tests.support.blobs import REQUEST_UPLOAD, reference, upload
from tests.support.dynamo_proxy import DynamoProxy
from tests.support.gql import GraphQLClient
from tests.support.servers import api_server

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = pytest.mark.slow

PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) "
    "{ results { status error { code } } } }"
)


def _names(tenant: str) -> Any:
    """Whether a call's body names the tenant's keys."""
    return lambda _op, body: tenant in str(body)


def _marks_the_head(tenant: str) -> Any:
    """A transaction that writes the deletion's mark on the tenant's head."""
    head = keys.log_pk(tenant)

    def match(operation: str, body: dict[str, Any]) -> bool:
        if operation != "TransactWriteItems":
            return False
        for action in body.get("TransactItems", []):
            update = action.get("Update", {})
            key = update.get("Key", {})
            if key.get("pk", {}).get("S") == head and key.get("sk", {}).get("S") == keys.HEAD_SK:
                return "xid" in update.get("ExpressionAttributeNames", {}).values()
        return False

    return match


def _delete(gql: GraphQLClient, tenant: str) -> bool:
    """Called until done (True), as an app does."""
    for _ in range(20):
        if gql.data(DELETE, {"t": tenant, "c": tenant})["deleteTenant"]["done"]:
            return True
    return False


@pytest.fixture
def servers(settings: Settings) -> Iterator[tuple[str, str, DynamoProxy]]:
    """Server A on DynamoDB Local; server B on it through the proxy."""
    assert settings.dynamodb_endpoint is not None
    with DynamoProxy(settings.dynamodb_endpoint) as proxy:
        slow = dataclasses.replace(settings, dynamodb_endpoint=proxy.endpoint)
        with api_server(settings) as a, api_server(slow) as b:
            yield a, b, proxy


def test_a_racing_deletion_call_never_buries_the_tenant_written_again(
    servers: tuple[str, str, DynamoProxy], tenant: str
) -> None:
    """The owner's two devices delete the tenant at once. B's call reaches the server
    first, but its DynamoDB calls are slow: its first is held until A's call has
    ended the deletion, its mark of the head until a member has written the tenant
    again and been answered. Let go, B touches nothing of that write."""
    base_a, base_b, proxy = servers
    with (
        httpx2.Client(base_url=base_a, timeout=60) as http_a,
        httpx2.Client(base_url=base_b, timeout=60) as http_b,
    ):
        a, b = GraphQLClient(http_a), GraphQLClient(http_b)
        a.create(tenant, "Person", {"givenName": "before"})
        first = proxy.hold(_names(tenant), once=False)
        mark = proxy.hold(_marks_the_head(tenant), once=False)
        answer: dict[str, Any] = {}
        call_b = threading.Thread(
            target=lambda: answer.update(b.execute(DELETE, {"t": tenant, "c": tenant})),
            daemon=True,
        )
        call_b.start()
        assert first.reached.wait(60), "B's call never reached DynamoDB"
        # A's call deletes the tenant to the end meanwhile.
        assert a.data(DELETE, {"t": tenant, "c": tenant})["deleteTenant"]["done"]
        first.go.set()
        # B's calls go on; its mark of the head is held while a member writes the
        # tenant again, and is answered.
        assert mark.reached.wait(60), "B's call never marked the head"
        written = a.create(tenant, "Person", {"givenName": "written again"})
        mark.go.set()
        call_b.join(60)
        assert not call_b.is_alive()
        assert answer.get("data", {}).get("deleteTenant", {}).get("done") is True, answer

        # The acknowledged write is there, for a first sync and from its own token.
        synced = a.sync(tenant)
        assert [i["id"] for i in synced.items] == [written["id"]], synced
        assert a.get(tenant, "Person", written["id"]) == written
        edit = {
            "updatePerson": {
                "tenantID": tenant,
                "id": written["id"],
                "changeToken": written["changeToken"],
                "changes": {"familyName": "Lee"},
            }
        }
        pushed = a.data(
            PUSH, {"i": {"tenantID": tenant, "mutations": [edit], "since": synced.change_token}}
        )
        assert pushed["pushChanges"]["results"] == [{"status": "APPLIED", "error": None}], pushed
        # Its uploads are not refused by a mark left on the blob usage item.
        ref = reference(b"a photo of the tenant written again")
        request = {"t": tenant, "sha": ref["sha256"], "size": ref["size"], "type": "image/jpeg"}
        assert "errors" not in a.execute(REQUEST_UPLOAD, request)


def test_a_deletion_marked_only_on_the_blob_usage_item_is_taken_on_and_ended(
    gql: GraphQLClient, ddb: Any, settings: Settings, tenant: str
) -> None:
    """A call of an earlier release marked the usage item first and the head after,
    in two writes, and died between them: the next call takes that mark on (the
    usage item's id), ends the deletion, and leaves neither mark behind."""
    gql.create(tenant, "Person", {"givenName": "before"})
    upload(gql, tenant, b"a photo before")
    ddb.update_item(
        TableName=settings.table_name,
        Key={"pk": {"S": keys.blobs_pk(tenant)}, "sk": {"S": keys.USAGE_SK}},
        UpdateExpression="SET #x = :at, #id = :id",
        ExpressionAttributeNames={"#x": DELETING, "#id": MARK_ID},
        ExpressionAttributeValues={":at": {"N": "1"}, ":id": {"S": "an-earlier-call"}},
    )
    assert _delete(gql, tenant)
    usage = ddb.get_item(
        TableName=settings.table_name,
        Key={"pk": {"S": keys.blobs_pk(tenant)}, "sk": {"S": keys.USAGE_SK}},
        ConsistentRead=True,
    ).get("Item", {})
    assert MARK_ID not in usage and DELETING not in usage, usage
    assert gql.sync(tenant).items == []
    upload(gql, tenant, b"a photo after")  # not refused by a mark left behind
