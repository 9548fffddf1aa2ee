"""The AWS realtime path without AWS: the WebSocket route handler and the stream
handler run in-process through their Lambda entry points, with recorded API
Gateway WebSocket events, stream records read from DynamoDB Local's own stream of
the table, and the Management API answered by a local stand-in that records.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api.auth import make_local_token
from api.domain.cursor import CursorCodec
from api.domain.membership import OWNER
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility
from api.realtime import aws
from api.service import SyncService
from api.settings import Settings
from api.storage import keys, models
from api.storage.store import DynamoStore
from tests.support.family import PERSON
from tests.support.faults import dynamodb_error, hooks_on
from tests.support.gql import TEST_AUTH_SECRET, GraphQLClient, bearer
from tests.support.management_api import ManagementApi
from tests.support.stale_reads import StaleQueries
from tests.support.ws_events import websocket_event as _event

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)

SUBSCRIBE = (
    "subscription($t: ID!, $s: ID) { changesAvailable(tenantID: $t, since: $s) "
    "{ tenantID changeToken } }"
)


@pytest.fixture(scope="module")
def management() -> Iterator[ManagementApi]:
    with ManagementApi().running() as api:
        yield api


@pytest.fixture(autouse=True)
def _lambda_environment(
    management: ManagementApi, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """The Lambda's environment, as serverless.yml sets it (the table is the test's)."""
    monkeypatch.setenv("WEBSOCKET_MANAGEMENT_URL", management.url)
    aws._runtime.cache_clear()
    yield
    aws._runtime.cache_clear()


@pytest.fixture
def inject_realtime() -> Iterator[Callable[[str, Callable[..., Any]], None]]:
    """Register a botocore hook on the realtime handlers' DynamoDB client (as the
    `inject` fixture does on the store's): faults enter between it and DynamoDB Local."""
    with hooks_on(aws._runtime().connections.client.meta.events) as register:
        yield register


class Device:
    """One WebSocket connection, as API Gateway would drive the route handler."""

    def __init__(self, management: ManagementApi) -> None:
        self.id = f"c{uuid.uuid4().hex[:10]}="  # API Gateway ids are base64-like
        self.management = management
        response = aws.websocket_handler(_event("ws_connect.json", self.id))
        assert response["statusCode"] == 200
        assert response["headers"]["Sec-WebSocket-Protocol"] == "graphql-transport-ws"

    def send(self, message: dict[str, Any]) -> None:
        response = aws.websocket_handler(_event("ws_message.json", self.id, message))
        assert response["statusCode"] == 200

    def init(self, tenants: list[str], token: str | None = None) -> None:
        token = token or bearer(tenants)["Authorization"]
        self.send({"type": "connection_init", "payload": {"Authorization": token}})

    def subscribe(self, sub_id: str, tenant: str, since: str | None = None) -> None:
        variables = {"t": tenant, "s": since}
        self.send(
            {
                "id": sub_id,
                "type": "subscribe",
                "payload": {"query": SUBSCRIBE, "variables": variables},
            }
        )

    def received(self) -> list[dict[str, Any]]:
        return self.management.messages(self.id)

    def disconnect(self) -> None:
        aws.websocket_handler(_event("ws_disconnect.json", self.id))


