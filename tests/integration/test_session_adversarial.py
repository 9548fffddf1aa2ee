"""Adversarial probes of a removed member (contract 6, role REMOVED) and its push
registrations (docs/realtime.md, "Silent pushes"): what removes a registration must
not remove one the member (or its app) made again meanwhile, nor push a removed
member's device; each race is forced at the instant AWS allows it, between a round's
read and its removal, by a wrapper around the real reads and SNS calls (DynamoDB Local
and SNS on the local engine do the rest). And guards: two owners removing each other
leave one; a re-added member's device, syncing from its token of before the removal,
ends with exactly its member's view."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_lambda_app
from api.domain.cursor import CursorCodec
from api.domain.errors import RoleForbidden
from api.domain.membership import OWNER, Roster
from api.domain.mutations import Mutation
from api.ordering import wall_clock_ms
from api.service import SyncService
from api.service.membership import Membership
from api.service.pushes import Pushes
from api.settings import Settings
from api.storage.devices import DeviceTable
from api.storage.lazy_client import LazyClient
from api.storage.push_endpoints import SnsEndpoints
from api.storage.store import DynamoStore
from scripts.local_s3 import LocalS3
from tests.integration.test_members import CREATE as CREATE_MEMBER
from tests.integration.test_members import _moved_role
from tests.integration.test_push_audiences import MEMBER, _data
from tests.integration.test_silent_pushes import CREATE, _apns_token, _endpoints, _register
from tests.integration.test_visibility_sync import Device, Member, _view
from tests.support import family, sns
from tests.support.gql import GraphQLClient
from tests.support.store_state import tenant_state

pytestmark = pytest.mark.slow

UPDATE_MEMBER = (
    "mutation($i: UpdateMemberInput!) { updateMember(input: $i) { member { changeToken role } } }"
)


@pytest.fixture(scope="module")
def push_settings(settings: Settings, sns_engine: LocalS3) -> Settings:
    local = dataclasses.replace(settings, sns_endpoint=sns_engine.endpoint)
    arns = sns.applications(local.sns_client())
    return dataclasses.replace(
        local,
        push_apns_application_arn=arns["APNS"],
        push_fcm_application_arn=arns["FCM"],
        push_window_seconds=60.0,
    )


@pytest.fixture(scope="module")
def http(push_settings: Settings) -> Iterator[TestClient]:
    """The Lambda HTTP function: it runs no push round of its own, so each round here
    is the test's, at the instant it chooses."""
    with TestClient(create_lambda_app(push_settings)) as client:
        yield client


class _Endpoints(SnsEndpoints):
    """SNS, with `before_publish` run once before the first Publish (a race)."""

    def __init__(self, settings: Settings, before_publish: Callable[[], None]) -> None:
        super().__init__(LazyClient(settings.sns_client), settings.push_applications)
        self._before: Callable[[], None] | None = before_publish

    def publish(self, endpoint: str, platform: str, message: str) -> str:
        if self._before is not None:
            before, self._before = self._before, None
            before()
        return super().publish(endpoint, platform, message)


def _pushes(
    settings: Settings,
    before_publish: Callable[[], None] = lambda: None,
    roster: Callable[[str], Roster] | None = None,
    clock_ms: Callable[[], int] = wall_clock_ms,
    members: Callable[[str, str], Roster] | None = None,
) -> Pushes:
    """The service's pushes as `api.push_setup.make_pushes` wires them, over the real
    table and SNS, with the race hooks."""
    return Pushes(
        DeviceTable(),
        _Endpoints(settings, before_publish),
        clock_ms,
        members=members,
        window_s=settings.push_window_seconds,
        per_member=settings.push_devices_per_member,
        per_tenant=settings.push_devices_per_tenant,
        roster=roster or DynamoStore().roster,
    )


def _set_role(http: TestClient, tenant: str, sub: str, token: str, role: str) -> str:
    """Olga sets `sub`'s Member record to `role`: the record's new change token."""
    change = {"tenantID": tenant, "id": sub, "changeToken": token, "changes": {"role": role}}
    member = _data(http, UPDATE_MEMBER, {"i": change}, tenant, "olga")["updateMember"]["member"]
    assert member["role"] == role
    new: str = member["changeToken"]
    return new


