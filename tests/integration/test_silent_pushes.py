"""Silent pushes through SNS Mobile Push on the local engine (moto's server, as
`scripts/serve` runs it), DynamoDB Local for the devices: registration and its
bounds, the push of each change to every other device of the tenant, the window,
an endpoint SNS reports disabled, a deleted tenant (docs/realtime.md, "Silent
pushes")."""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from starlette.testclient import TestClient

from api.app import create_app
from api.domain.devices import WRITER_DEVICE
from api.push_setup import make_pushes
from api.settings import Settings
from api.storage import keys
from scripts.local_s3 import LocalS3
from tests.support import sns
from tests.support.gql import GraphQLClient, bearer

pytestmark = pytest.mark.slow

REGISTER = (
    "mutation($i: RegisterPushDeviceInput!) { registerPushDevice(input: $i) { deviceID platform } }"
)
DEVICES = "query($t: ID!) { pushDevices(tenantID: $t) { deviceID platform } }"
UNREGISTER = "mutation($t: ID!, $d: ID!) { unregisterPushDevice(tenantID: $t, deviceID: $d) }"
CREATE = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }"
)


@pytest.fixture(scope="module")
def push_settings(settings: Settings, sns_engine: LocalS3) -> Settings:
    return sns.push_settings(
        settings, sns_engine.endpoint, push_devices_per_member=2, push_devices_per_tenant=3
    )


@pytest.fixture(scope="module")
def http(push_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(push_settings)) as client:
        yield client


def _apns_token() -> str:
    return secrets.token_hex(32)


def _fcm_token() -> str:
    return "fcm:" + secrets.token_urlsafe(120)


def _call(
    http: TestClient,
    query: str,
    variables: dict[str, Any],
    tenants: list[str],
    sub: str,
    device: str | None = None,
) -> dict[str, Any]:
    headers = bearer(tenants, sub=sub)
    if device is not None:
        headers["X-Device-ID"] = device
    body: dict[str, Any] = GraphQLClient(http).execute(query, variables, headers=headers)
    return body


def _register(
    http: TestClient,
    tenant: str,
    sub: str,
    device: str,
    platform: str = "APNS",
    token: str | None = None,
    tenants: list[str] | None = None,
) -> dict[str, Any]:
    token = token or (_apns_token() if platform == "APNS" else _fcm_token())
    variables = {
        "i": {"tenantID": tenant, "platform": platform, "deviceToken": token, "deviceID": device}
    }
    return _call(http, REGISTER, variables, tenants or [tenant], sub)


def _partition(ddb: Any, tenant: str) -> list[dict[str, Any]]:
    answer = ddb.query(
        TableName="sync-test",
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.devices_pk(tenant)}},
        ConsistentRead=True,
    )
    items: list[dict[str, Any]] = answer["Items"]
    return items


def _endpoints(ddb: Any, tenant: str) -> dict[str, str]:
    """Device id -> its endpoint's ARN, as registered."""
    return {i["sk"]["S"][2:]: i["arn"]["S"] for i in _partition(ddb, tenant) if "arn" in i}


def _wait(until: Callable[[], bool], what: str, deadline_s: float = 20.0) -> None:
    end = time.monotonic() + deadline_s
    while not until():
        assert time.monotonic() < end, f"not within {deadline_s} s: {what}"
        time.sleep(0.05)


def _error(body: dict[str, Any]) -> dict[str, Any]:
    assert body.get("errors"), body
    extensions: dict[str, Any] = body["errors"][0]["extensions"]
    return extensions


def test_registration_is_listed_to_its_member_and_bounded(
    http: TestClient, tenant: str, ddb: Any
) -> None:
    assert "errors" not in _register(http, tenant, "ann", "ann-phone")
    assert "errors" not in _register(http, tenant, "ann", "ann-tablet", platform="FCM")
    listed = _call(http, DEVICES, {"t": tenant}, [tenant], "ann")["data"]["pushDevices"]
    assert [(d["deviceID"], d["platform"]) for d in listed] == [
        ("ann-phone", "APNS"),
        ("ann-tablet", "FCM"),
    ]
    assert _call(http, DEVICES, {"t": tenant}, [tenant], "bob")["data"]["pushDevices"] == []

    before = _partition(ddb, tenant)
    refused = _error(_register(http, tenant, "ann", "ann-laptop"))  # 3rd of a member: 2
    assert (refused["code"], refused.get("reason")) == ("QUOTA_EXCEEDED", "PUSH_DEVICES")
    assert _partition(ddb, tenant) == before  # nothing written

    assert "errors" not in _register(http, tenant, "bob", "bob-phone")  # the tenant's 3rd
    refused = _error(_register(http, tenant, "cat", "cat-phone"))  # 4th of the tenant: 3
    assert (refused["code"], refused.get("reason")) == ("QUOTA_EXCEEDED", "PUSH_DEVICES")
    assert "cat-phone" not in _endpoints(ddb, tenant)

    # Unregistering gives the room back; re-registering a device replaces its token.
    assert _call(http, UNREGISTER, {"t": tenant, "d": "bob-phone"}, [tenant], "bob")["data"] == {
        "unregisterPushDevice": True
    }
    assert "errors" not in _register(http, tenant, "cat", "cat-phone")
    assert "errors" not in _register(http, tenant, "ann", "ann-phone")
    counts = {i["sk"]["S"]: int(i["n"]["N"]) for i in _partition(ddb, tenant) if "n" in i}
    assert counts == {"N": 3, "N#ann": 2, "N#bob": 0, "N#cat": 1}