class TableStream:
    """The table's stream in DynamoDB Local, read from now on as Lambda's trigger reads it."""

    def __init__(self, settings: Settings) -> None:
        ddb = settings.dynamodb_client()
        self.streams = settings.dynamodb_client("dynamodbstreams")
        self.arn = ddb.describe_table(TableName=settings.table_name)["Table"]["LatestStreamArn"]
        shards = self.streams.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"]
        self.shard_ids = [
            s["ShardId"]
            for s in shards
            if "EndingSequenceNumber" not in s.get("SequenceNumberRange", {})
        ]
        self.iterators = [
            self.streams.get_shard_iterator(
                StreamArn=self.arn, ShardId=shard_id, ShardIteratorType="LATEST"
            )["ShardIterator"]
            for shard_id in self.shard_ids
        ]
        self.shard_of: dict[str, str] = {}  # sequence number -> shard

    def records_until_head_of(self, tenant: str, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Stream records from now on, until the tenant's head shows up, as Lambda's
        event holds them (with the event source's fields)."""
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, iterator in enumerate(self.iterators):
                page = self.streams.get_records(ShardIterator=iterator)
                self.iterators[i] = page["NextShardIterator"]
                for r in page["Records"]:
                    self.shard_of[r["dynamodb"]["SequenceNumber"]] = self.shard_ids[i]
                found += [
                    {**r, "eventSource": "aws:dynamodb", "eventSourceARN": self.arn}
                    for r in page["Records"]
                ]
            heads = [r for r in found if r["dynamodb"]["Keys"]["pk"]["S"] == keys.log_pk(tenant)]
            if any(r["dynamodb"]["Keys"]["sk"]["S"] == keys.HEAD_SK for r in heads):
                return found
            time.sleep(0.1)
        raise AssertionError(f"no head record of {tenant} in the stream")


def _head_filter(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the event source mapping's filter (serverless.yml) lets through."""
    return [r for r in records if r["dynamodb"]["Keys"]["sk"]["S"] == keys.HEAD_SK]


def test_subscribe_then_a_write_pokes_the_subscriber_through_the_stream(
    management: ManagementApi,
    settings: Settings,
    gql: GraphQLClient,
    tenant: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    device = Device(management)
    device.init([tenant])
    assert device.received() == [{"type": "connection_ack"}]
    device.subscribe("s1", tenant)  # an empty tenant: registered, no event yet
    assert device.received() == [{"type": "connection_ack"}]

    stream = TableStream(settings)
    written = gql.create(tenant, "Person", {"givenName": "Ann"})
    records = stream.records_until_head_of(tenant)
    assert aws.stream_handler({"Records": _head_filter(records)}) == {"sent": 1}
    assert device.received()[-1] == {
        "id": "s1",
        "type": "next",
        "payload": {
            "data": {
                "changesAvailable": {"tenantID": tenant, "changeToken": written["changeToken"]}
            }
        },
    }
    # A stale since gets an event at once, carrying the newest token.
    newest = gql.create(tenant, "Person", {"givenName": "Bo"})
    device.subscribe("s2", tenant, since=written["changeToken"])
    assert device.received()[-1]["id"] == "s2"
    assert (
        device.received()[-1]["payload"]["data"]["changesAvailable"]["changeToken"]
        == (newest["changeToken"])
    )
    # A since from before the tenant's first write is a deleted tenant's (contract 3.8).
    device.subscribe("s3", tenant, since="0" * 26)
    refused, completed = device.received()[-2:]
    assert refused["payload"]["errors"][0]["extensions"]["code"] == "TENANT_DELETED"
    assert completed == {"id": "s3", "type": "complete"}
    # `complete` and `$disconnect` remove what the table holds for them.
    device.send({"id": "s1", "type": "complete"})
    device.disconnect()
    later = TableStream(settings)
    gql.create(tenant, "Person", {})
    assert aws.stream_handler({"Records": _head_filter(later.records_until_head_of(tenant))}) == {
        "sent": 0
    }
    # What the functions counted (their EMF lines): one poke, from its commit.
    emitted = _emf(capsys)
    fanout = emitted["fanout"]
    assert fanout.pop("PokeDelay") >= 0
    assert fanout == {"PokesSent": 1}
    assert emitted["realtime"]["WebsocketMessages"] >= 5  # connect, init, 3 subscribes, ...


def test_invocations_keep_one_event_loop_and_its_worker_threads(
    management: ManagementApi, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscribe's blocking reads run in the default executor's threads of an event
    loop the Lambda instance keeps: with `asyncio.run` per invocation, each message
    started a new loop and thread and stopped them when it ended."""
    rt = aws._runtime()
    ran_in: list[threading.Thread] = []
    latest_seen = rt.service.latest_seen

    def recorded(tenant_id: str, after: str | None, sub: str | None) -> str | None:
        ran_in.append(threading.current_thread())
        return latest_seen(tenant_id, after, sub)

    monkeypatch.setattr(rt.service, "latest_seen", recorded)
    device = Device(management)
    device.init([tenant])
    device.subscribe("s1", tenant)
    device.subscribe("s2", tenant)
    first, second = ran_in
    # Both threads outlive their invocations: asyncio.run shut each loop's executor
    # down (its thread joined) when the message ended. (Not `second is first`: an
    # executor may start a second thread when the first has set the result it
    # returns but not yet said it is idle, as on a busy machine.)
    assert first.is_alive() and second.is_alive(), ran_in


def test_refusals_follow_graphql_ws(
    management: ManagementApi, settings: Settings, tenant: str
) -> None:
    bad = Device(management)
    bad.init([tenant], token="Bearer " + make_local_token("wrong-" * 8, "s", [tenant], 60))
    assert bad.received() == [] and bad.id in management.deleted  # closed, never acked

    early = Device(management)
    early.subscribe("s1", tenant)  # before connection_init
    assert early.id in management.deleted

    device = Device(management)
    device.init([tenant])
    device.subscribe("foreign", "not-" + tenant)
    refused = device.received()[-1]
    assert refused["type"] == "error" and refused["id"] == "foreign"
    assert refused["payload"][0]["extensions"]["code"] == "FORBIDDEN"
    device.send({"type": "ping"})
    assert device.received()[-1] == {"type": "pong"}
    device.init([tenant])  # a second connection_init closes the socket
    assert device.id in management.deleted

    wrong = aws.websocket_handler({**_event("ws_connect.json", "x="), "headers": {}})
    assert wrong["statusCode"] == 400  # not graphql-transport-ws


def test_fan_out_forgets_gone_connections_and_closes_expired_ones(
    management: ManagementApi, settings: Settings, gql: GraphQLClient, tenant: str
) -> None:
    gone, expiring, fine = (Device(management) for _ in range(3))
    gone.init([tenant])
    fine.init([tenant])
    # Accepted one to two seconds more (exp plus the 10 s leeway): expired by the write.
    short = make_local_token(TEST_AUTH_SECRET, "s", [tenant], 2, now=time.time() - 10)
    expiring.init([tenant], token=f"Bearer {short}")
    for device in (gone, expiring, fine):
        device.subscribe("s", tenant)
    management.gone.add(gone.id)  # the device went away without a $disconnect
    time.sleep(2.5)
    stream = TableStream(settings)
    gql.create(tenant, "Person", {})
    records = _head_filter(stream.records_until_head_of(tenant))
    assert aws.stream_handler({"Records": records}) == {"sent": 1}
    assert fine.received()[-1]["type"] == "next"
    assert expiring.id in management.deleted
    # The gone connection's subscription was removed: the next write skips it.
    stream = TableStream(settings)
    gql.create(tenant, "Person", {})
    records = _head_filter(stream.records_until_head_of(tenant))
    management.gone.discard(gone.id)
    assert aws.stream_handler({"Records": records}) == {"sent": 1}
    assert gone.received() == [{"type": "connection_ack"}]


def _token(message: dict[str, Any]) -> str:
    token: str = message["payload"]["data"]["changesAvailable"]["changeToken"]
    return token


def test_a_new_subscription_gets_the_write_after_its_snapshot_from_a_stale_replica(
    management: ManagementApi,
    settings: Settings,
    gql: GraphQLClient,
    tenant: str,
    inject_realtime: Callable[[str, Callable[..., Any]], None],
) -> None:
    """Subscribe (PutItem succeeds), its snapshot reads h0, W1 commits: the fan-out
    of W1 must find the subscription, even where an eventually consistent Query
    would be answered by a replica that has not applied the PutItem yet."""
    h0 = gql.create(tenant, "Person", {})["changeToken"]
    stale = StaleQueries(settings.dynamodb_client(), settings.table_name)
    inject_realtime("before-send.dynamodb.Query", stale)
    stale.freeze(keys.subscriptions_pk(tenant))  # the replica has no subscription yet
    device = Device(management)
    device.init([tenant])
    device.subscribe("s1", tenant, since=h0)  # registered; the snapshot is h0: no event
    assert [m["type"] for m in device.received()] == ["connection_ack"]

    stream = TableStream(settings)
    w1 = gql.create(tenant, "Person", {})["changeToken"]
    assert aws.stream_handler({"Records": _head_filter(stream.records_until_head_of(tenant))}) == {
        "sent": 1
    }
    assert _token(device.received()[-1]) == w1


def test_a_failed_subscription_write_leaves_nothing_behind(
    management: ManagementApi,
    settings: Settings,
    tenant: str,
    inject_realtime: Callable[[str, Callable[..., Any]], None],
) -> None:
    """The subscription item's write fails (an item too large, here injected):
    its id must not stay in the connection's map, "in use" and counted."""

    def refuse_subscription_items(request: Any = None, **_: Any) -> Any:
        if keys.subscriptions_pk(tenant).encode() in (request.body or b""):
            refused.append(request.url)
            return dynamodb_error("ValidationException", "Item size has exceeded the maximum")
        return None

    refused: list[str] = []
    device = Device(management)
    device.init([tenant])
    inject_realtime("before-send.dynamodb", refuse_subscription_items)
    device.subscribe("s1", tenant)
    assert refused and device.received()[-1] == {"id": "s1", "type": "complete"}
    connection = aws._runtime().connections.get(device.id)
    assert connection is not None and connection.subscriptions == {}

    refused_count = len(refused)
    aws._runtime().connections.client.meta.events.unregister(
        "before-send.dynamodb", refuse_subscription_items
    )
    device.subscribe("s1", tenant, since=None)  # the same id is free
    assert len(refused) == refused_count
    connection = aws._runtime().connections.get(device.id)
    assert connection is not None and connection.subscriptions == {"s1": tenant}


def test_an_unparsable_or_deeply_nested_body_hangs_up(
    management: ManagementApi, settings: Settings, tenant: str
) -> None:
    nested = '{"type": "ping", "x": ' + "[" * 100 + "]" * 100 + "}"  # parses; too deep
    for body in ("[" * 2000 + "]" * 2000, '{"type": ' * 2000, "\xff{", "{", nested):
        device = Device(management)
        device.init([tenant])
        event = _event("ws_message.json", device.id)
        event["body"] = body
        assert aws.websocket_handler(event) == {"statusCode": 200}
        assert device.id in management.deleted, body[:20]


def _subscription_read_units(settings: Settings, tenant: str) -> float:
    """What the fan-out's Query of the tenant's subscriptions costs, in read units."""
    pages = (
        settings.dynamodb_client()
        .get_paginator("query")
        .paginate(
            TableName=settings.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.subscriptions_pk(tenant)}},
            ConsistentRead=True,
            ReturnConsumedCapacity="TOTAL",
        )
    )
    return float(sum(page["ConsumedCapacity"]["CapacityUnits"] for page in pages))


def test_subscriptions_store_only_their_declared_variables_within_a_bound(
    management: ManagementApi, settings: Settings, tenant: str
) -> None:
    device = Device(management)
    device.init([tenant])
    pad = "x" * 120_000  # undeclared: the operation never reads it
    for i in range(10):
        variables = {"t": tenant, "s": None, "pad": pad}
        payload = {"query": SUBSCRIBE, "variables": variables}
        device.send({"id": f"s{i}", "type": "subscribe", "payload": payload})
    connection = aws._runtime().connections.get(device.id)
    assert connection is not None and len(connection.subscriptions) == 10
    # Ten items of ~300 bytes: one read unit (stored verbatim: 295 units, measured).
    units = _subscription_read_units(settings, tenant)
    assert units <= 1, units
    (stored, *_) = aws._runtime().connections.subscriptions(tenant)
    assert stored.operation.variables == {"t": tenant, "s": None}

    other = Device(management)
    other.init([tenant])
    declared_but_large = "query($t: ID!) { __typename }"  # any document: refused first
    too_large = [
        {"query": SUBSCRIBE, "variables": {"t": tenant, "s": "0" * 2000}},
        {"query": SUBSCRIBE + " " * 5000, "variables": {"t": tenant}},
        {"query": declared_but_large, "variables": {"t": "x" * 2000}},
    ]
    for i, payload in enumerate(too_large):
        other.send({"id": f"big{i}", "type": "subscribe", "payload": payload})
        refused = other.received()[-1]
        assert refused["type"] == "error" and refused["id"] == f"big{i}"
        assert refused["payload"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    connection = aws._runtime().connections.get(other.id)
    assert connection is not None and connection.subscriptions == {}


def test_the_fan_out_runs_the_operation_the_subscriber_named(
    management: ManagementApi, settings: Settings, gql: GraphQLClient, tenant: str
) -> None:
    two = (
        "subscription Short($t: ID!) { changesAvailable(tenantID: $t) { changeToken } } "
        "subscription Full($t: ID!, $s: ID) { changesAvailable(tenantID: $t, since: $s) "
        "{ tenantID changeToken } }"
    )
    device = Device(management)
    device.init([tenant])
    payload = {"query": two, "operationName": "Full", "variables": {"t": tenant}}
    device.send({"id": "s1", "type": "subscribe", "payload": payload})
    stream = TableStream(settings)
    written = gql.create(tenant, "Person", {})["changeToken"]
    records = _head_filter(stream.records_until_head_of(tenant))
    assert aws.stream_handler({"Records": records}) == {"sent": 1}
    assert device.received()[-1]["payload"] == {
        "data": {"changesAvailable": {"tenantID": tenant, "changeToken": written}}
    }


def _subscribed(management: ManagementApi, tenant: str, subscription_id: str) -> Device:
    """A connected device with one subscription to the tenant (since null)."""
    device = Device(management)
    device.init([tenant])
    device.subscribe(subscription_id, tenant)
    return device


def _tokens(device: Device, subscription_id: str) -> list[str]:
    return [_token(m) for m in device.received() if m.get("id") == subscription_id]


def test_every_event_is_newer_than_the_last_one_sent_on_its_subscription(
    management: ManagementApi, settings: Settings, gql: GraphQLClient, tenant: str
) -> None:
    """Retried batches (Lambda retries a failed one; bisection retries halves of it)
    and a subscribe racing a fan-out must not send a token that is not newer."""
    device, flaky = _subscribed(management, tenant, "s1"), _subscribed(management, tenant, "f")
    stream = TableStream(settings)
    w1 = gql.create(tenant, "Person", {})["changeToken"]
    batch1 = {"Records": _head_filter(stream.records_until_head_of(tenant))}
    assert aws.stream_handler(batch1) == {"sent": 2}
    assert aws.stream_handler(batch1) == {"sent": 0}  # a retry of the same batch
    w2 = gql.create(tenant, "Person", {})["changeToken"]
    batch2 = {"Records": _head_filter(stream.records_until_head_of(tenant))}
    device.subscribe("s2", tenant)  # its first event is w2, before w2's fan-out
    management.failing.add(flaky.id)
    with pytest.raises(aws.FanOutIncomplete):  # Lambda retries it
        aws.stream_handler(batch2)
    assert aws.stream_handler(batch1) == {"sent": 0}  # an older batch, late
    management.failing.discard(flaky.id)
    assert aws.stream_handler(batch2) == {"sent": 1}  # the retry: only the one not sent
    assert _tokens(device, "s1") == [w1, w2]
    assert _tokens(device, "s2") == [w2]
    assert _tokens(flaky, "f") == [w1, w2]


def _failure_record(stream: TableStream, batch: list[dict[str, Any]]) -> dict[str, Any]:
    """What Lambda sends the on-failure destination for a stream batch whose retries
    are spent (AWS Lambda Developer Guide, "Retaining discarded records for a
    DynamoDB event source"): the batch's place in the stream, not its records."""
    numbers = [r["dynamodb"]["SequenceNumber"] for r in batch]
    (shard,) = {stream.shard_of[n] for n in numbers}
    return {
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:fanout",
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": 3,
        },
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": "Unhandled",
        },
        "version": "1.0",
        "timestamp": "2026-11-24T00:00:00.000Z",
        "DDBStreamBatchInfo": {
            "shardId": shard,
            "startSequenceNumber": min(numbers, key=int),
            "endSequenceNumber": max(numbers, key=int),
            "approximateArrivalOfFirstRecord": "2026-11-24T00:00:00Z",
            "approximateArrivalOfLastRecord": "2026-11-24T00:00:00Z",
            "batchSize": len(batch),
            "streamArn": stream.arn,
        },
    }


def _emf(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, float]]:
    """The EMF documents the handlers wrote to stdout (`api.metrics`): each
    function's metrics, summed."""
    sums: dict[str, dict[str, float]] = {}
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith('{"_aws"'):
            continue
        document = json.loads(line)
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "OfflineSync"
        into = sums.setdefault(document["function"], {})
        for metric in directive["Metrics"]:
            values = document[metric["Name"]]
            into[metric["Name"]] = into.get(metric["Name"], 0) + sum(values)
    return sums


def test_a_batch_the_fan_out_gave_up_on_is_drained_from_the_failure_destination(
    management: ManagementApi,
    settings: Settings,
    gql: GraphQLClient,
    tenant: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other_tenant = f"t-{uuid.uuid4().hex[:12]}"
    device = _subscribed(management, tenant, "s1")
    other = _subscribed(management, other_tenant, "o1")
    stream = TableStream(settings)
    other_w = gql.create(other_tenant, "Person", {})["changeToken"]
    w1 = gql.create(tenant, "Person", {})["changeToken"]
    batch = _head_filter(stream.records_until_head_of(tenant))
    management.failing.update({device.id, other.id})
    for _ in range(3):  # the first attempt and maximumRetryAttempts: 2
        with pytest.raises(aws.FanOutIncomplete):
            aws.stream_handler({"Records": batch})
    w2 = gql.create(tenant, "Person", {})["changeToken"]  # a later write, also failed
    message = {"messageId": "m1", "body": json.dumps(_failure_record(stream, batch))}
    queue = {"Records": [{**message, "eventSource": "aws:sqs"}]}
    # Still failing: the message goes back to the queue, it is not dropped.
    assert aws.drain_handler(queue) == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    management.failing.clear()
    assert aws.drain_handler(queue) == {"batchItemFailures": []}
    assert _tokens(device, "s1") == [w2]  # the head now: it covers w1
    assert w2 > w1
    assert _tokens(other, "o1") == [other_w]
    assert aws.drain_handler(queue) == {"batchItemFailures": []}  # drained twice:
    assert _tokens(device, "s1") == [w2]  # nothing older or equal is sent again
    # What the functions counted (their EMF lines): each of the three tries failed
    # both tenants; the drain failed once (its fan-out failing both tenants), then
    # poked both subscribers, then none.
    emitted = _emf(capsys)
    assert emitted["fanout"] == {"FanoutFailures": 6}
    drain = emitted["drain"]
    assert drain.pop("PokeDelay") >= 0  # a delay for each tenant poked
    assert drain == {"DrainFailures": 1, "FanoutFailures": 2, "DrainedBatches": 2, "PokesSent": 2}
    assert emitted["realtime"]["WebsocketMessages"] > 0


def test_a_removed_members_subscription_is_told_not_a_member_and_removed(
    management: ManagementApi, settings: Settings, gql: GraphQLClient, tenant: str
) -> None:
    """Membership as data (contract 6): the fan-out reads the tenant's roster once
    and refuses a subscriber without a live Member record, as a local server does."""
    member = (
        "mutation($i: CreateMemberInput!) { createMember(input: $i) { member { changeToken } } }"
    )
    olga = bearer([tenant], sub="olga")
    for sub, role in (("olga", "OWNER"), ("bob", "READER")):
        body = gql.execute(
            member, {"i": {"tenantID": tenant, "id": sub, "member": {"role": role}}}, olga
        )
        assert "errors" not in body, body
    bob_token = body["data"]["createMember"]["member"]["changeToken"]
    bob, owner = Device(management), Device(management)
    bob.init([tenant], bearer([tenant], sub="bob")["Authorization"])
    owner.init([], olga["Authorization"])  # a member: its token need not list the tenant
    bob.subscribe("b", tenant, since=bob_token)
    owner.subscribe("o", tenant, since=bob_token)
    assert bob.received() == owner.received() == [{"type": "connection_ack"}]

    stream = TableStream(settings)
    read: list[dict[str, Any]] = []
    members = keys.members_pk(tenant)
    removal = (
        "mutation($i: DeleteMemberInput!) "
        "{ deleteMember(input: $i) { deletedItem { changeToken } } }"
    )
    removed = gql.execute(
        removal, {"i": {"tenantID": tenant, "id": "bob", "changeToken": bob_token}}, olga
    )
    token = removed["data"]["deleteMember"]["deletedItem"]["changeToken"]
    records = stream.records_until_head_of(tenant)
    with hooks_on(models.RecordItem._get_connection().connection.client.meta.events) as hook:
        hook("before-parameter-build.dynamodb.Query", lambda params, **_: read.append(params))
        assert aws.stream_handler({"Records": _head_filter(records)}) == {"sent": 1}
    # One read of the tenant's roster decides for every subscriber: none of their
    # operations, run for the event, reads the caller's access again.
    rosters = [p for p in read if p["ExpressionAttributeValues"][":pk"]["S"] == members]
    assert len(rosters) == 1, rosters
    assert _token(owner.received()[-1]) == token
    refused, completed = bob.received()[-2:]
    assert refused["id"] == "b" and refused["type"] == "next"
    extensions = refused["payload"]["errors"][0]["extensions"]
    assert (extensions["code"], extensions["reason"]) == ("FORBIDDEN", "NOT_A_MEMBER")
    assert completed == {"id": "b", "type": "complete"}
    left = settings.dynamodb_client().query(
        TableName=settings.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.subscriptions_pk(tenant)}},
        ConsistentRead=True,
    )["Items"]
    assert [i["sk"]["S"] for i in left] == [keys.subscription_sk(owner.id, "o")]