def _bob_member(http: TestClient, tenant: str) -> str:
    """Olga owns the tenant (membership as data), Bob is a writer: his record's token."""
    owner = {"tenantID": tenant, "id": "olga", "member": {"role": "OWNER"}}
    _data(http, MEMBER, {"i": owner}, tenant, "olga")
    bob = {"tenantID": tenant, "id": "bob", "member": {"role": "WRITER"}}
    token: str = _data(http, MEMBER, {"i": bob}, tenant, "olga")["createMember"]["member"][
        "changeToken"
    ]
    return token


def test_a_token_reported_invalid_does_not_remove_the_registration_made_again_meanwhile(
    push_settings: Settings, http: TestClient, tenant: str, ddb: Any
) -> None:
    """APNs invalidates Bob's old token and his app registers its new one (same deviceID)
    while a round that read the old registration pushes to it: SNS says the old
    endpoint is disabled, and the round removes the registration it read, not the new
    one, which Bob's app was just told it holds."""
    _bob_member(http, tenant)
    assert "errors" not in _register(http, tenant, "bob", "bob-phone")
    old = _endpoints(ddb, tenant)["bob-phone"]
    # What SNS does when APNs says the token is no longer valid.
    client = push_settings.sns_client()
    client.set_endpoint_attributes(EndpointArn=old, Attributes={"Enabled": "false"})

    def new_token() -> None:
        answer = _register(http, tenant, "bob", "bob-phone", token=_apns_token())
        assert "errors" not in answer, answer

    done = _pushes(push_settings, before_publish=new_token).notify(
        tenant, "01JRACE0000000000000000000"
    )
    assert done.removed == ["bob-phone"]  # the old endpoint, reported gone
    registered = _endpoints(ddb, tenant)
    assert "bob-phone" in registered, "the registration made after the round's read is gone"
    assert registered["bob-phone"] != old


def test_the_sweep_keeps_the_registration_of_a_member_re_added_since_its_roster_read(
    push_settings: Settings, http: TestClient, tenant: str, ddb: Any
) -> None:
    """Bob is removed (role REMOVED) with his phone registered; a sweep reads the roster
    (Bob absent), then Olga re-adds Bob and his app registers at its start (the same
    token: nothing to write, it is told it holds the registration), then the sweep
    removes what it read. Bob, a member again, must keep his registration."""
    bob = _bob_member(http, tenant)
    token = _apns_token()
    assert "errors" not in _register(http, tenant, "bob", "bob-phone", token=token)
    removed = _set_role(http, tenant, "bob", bob, "REMOVED")

    def roster_then_re_added(tenant_id: str) -> Roster:
        read = DynamoStore().roster(tenant_id)
        assert read.access("bob").role is None  # read while Bob is removed
        _set_role(http, tenant, "bob", removed, "WRITER")
        answer = _register(http, tenant, "bob", "bob-phone", token=token)
        assert "errors" not in answer, answer
        return read

    pushes = _pushes(push_settings, roster=roster_then_re_added)
    pushes.sweep(tenant, DeviceTable().devices(tenant))
    assert "bob-phone" in _endpoints(ddb, tenant), (
        "a re-added member's registration was swept as a former member's"
    )


def test_a_flush_after_a_removal_pushes_the_removed_members_device_nothing(
    push_settings: Settings, http: TestClient, tenant: str, ddb: Any
) -> None:
    """Bob's device is pushed a change, then a second one waits for its window; Olga
    removes Bob; the window's flush (the `pushflush` function, whose process keeps the
    roster it read for the waiting token) must push Bob's device nothing more, and
    remove its registration, as the round after a removal does."""
    _bob_member(http, tenant)
    assert "errors" not in _register(http, tenant, "bob", "bob-phone")
    cat = {"tenantID": tenant, "id": "cat", "member": {"role": "WRITER"}}
    added = _data(http, MEMBER, {"i": cat}, tenant, "olga")
    first = added["createMember"]["member"]["changeToken"]
    person = _data(http, CREATE, {"i": {"tenantID": tenant, "person": {}}}, tenant, "olga")
    second = person["createPerson"]["person"]["changeToken"]
    now = [wall_clock_ms()]
    rosters = Membership(DynamoStore())  # one process's, as the flush function's runtime
    pushes = _pushes(push_settings, clock_ms=lambda: now[0], members=rosters.roster_at)
    assert pushes.notify(tenant, first).sent == [("bob-phone", first)]
    now[0] += 1_000
    waiting = pushes.notify(tenant, second)
    assert waiting.sent == [] and waiting.due_ms is not None  # within Bob's window
    bob_record = DynamoStore().get(tenant, "bob")
    assert bob_record is not None
    _set_role(http, tenant, "bob", bob_record.change_token, "REMOVED")
    now[0] = waiting.due_ms + 1
    flushed = pushes.flush(tenant)
    assert flushed.sent == [], "a removed member's device was pushed after its removal"
    assert "bob-phone" not in _endpoints(ddb, tenant)