def test_another_tenants_or_members_registration_is_refused(
    http: TestClient, tenant: str, ddb: Any
) -> None:
    other = f"{tenant}-other"
    refused = _error(_register(http, other, "ann", "ann-phone", tenants=[tenant]))
    assert refused["code"] == "FORBIDDEN"
    assert _partition(ddb, other) == []
    forged = GraphQLClient(http).execute(  # a token signed with another key
        REGISTER,
        {
            "i": {
                "tenantID": tenant,
                "platform": "APNS",
                "deviceToken": _apns_token(),
                "deviceID": "ann-phone",
            }
        },
        headers=bearer([tenant], sub="ann", secret="not-the-servers-secret-" + "x" * 20),
    )
    assert _error(forged)["code"] == "UNAUTHENTICATED"
    assert _partition(ddb, tenant) == []
    assert "errors" not in _register(http, tenant, "ann", "ann-phone")
    taken = _error(_register(http, tenant, "bob", "ann-phone"))  # ann's device id
    assert taken["code"] == "FORBIDDEN"
    gone = _call(http, UNREGISTER, {"t": tenant, "d": "ann-phone"}, [tenant], "bob")
    assert gone["data"] == {"unregisterPushDevice": False}
    assert set(_endpoints(ddb, tenant)) == {"ann-phone"}


@pytest.mark.parametrize(
    ("platform", "token", "device"),
    [
        ("APNS", "not-hex" * 10, "d1"),
        ("APNS", "ab" * 20, "d1"),  # too short
        ("FCM", "x" * 5000, "d1"),
        ("FCM", "a b" * 20, "d1"),
        ("APNS", "ab" * 32, "no/slashes"),
    ],
)
def test_malformed_registration_is_bad_input(
    http: TestClient, tenant: str, ddb: Any, platform: str, token: str, device: str
) -> None:
    refused = _error(_register(http, tenant, "ann", device, platform=platform, token=token))
    assert refused["code"] == "BAD_USER_INPUT"
    assert _partition(ddb, tenant) == []


def test_a_change_pushes_every_other_device_once_with_only_its_token(
    http: TestClient, tenant: str, ddb: Any, push_settings: Settings
) -> None:
    for sub, device, platform in [
        ("ann", "ann-phone", "APNS"),
        ("bob", "bob-phone", "FCM"),
        ("bob", "bob-tablet", "APNS"),
    ]:
        assert "errors" not in _register(http, tenant, sub, device, platform=platform)
    arns = _endpoints(ddb, tenant)
    secret = "Zaphod-" + secrets.token_hex(4)
    created = _call(
        http,
        CREATE,
        {"i": {"tenantID": tenant, "person": {"givenName": secret}}},
        [tenant],
        "ann",
        device="ann-phone",
    )
    token = created["data"]["createPerson"]["person"]["changeToken"]
    endpoint = push_settings.sns_endpoint
    assert endpoint is not None

    def pushed() -> dict[str, list[dict[str, Any]]]:
        found = sns.published(endpoint)
        return {d: found.get(arn, []) for d, arn in arns.items()}

    _wait(lambda: all(pushed()[d] for d in ("bob-phone", "bob-tablet")), "the others' pushes")
    got = pushed()
    assert got["ann-phone"] == []  # the writer's device
    assert len(got["bob-phone"]) == len(got["bob-tablet"]) == 1
    for device, platform in [("bob-phone", "FCM"), ("bob-tablet", "APNS")]:
        (message,) = got[device]
        assert secret not in str(message)  # no record data
        body = sns.payload(message, platform)
        if platform == "APNS":
            assert body == {
                "aps": {"content-available": 1},
                "tenantID": tenant,
                "changeToken": token,
            }
        else:
            assert body == {
                "data": {"tenantID": tenant, "changeToken": token},
                "android": {"priority": "NORMAL"},
            }


