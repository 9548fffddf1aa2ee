"""Silent pushes on the AWS path without AWS: the fan-out function's stream handler
and the push queue's handler run in-process through their Lambda entry points, on
records read from DynamoDB Local's stream of the table, SNS and SQS answered by the
local engine (moto's server)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from api.domain.cursor import CursorCodec
from api.domain.membership import OWNER
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility
from api.graphql.context import RELEASE_HEADER
from api.push_setup import make_pushes
from api.realtime import aws
from api.service import SyncService
from api.settings import Settings
from api.storage.store import DynamoStore
from scripts.local_s3 import LocalS3
from tests.deploy.test_realtime_aws import TableStream, _emf, _failure_record, _head_filter
from tests.support import sns
from tests.support.family import PERSON
from tests.support.gql import GraphQLClient, bearer

pytestmark = pytest.mark.serial

CREATE = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }"
)


@pytest.fixture
def queue(
    settings: Settings, sns_engine: LocalS3, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Settings, str, Any]]:
    """The fan-out's environment with pushes on (serverless.yml's), a window of 1 s."""
    local = settings.__class__(**{**settings.__dict__, "sns_endpoint": sns_engine.endpoint})
    arns = sns.applications(local.sns_client())
    import boto3

    client = boto3.client("sqs", region_name=local.aws_region, endpoint_url=sns_engine.endpoint)
    url = client.create_queue(QueueName="sync-push-flushes")["QueueUrl"]
    env = {
        "SNS_ENDPOINT": sns_engine.endpoint,
        "PUSH_APNS_APPLICATION_ARN": arns["APNS"],
        "PUSH_FCM_APPLICATION_ARN": arns["FCM"],
        "PUSH_QUEUE_URL": url,
        "PUSH_WINDOW_SECONDS": "1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    aws._runtime.cache_clear()
    yield Settings.from_env(), url, client
    aws._runtime.cache_clear()


def _write(gql: GraphQLClient, tenant: str, device: str | None) -> str:
    headers = bearer([tenant], sub="ann")
    if device is not None:
        headers["X-Device-ID"] = device
    body = gql.execute(
        CREATE, {"i": {"tenantID": tenant, "person": {"givenName": "Ann"}}}, headers=headers
    )
    token: str = body["data"]["createPerson"]["person"]["changeToken"]
    return token


def test_the_stream_pushes_every_other_device_and_the_queue_the_windows_last_token(
    queue: tuple[Settings, str, Any],
    settings: Settings,
    gql: GraphQLClient,
    tenant: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    push_settings, url, sqs = queue
    # The second write must come within bob's devices' window of the first push: 1 s
    # was too short at a load average of 13 (a third push, {'pushed': 3}).
    monkeypatch.setenv("PUSH_WINDOW_SECONDS", "8")
    aws._runtime.cache_clear()
    pushes = make_pushes(push_settings)
    assert pushes is not None
    arns = {
        d: pushes.register(sub, tenant, platform, token, d).endpoint
        for sub, d, platform, token in [
            ("ann", "ann-phone", "APNS", "a1" * 32),
            ("bob", "bob-phone", "FCM", "fcm:" + "b" * 140),
            ("bob", "bob-tablet", "APNS", "b2" * 32),
        ]
    }
    stream = TableStream(settings)
    first = _write(gql, tenant, "ann-phone")
    records = _head_filter(stream.records_until_head_of(tenant))
    assert aws.stream_handler({"Records": records}) == {"sent": 0, "pushed": 2}
    endpoint = str(push_settings.sns_endpoint)
    found = sns.published(endpoint)
    assert found[arns["ann-phone"]] == []  # the writer's device
    assert [sns.payload(m)["changeToken"] for m in found[arns["bob-tablet"]]] == [first]
    # A retried batch pushes nothing again (each device's claim holds).
    assert aws.stream_handler({"Records": records}) == {"sent": 0, "pushed": 0}

    # Within bob's devices' window: kept waiting, the tenant put on the push queue;
    # ann's device, not pushed yet, is pushed at once.
    stream = TableStream(settings)
    second = _write(gql, tenant, None)
    records = _head_filter(stream.records_until_head_of(tenant))
    assert aws.stream_handler({"Records": records}) == {"sent": 0, "pushed": 1}
    messages: list[dict[str, Any]] = []
    for _ in range(15):  # the message is delayed to the window's end (8 s)
        messages = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2).get("Messages", [])
        if messages:
            break
    (message,) = messages
    assert json.loads(message["Body"]) == {"tenantID": tenant}
    flushed = aws.push_flush_handler(
        {"Records": [{"body": message["Body"], "messageId": message["MessageId"]}]}
    )
    assert flushed == {"batchItemFailures": []}
    found = sns.published(endpoint)
    assert [sns.payload(m)["changeToken"] for m in found[arns["ann-phone"]]] == [second]
    assert [sns.payload(m)["changeToken"] for m in found[arns["bob-tablet"]]] == [first, second]
    fcm = [sns.payload(m, "FCM")["data"]["changeToken"] for m in found[arns["bob-phone"]]]
    assert fcm == [first, second]
    # What the functions counted (their EMF lines): 2 + 1 pushes from the stream, 2
    # from the queue, none failed.
    emitted = _emf(capsys)
    assert emitted["fanout"] == {"SilentPushesSent": 3}
    assert emitted["pushes"] == {"SilentPushesSent": 2}


def test_the_streams_pushes_go_to_the_changes_audience_and_to_members_only(
    queue: tuple[Settings, str, Any], settings: Settings, gql: GraphQLClient, tenant: str
) -> None:
    """The Lambda path's rule is the pokes' (the head's image: `vis`, `mt`, `vp`): Ann's
    private record pushes her device alone. In a tenant of membership as data, Bob's
    removal (a change of every member's view) pushes Cat's device, not Bob's."""
    push_settings, _, _ = queue
    pushes = make_pushes(push_settings)
    assert pushes is not None
    arns = {
        # Tokens of their own: SNS has one endpoint per token, whichever test made it.
        d: pushes.register(sub, tenant, "APNS", secrets.token_hex(32), d).endpoint
        for sub, d in [("ann", "ann-phone"), ("bob", "bob-phone"), ("cat", "cat-phone")]
    }
    endpoint = str(push_settings.sns_endpoint)

    def pushed() -> dict[str, list[str]]:
        found = sns.published(endpoint)
        return {d: [sns.payload(m)["changeToken"] for m in found[a]] for d, a in arns.items()}

    def run(sub: str, query: str, i: dict[str, Any]) -> Any:
        headers = {**bearer([tenant], sub=sub), RELEASE_HEADER: "3"}
        body = gql.execute(query, {"i": {"tenantID": tenant, **i}}, headers=headers)
        assert not body.get("errors"), body
        return body["data"]

    stream = TableStream(settings)
    private = {"person": {"givenName": "Ann"}, "visibility": {"sharedWith": []}}
    mine = run("ann", CREATE, private)["createPerson"]["person"]["changeToken"]
    records = _head_filter(stream.records_until_head_of(tenant))
    assert aws.stream_handler({"Records": records}) == {"sent": 0, "pushed": 1}
    assert pushed() == {"ann-phone": [mine], "bob-phone": [], "cat-phone": []}

    member = (
        "mutation($i: CreateMemberInput!) { createMember(input: $i) { member { changeToken } } }"
    )
    run("olga", member, {"id": "olga", "member": {"role": "OWNER"}})
    run("olga", member, {"id": "cat", "member": {"role": "WRITER"}})
    bob = run("olga", member, {"id": "bob", "member": {"role": "WRITER"}})["createMember"]
    stream = TableStream(settings)
    delete = "mutation($i: DeleteMemberInput!) { deleteMember(input: $i) { deletedItem { id } } }"
    run("olga", delete, {"id": "bob", "changeToken": bob["member"]["changeToken"]})
    records = _head_filter(stream.records_until_head_of(tenant))
    # Ann (no Member record) and Bob (removed) are no members: Cat's device alone.
    assert aws.stream_handler({"Records": records}) == {"sent": 0, "pushed": 1}
    assert [len(tokens) for tokens in pushed().values()] == [1, 0, 1]


def test_a_drained_batch_of_private_changes_pushes_only_whose_view_changed(
    queue: tuple[Settings, str, Any],
    settings: Settings,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The drain reads the head, not the batch's records (a catch-up): the head
    transaction's audience is pushed; each other device only once its member's view
    is read and has a change after the token last pushed to it (UNTOLD), as the
    drain's pokes check each other subscription."""
    monkeypatch.setenv("PUSH_WINDOW_SECONDS", "0")  # every round pushes at once
    aws._runtime.cache_clear()
    push_settings = Settings.from_env()
    pushes = make_pushes(push_settings)
    assert pushes is not None
    subs = ("alice", "bob", "carol")
    arns = {s: pushes.register(s, tenant, "APNS", secrets.token_hex(32), s).endpoint for s in subs}
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret))
    stream = TableStream(settings)
    first = service.apply(Mutation("create", PERSON, tenant, None, None, {}), "carol", OWNER)
    records = _head_filter(stream.records_until_head_of(tenant))
    assert aws.stream_handler({"Records": records}) == {"sent": 0, "pushed": 3}
    stream = TableStream(settings)

    def private(sub: str) -> str:
        mine = Mutation(
            "create",
            PERSON,
            tenant,
            None,
            None,
            {},
            visibility=Visibility(sub),
            sets_visibility=True,
        )
        return service.apply(mine, sub, OWNER).record.change_token

    bobs = private("bob")  # missed by the fan-out, then the head is Alice's
    alices = private("alice")
    batch = _head_filter(stream.records_until_head_of(tenant))
    message = {"messageId": "m1", "body": json.dumps(_failure_record(stream, batch))}
    assert aws.drain_handler({"Records": [{**message, "eventSource": "aws:sqs"}]}) == {
        "batchItemFailures": []
    }
    found = sns.published(str(push_settings.sns_endpoint))
    pushed = {s: [sns.payload(m)["changeToken"] for m in found[a]] for s, a in arns.items()}
    assert first.record.change_token < bobs < alices
    # Alice: the head's audience; Bob: checked, his view changed, with his change's
    # token (never Alice's); Carol's did not since her device's last push.
    start = [first.record.change_token]
    assert pushed == {"alice": [*start, alices], "bob": [*start, bobs], "carol": start}


def test_a_batchs_coalesced_private_changes_hand_no_member_anothers_token(
    queue: tuple[Settings, str, Any],
    settings: Settings,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bob's private change then Alice's in one stream batch: one round, Alice's token
    for her device; Bob's, UNTOLD for it, pushed his own change's token once his view
    is read (never Alice's, whose time it would tell); Carol's device nothing."""
    monkeypatch.setenv("PUSH_WINDOW_SECONDS", "0")
    aws._runtime.cache_clear()
    push_settings = Settings.from_env()
    pushes = make_pushes(push_settings)
    assert pushes is not None
    subs = ("alice", "bob", "carol")
    arns = {s: pushes.register(s, tenant, "APNS", secrets.token_hex(32), s).endpoint for s in subs}
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret))
    stream = TableStream(settings)
    made = {}
    for sub in ("bob", "alice"):
        mine = Mutation(
            "create",
            PERSON,
            tenant,
            None,
            None,
            {},
            visibility=Visibility(sub),
            sets_visibility=True,
        )
        made[sub] = service.apply(mine, sub, OWNER).record.change_token
    records = _head_filter(stream.records_until_head_of(tenant))
    assert aws.stream_handler({"Records": records}) == {"sent": 0, "pushed": 2}
    found = sns.published(str(push_settings.sns_endpoint))
    pushed = {s: [sns.payload(m)["changeToken"] for m in found[a]] for s, a in arns.items()}
    assert pushed == {"alice": [made["alice"]], "bob": [made["bob"]], "carol": []}