def test_two_owners_setting_each_other_removed_at_once_leave_one_owner(
    settings: Settings, tenant: str, ddb: Any
) -> None:
    """Guard: both requests found their caller an owner; Olga's REMOVED commits first,
    so Pat's (its writer's access item gone with the role) fails its check and
    writes nothing (as for deletions, test_members)."""
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret))

    def role(verb: Any, sub: str, token: str | None, value: str) -> Mutation:
        return Mutation(verb, family.MEMBER, tenant, sub, token, {"role": value})

    olga = service.apply(role("create", "olga", None, "OWNER"), "olga", OWNER)
    pat = service.apply(role("create", "pat", None, "OWNER"), "olga", OWNER, moved=True)
    service.apply(role("update", "pat", pat.record.change_token, "REMOVED"), "olga", OWNER, True)
    before = tenant_state(ddb, settings.table_name, tenant)
    with pytest.raises(RoleForbidden):
        service.apply(
            role("update", "olga", olga.record.change_token, "REMOVED"), "pat", OWNER, True
        )
    assert tenant_state(ddb, settings.table_name, tenant) == before
    assert _moved_role(service.access(tenant, "olga")) == (True, OWNER)
    assert _moved_role(service.access(tenant, "pat")) == (True, None)


def test_a_re_added_members_device_syncs_from_its_old_token_to_exactly_its_view(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """Guard: Bob's device holds his view; Bob is removed (its syncs refused), and
    meanwhile a record shared with him is made private, a private one is shared with
    him and a tenant-wide one is written; re-added, his device follows `changes` from
    its token of before and ends with exactly his view (the record that left it as a
    LeftViewItem)."""
    olga, bob = Member(gql, tenant, "olga", role="owner"), Member(gql, tenant, "bob")
    own = {"tenantID": tenant, "id": "olga", "member": {"role": "OWNER"}}
    olga.data(CREATE_MEMBER, {"i": own})
    added = {"tenantID": tenant, "id": "bob", "member": {"role": "WRITER"}}
    record = olga.data(CREATE_MEMBER, {"i": added})["createMember"]["member"]
    tokens = {"p1": olga.create("p1", ["bob"]), "p2": olga.create("p2", [])}
    device = Device(bob)
    device.sync()
    assert {"p1", "olga", "bob"} <= set(device.held) and "p2" not in device.held
    change = {"tenantID": tenant, "id": "bob", "changeToken": record["changeToken"]}
    removed = _data_of(olga, UPDATE_MEMBER, {**change, "changes": {"role": "REMOVED"}})
    refused = bob.call("query($t: ID!) { changes(tenantID: $t) { changeToken } }", {"t": tenant})
    assert refused["errors"][0]["extensions"]["code"] == "FORBIDDEN", refused
    olga.share("p1", tokens["p1"], [])  # leaves Bob's view while he is removed
    olga.share("p2", tokens["p2"], ["bob"])  # enters it
    olga.create("p3", None)  # tenant-wide
    again = {"tenantID": tenant, "id": "bob", "changeToken": removed, "changes": {"role": "WRITER"}}
    _data_of(olga, UPDATE_MEMBER, again)
    device.sync()
    assert device.held == _view(ddb, settings, tenant, "bob")
    assert "p1" not in device.held and {"p2", "p3"} <= set(device.held)
    assert "LeftViewItem" in device.seen


def _data_of(member: Member, query: str, change: dict[str, Any]) -> str:
    """The Member record's new change token after `query` (UPDATE_MEMBER)."""
    token: str = member.data(query, {"i": change})["updateMember"]["member"]["changeToken"]
    return token