def test_a_private_change_is_fanned_out_to_its_audiences_subscriptions_alone(
    management: ManagementApi, settings: Settings, gql: GraphQLClient, tenant: str
) -> None:
    """Who sees what (contract 3.12): a change in Alice's stream alone pokes her
    subscriptions, not Bob's (nothing read, run or posted for his); a tenant-wide
    change pokes both."""
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret))
    first = service.apply(Mutation("create", PERSON, tenant, None, None, {}), "bob", OWNER)
    alice, bob = Device(management), Device(management)
    for device, sub in ((alice, "alice"), (bob, "bob")):
        device.init([tenant], bearer([tenant], sub=sub)["Authorization"])
        device.subscribe(sub, tenant, since=first.record.change_token)
    stream = TableStream(settings)
    private = Mutation(
        "create",
        PERSON,
        tenant,
        None,
        None,
        {},
        visibility=Visibility("alice"),
        sets_visibility=True,
    )
    secret = service.apply(private, "alice", OWNER).record.change_token
    assert aws.stream_handler({"Records": _head_filter(stream.records_until_head_of(tenant))}) == {
        "sent": 1
    }
    assert _tokens(alice, "alice") == [secret] and _tokens(bob, "bob") == []
    # Bob subscribing again from before it: no first event (nothing in his view).
    bob.subscribe("again", tenant, since=first.record.change_token)
    assert _tokens(bob, "again") == []
    wide = gql.execute(
        "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }",
        {"i": {"tenantID": tenant, "person": {"givenName": "Both"}}},
        bearer([tenant], sub="bob"),
    )["data"]["createPerson"]["person"]["changeToken"]
    assert aws.stream_handler({"Records": _head_filter(stream.records_until_head_of(tenant))}) == {
        "sent": 3
    }
    assert _tokens(alice, "alice") == [secret, wide] and _tokens(bob, "bob") == [wide]
    assert _tokens(bob, "again") == [wide]


