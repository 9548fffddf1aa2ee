"""A push round for a change of a group's record (contract 3.4.2, 3.12 "Groups"):
the group's members' devices are pushed by the roster the round reads anyway; a
device of a member outside the group costs no read (no Query of its member's access
item, nor of its view). A round of the service's pushes over the real table and SNS
on the local engine, its DynamoDB Queries counted on the store's client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_lambda_app
from api.domain.audiences import of_principals
from api.domain.cursor import CursorCodec
from api.domain.membership import OWNER
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility
from api.ordering import wall_clock_ms
from api.service import SyncService
from api.service.pushes import Pushes
from api.settings import Settings
from api.storage import keys
from api.storage.devices import DeviceTable
from api.storage.lazy_client import LazyClient
from api.storage.push_endpoints import SnsEndpoints
from api.storage.store import DynamoStore
from scripts.local_s3 import LocalS3
from tests.integration.test_push_audiences import _tokens
from tests.integration.test_silent_pushes import _endpoints, _register
from tests.support import family, sns

pytestmark = pytest.mark.slow

OUTSIDERS = 6  # members in no group, a device each


@pytest.fixture(scope="module")
def push_settings(settings: Settings, sns_engine: LocalS3) -> Settings:
    return sns.push_settings(settings, sns_engine.endpoint)


@pytest.fixture(scope="module")
def http(push_settings: Settings) -> Iterator[TestClient]:
    """The Lambda HTTP function: no push round of its own (the test runs the round)."""
    with TestClient(create_lambda_app(push_settings)) as client:
        yield client


def test_a_groups_change_pushes_its_members_by_the_roster_and_reads_nothing_per_outsider(
    push_settings: Settings,
    http: TestClient,
    tenant: str,
    ddb: Any,
    inject: Callable[[str, Callable[..., Any]], None],
) -> None:
    service = SyncService(DynamoStore(), CursorCodec(push_settings.cursor_secret))
    outsiders = [f"out{n}" for n in range(OUTSIDERS)]
    for sub in ["olga", "zed", *outsiders]:
        role, groups = ("OWNER", ["kids"]) if sub == "olga" else ("WRITER", [])
        fields: dict[str, Any] = {"role": role, "groups": groups}
        member = Mutation("create", family.MEMBER, tenant, sub, None, fields)
        service.apply(member, "olga", OWNER, moved=sub != "olga")
    for sub in ["olga", *outsiders]:
        assert "errors" not in _register(http, tenant, sub, f"{sub}-phone")
    arns = _endpoints(ddb, tenant)
    kids = Visibility.of("zed", [], ["kids"])
    made = Mutation(
        "create", family.PERSON, tenant, None, None, {}, visibility=kids, sets_visibility=True
    )
    token = service.apply(made, "zed", OWNER).record.change_token
    pushes = Pushes(  # as api.push_setup.make_pushes wires them
        DeviceTable(),
        SnsEndpoints(LazyClient(push_settings.sns_client), push_settings.push_applications),
        wall_clock_ms,
        members=service.roster_at,
        seen=service.latest_seen,
        roster=DynamoStore().roster,
    )
    partitions: list[str] = []
    inject(
        "provide-client-params.dynamodb.Query",
        lambda params, **_: partitions.append(params["ExpressionAttributeValues"][":pk"]["S"]),
    )
    audience = of_principals(["m:zed", "g:kids"])  # what the commit's audience is
    done = pushes.notify(tenant, token, "zed-phone", audience)
    print(f"Queries of a group change's push round, {OUTSIDERS} outsiders: {partitions}")
    assert done.sent == [("olga-phone", token)]
    pushed = _tokens(push_settings, arns)
    assert pushed["olga-phone"] == [token]
    assert all(pushed[f"{sub}-phone"] == [] for sub in outsiders)
    # The devices' Query and the roster's: none per outsider (before: its access
    # item's and its view's).
    assert sorted(partitions) == sorted([keys.devices_pk(tenant), keys.members_pk(tenant)])
