"""The fan-out function reads a tenant's push devices only where its head says it
has some (docs/realtime.md, "Silent pushes": the head's flag, set by a registration):
a commit of a tenant with no device costs no Query of its device partition, and a
device registered before or after the tenant's first write is still pushed. The
stream handler runs in process on records of DynamoDB Local's stream, SNS and SQS
answered by the local engine (as tests/deploy/test_push_fanout_aws.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from api.push_setup import make_pushes
from api.realtime import aws, push_fanout
from api.settings import Settings
from api.storage import keys
from api.storage.devices import NO_PUSH_DEVICES_ATTRIBUTE
from api.storage.reads import connection
from tests.deploy.test_push_fanout_aws import _write, queue
from tests.deploy.test_realtime_aws import TableStream, _head_filter
from tests.support import sns
from tests.support.gql import GraphQLClient

pytestmark = pytest.mark.serial
__all__ = ["queue"]  # the fixture, imported for these tests


@contextmanager
def device_reads(tenant: str) -> Iterator[list[tuple[str, float]]]:
    """The calls on the tenant's device partition meanwhile, each with the read units
    it consumed (ReturnConsumedCapacity), through the client the devices' table uses."""
    client = connection().client
    calls: list[tuple[str, float]] = []
    wanted = keys.devices_pk(tenant)

    def ask(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        values = params.get("ExpressionAttributeValues", {})
        key = params.get("Key", {})
        context["devices"] = wanted in (
            values.get(":pk", {}).get("S"),
            key.get("pk", {}).get("S"),
        )

    def count(parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if context.get("devices"):
            consumed = parsed.get("ConsumedCapacity") or {}
            calls.append((model.name, float(consumed.get("CapacityUnits", 0.0))))

    client.meta.events.register("provide-client-params.dynamodb", ask)
    client.meta.events.register("after-call.dynamodb", count)
    try:
        yield calls
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb", ask)
        client.meta.events.unregister("after-call.dynamodb", count)


def _head(settings: Settings, tenant: str) -> dict[str, Any]:
    item: dict[str, Any] = settings.dynamodb_client().get_item(
        TableName=settings.table_name,
        Key={"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}},
        ConsistentRead=True,
    )["Item"]
    return item


def test_a_commit_of_a_tenant_without_devices_reads_none(
    queue: tuple[Settings, str, Any], settings: Settings, gql: GraphQLClient, tenant: str
) -> None:
    """The tenant's first write: its round reads the devices, finds none and marks the
    head; the next write's head carries the mark, so its round is not run: no call
    on the device partition, no read unit spent there."""
    for n in range(2):
        stream = TableStream(settings)
        token = _write(gql, tenant, None)
        records = _head_filter(stream.records_until_head_of(tenant))
        assert records[-1]["dynamodb"]["NewImage"]["tok"]["S"] == token
        with device_reads(tenant) as calls:
            assert aws.stream_handler({"Records": records}) == {"sent": 0, "pushed": 0}
        if n == 0:
            assert [name for name, _ in calls] == ["Query"]
            assert NO_PUSH_DEVICES_ATTRIBUTE in _head(settings, tenant)
    assert calls == [], f"the device partition was read: {calls}"


def test_a_device_registered_before_the_first_write_is_pushed_every_write(
    queue: tuple[Settings, str, Any], settings: Settings, gql: GraphQLClient, tenant: str
) -> None:
    """Bob registers before the tenant has a head: the first write's round reads the
    devices, pushes Bob's and leaves the head unmarked; so does the next write's."""
    push_settings, _, _ = queue
    pushes = make_pushes(push_settings)
    assert pushes is not None
    arn = pushes.register("bob", tenant, "APNS", "b3" * 32, "bob-phone").endpoint
    stream = TableStream(settings)
    first = _write(gql, tenant, None)
    records = _head_filter(stream.records_until_head_of(tenant))
    assert aws.stream_handler({"Records": records}) == {"sent": 0, "pushed": 1}
    found = sns.published(str(push_settings.sns_endpoint))
    assert [sns.payload(m)["changeToken"] for m in found[arn]] == [first]
    assert NO_PUSH_DEVICES_ATTRIBUTE not in _head(settings, tenant)

    stream = TableStream(settings)
    _write(gql, tenant, None)
    records = _head_filter(stream.records_until_head_of(tenant))
    assert tenant in push_fanout.writes(records)
    with device_reads(tenant) as calls:
        aws.stream_handler({"Records": records})  # within Bob's window: it waits
    assert [name for name, _ in calls][:1] == ["Query"]


def test_a_registration_removes_the_mark_and_its_change_pushes_the_newest(
    queue: tuple[Settings, str, Any], settings: Settings, gql: GraphQLClient, tenant: str
) -> None:
    """Writes before any device: the head is marked, no round runs. Cat registers:
    her transaction removes the mark, a change of the head the stream carries with
    the newest token, whose round pushes it to Cat's device (so a write the
    registration raced is not missed); registering again writes no head change,
    and the next write's round runs."""
    push_settings, _, _ = queue
    stream = TableStream(settings)
    _write(gql, tenant, None)
    aws.stream_handler({"Records": _head_filter(stream.records_until_head_of(tenant))})
    stream = TableStream(settings)
    newest = _write(gql, tenant, None)
    records = _head_filter(stream.records_until_head_of(tenant))
    assert push_fanout.writes(records) == {}

    pushes = make_pushes(push_settings)
    assert pushes is not None
    stream = TableStream(settings)
    arn = pushes.register("cat", tenant, "APNS", "c4" * 32, "cat-phone").endpoint
    records = _head_filter(stream.records_until_head_of(tenant))
    image = records[-1]["dynamodb"]["NewImage"]
    assert NO_PUSH_DEVICES_ATTRIBUTE not in image and image["tok"]["S"] == newest
    assert aws.stream_handler({"Records": records}) == {"sent": 0, "pushed": 1}
    found = sns.published(str(push_settings.sns_endpoint))
    assert [sns.payload(m)["changeToken"] for m in found[arn]] == [newest]

    pushes.register("cat", tenant, "APNS", "c4" * 32, "cat-phone")  # an app's next start
    stream = TableStream(settings)
    later = _write(gql, tenant, None)
    records = _head_filter(stream.records_until_head_of(tenant))
    assert [r["dynamodb"]["NewImage"]["tok"]["S"] for r in records] == [later]
    assert tenant in push_fanout.writes(records)


def test_a_registration_racing_the_mark_keeps_the_head_unmarked(
    queue: tuple[Settings, str, Any], settings: Settings, gql: GraphQLClient, tenant: str
) -> None:
    """A round read no device, then Dan registered before its mark: the mark is not
    set (its transaction checks the tenant's count of devices), so the next write's
    round reads Dan's device."""
    push_settings, _, _ = queue
    _write(gql, tenant, None)
    pushes = make_pushes(push_settings)
    assert pushes is not None
    assert pushes.flush(tenant).devices == 0  # a round's read: none
    pushes.register("dan", tenant, "APNS", "d5" * 32, "dan-phone")
    assert pushes.mark_empty(tenant) is False
    assert NO_PUSH_DEVICES_ATTRIBUTE not in _head(settings, tenant)