def test_a_burst_is_one_push_per_device_per_window_the_last_token_last(
    push_settings: Settings, http: TestClient, tenant: str, ddb: Any
) -> None:
    """100 commits within a window: the first is pushed, the other 99 wait; at the
    window's end the flush pushes the last token, once (a clock the test moves)."""
    assert "errors" not in _register(http, tenant, "ann", "ann-phone")
    assert "errors" not in _register(http, tenant, "bob", "bob-phone", platform="FCM")
    arns = _endpoints(ddb, tenant)
    now = [1_000_000]
    pushes = make_pushes(push_settings, lambda: now[0])
    assert pushes is not None
    tokens = [f"01JBURST{n:018d}" for n in range(100)]
    for n, token in enumerate(tokens):
        now[0] += 100  # 100 writes in 10 s, inside the 60 s window
        round_ = pushes.notify(tenant, token, "ann-phone" if n == 99 else None)
        assert sorted(round_.sent) == (
            [("ann-phone", token), ("bob-phone", token)] if n == 0 else []
        )
    assert pushes.flush(tenant).sent == []  # the window is not over
    now[0] += 60_000
    flushed = pushes.flush(tenant)
    assert sorted(flushed.sent) == [("ann-phone", tokens[98]), ("bob-phone", tokens[99])]
    assert pushes.flush(tenant).sent == []  # nothing waits any more
    endpoint = push_settings.sns_endpoint
    assert endpoint is not None
    found = sns.published(endpoint)
    assert [sns.payload(m)["changeToken"] for m in found[arns["ann-phone"]]] == [
        tokens[0],
        tokens[98],  # its own write (the 100th) was not pushed to it
    ]
    assert [sns.payload(m, "FCM")["data"]["changeToken"] for m in found[arns["bob-phone"]]] == [
        tokens[0],
        tokens[99],
    ]


def test_an_endpoint_sns_reports_disabled_is_removed_with_its_registration(
    push_settings: Settings, http: TestClient, tenant: str, ddb: Any
) -> None:
    assert "errors" not in _register(http, tenant, "ann", "ann-phone")
    assert "errors" not in _register(http, tenant, "bob", "bob-phone")
    arns = _endpoints(ddb, tenant)
    client = push_settings.sns_client()
    # What SNS does when APNs or FCM says the token is no longer valid.
    client.set_endpoint_attributes(EndpointArn=arns["bob-phone"], Attributes={"Enabled": "false"})
    pushes = make_pushes(push_settings)
    assert pushes is not None
    done = pushes.notify(tenant, "01JDISABLED000000000000000")
    assert done.removed == ["bob-phone"] and done.sent == [
        ("ann-phone", "01JDISABLED000000000000000")
    ]
    assert set(_endpoints(ddb, tenant)) == {"ann-phone"}
    listed = _call(http, DEVICES, {"t": tenant}, [tenant], "bob")["data"]["pushDevices"]
    assert listed == []
    with pytest.raises(ClientError) as gone:  # its endpoint deleted (DeleteEndpoint)
        client.get_endpoint_attributes(EndpointArn=arns["bob-phone"])
    assert gone.value.response["Error"]["Code"] == "NotFound"
    counts = {i["sk"]["S"]: int(i["n"]["N"]) for i in _partition(ddb, tenant) if "n" in i}
    assert counts == {"N": 1, "N#ann": 1, "N#bob": 0}


def test_a_deleted_tenants_devices_get_nothing_more(
    push_settings: Settings, http: TestClient, tenant: str, ddb: Any
) -> None:
    assert "errors" not in _register(http, tenant, "ann", "ann-phone")
    assert "errors" not in _register(http, tenant, "bob", "bob-phone")
    arns = _endpoints(ddb, tenant)
    created = _call(
        http, CREATE, {"i": {"tenantID": tenant, "person": {"givenName": "A"}}}, [tenant], "ann"
    )
    assert "errors" not in created
    endpoint = str(push_settings.sns_endpoint)
    _wait(lambda: all(sns.published(endpoint).get(a) for a in arns.values()), "first pushes")
    deleted = _call(
        http,
        "mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { done } }",
        {"t": tenant},
        [tenant],
        "ann",
    )
    assert deleted["data"]["deleteTenant"]["done"] is True, deleted
    assert _partition(ddb, tenant) == []  # swept with the tenant
    pushes = make_pushes(push_settings)
    assert pushes is not None
    assert pushes.notify(tenant, "01JAFTERDELETE000000000000").sent == []
    counts = {a: len(sns.published(endpoint).get(a, [])) for a in arns.values()}
    assert counts == {a: 1 for a in arns.values()}