def test_a_drained_batch_of_private_changes_pokes_only_whose_view_changed(
    management: ManagementApi, settings: Settings, tenant: str
) -> None:
    """The drain reads the head, not the batch's records: its transaction's audience
    is told, every other subscription checks its member's view first (one read) and
    is sent the token of the change it found there, not the head's."""
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret))
    first = service.apply(Mutation("create", PERSON, tenant, None, None, {}), "carol", OWNER)
    since = first.record.change_token
    devices = {sub: Device(management) for sub in ("alice", "bob", "carol")}
    for sub, device in devices.items():
        device.init([tenant], bearer([tenant], sub=sub)["Authorization"])
        device.subscribe(sub, tenant, since=since)
    stream = TableStream(settings)

    def private(sub: str) -> str:
        mine = Visibility(sub)
        made = Mutation(
            "create", PERSON, tenant, None, None, {}, visibility=mine, sets_visibility=True
        )
        return service.apply(made, sub, OWNER).record.change_token

    bobs = private("bob")  # missed by the fan-out, then the head is Alice's
    alices = private("alice")
    batch = _head_filter(stream.records_until_head_of(tenant))
    message = {"messageId": "m1", "body": json.dumps(_failure_record(stream, batch))}
    queue = {"Records": [{**message, "eventSource": "aws:sqs"}]}
    assert aws.drain_handler(queue) == {"batchItemFailures": []}
    assert _tokens(devices["alice"], "alice") == [alices]  # the head's audience
    # Checked: his view changed (bobs), whose token he is sent, never alice's.
    assert _tokens(devices["bob"], "bob") == [bobs]
    assert _tokens(devices["carol"], "carol") == []  # checked: hers did not
    assert bobs < alices