def test_the_writer_device_header_is_carried_to_the_head(
    http: TestClient, tenant: str, ddb: Any
) -> None:
    """What the stream's pushes read (the AWS path): the head names the device."""
    created = _call(
        http,
        CREATE,
        {"i": {"tenantID": tenant, "person": {"givenName": "A"}}},
        [tenant],
        "ann",
        device="ann-phone",
    )
    assert "errors" not in created
    head = ddb.get_item(
        TableName="sync-test",
        Key={"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}},
        ConsistentRead=True,
    )["Item"]
    assert head["dv"] == {"S": "ann-phone"}
    _call(http, CREATE, {"i": {"tenantID": tenant, "person": {"givenName": "B"}}}, [tenant], "ann")
    head = ddb.get_item(
        TableName="sync-test",
        Key={"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}},
        ConsistentRead=True,
    )["Item"]
    assert "dv" not in head
    assert WRITER_DEVICE.get() is None  # the request's, not the test's


def test_a_server_pushes_the_token_that_waited_at_its_windows_end(
    push_settings: Settings, tenant: str, ddb: Any
) -> None:
    """scripts/serve's path: a write within a device's window is pushed when the
    window ends (the server's timer), the newest token of the window last."""
    short = dataclasses.replace(push_settings, push_window_seconds=1.0)
    with TestClient(create_app(short)) as http:
        assert "errors" not in _register(http, tenant, "bob", "bob-phone")
        arn = _endpoints(ddb, tenant)["bob-phone"]
        tokens = [
            _call(
                http,
                CREATE,
                {"i": {"tenantID": tenant, "person": {"givenName": f"P{n}"}}},
                [tenant],
                "ann",
            )["data"]["createPerson"]["person"]["changeToken"]
            for n in range(5)
        ]
        endpoint = str(short.sns_endpoint)

        def pushed() -> list[str]:
            return [sns.payload(m)["changeToken"] for m in sns.published(endpoint).get(arn, [])]

        _wait(lambda: bool(pushed()) and pushed()[-1] == tokens[-1], "the window's last token")
    # The first push holds the newest token when its round ran: tokens[0] on an idle
    # machine, a later one when the server's push thread ran behind the writes.
    assert set(pushed()) <= set(tokens) and len(pushed()) <= len(tokens)
    assert pushed() == sorted(set(pushed()))  # each once, in order


def test_apns_pushes_are_sent_as_background_pushes_at_priority_5(
    push_settings: Settings, http: TestClient, tenant: str, ddb: Any
) -> None:
    """What SNS is asked (the local engine keeps the message, not its attributes):
    APNs' push type and priority as SNS's message attributes, on APNs devices only."""
    assert "errors" not in _register(http, tenant, "ann", "ann-phone")
    assert "errors" not in _register(http, tenant, "bob", "bob-phone", platform="FCM")
    arns = _endpoints(ddb, tenant)
    pushes = make_pushes(push_settings)
    assert pushes is not None
    asked: list[dict[str, Any]] = []

    def seen(params: dict[str, Any], **_: Any) -> None:
        asked.append(dict(params))

    client = pushes._endpoints._client  # type: ignore[attr-defined]
    client.meta.events.register("provide-client-params.sns.Publish", seen)
    assert len(pushes.notify(tenant, "01JATTRIBUTES0000000000000").sent) == 2
    by_arn = {a["TargetArn"]: a for a in asked}
    apns, fcm = by_arn[arns["ann-phone"]], by_arn[arns["bob-phone"]]
    assert apns["MessageStructure"] == fcm["MessageStructure"] == "json"
    assert apns["MessageAttributes"] == {
        "AWS.SNS.MOBILE.APNS.PUSH_TYPE": {"DataType": "String", "StringValue": "background"},
        "AWS.SNS.MOBILE.APNS.PRIORITY": {"DataType": "String", "StringValue": "5"},
    }
    assert "MessageAttributes" not in fcm


def test_registering_again_enables_an_endpoint_sns_had_disabled(
    push_settings: Settings, http: TestClient, tenant: str, ddb: Any
) -> None:
    """An app registers at every start: an endpoint SNS disabled meanwhile (its token
    was reported invalid, then became valid again) is enabled with the token, so the
    next push reaches it instead of removing the registration."""
    token = _apns_token()
    assert "errors" not in _register(http, tenant, "ann", "ann-phone", token=token)
    arn = _endpoints(ddb, tenant)["ann-phone"]
    client = push_settings.sns_client()
    client.set_endpoint_attributes(EndpointArn=arn, Attributes={"Enabled": "false"})
    assert "errors" not in _register(http, tenant, "ann", "ann-phone", token=token)
    attributes = client.get_endpoint_attributes(EndpointArn=arn)["Attributes"]
    assert attributes["Enabled"].lower() == "true"
    pushes = make_pushes(push_settings)
    assert pushes is not None
    done = pushes.notify(tenant, "01JENABLED0000000000000000")
    assert (done.sent, done.removed) == ([("ann-phone", "01JENABLED0000000000000000")], [])
