"""A change of a group's record on the AWS fan-out (contract 3.4.1, 3.12 "Groups"):
its group's members are poked by the roster the fan-out reads anyway, and a
subscriber outside the group costs no read of its own (no Query of its access item,
nor of its view). Through the Lambda handlers on DynamoDB Local, the DynamoDB
Queries counted on both of the handlers' clients."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from api.domain.cursor import CursorCodec
from api.domain.membership import OWNER
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility
from api.realtime import aws
from api.service import SyncService
from api.settings import Settings
from api.storage import keys, models
from api.storage.store import DynamoStore
from tests.deploy.test_realtime_aws import (
    Device,
    TableStream,
    _head_filter,
    _lambda_environment,
    _tokens,
    management,
)
from tests.support import family
from tests.support.faults import hooks_on
from tests.support.gql import bearer
from tests.support.management_api import ManagementApi

pytestmark = pytest.mark.serial

__all__ = ["_lambda_environment", "management"]  # the fixtures

OUTSIDERS = 6  # members in no group, each with a subscription


class _Queries:
    """The partitions of the DynamoDB Queries sent on the clients it hooks."""

    def __init__(self) -> None:
        self.partitions: list[str] = []

    def __call__(self, params: dict[str, Any], **_: Any) -> None:
        self.partitions.append(params["ExpressionAttributeValues"][":pk"]["S"])


@pytest.fixture
def queries() -> Iterator[_Queries]:
    counted = _Queries()
    clients = [
        models.RecordItem._get_connection().connection.client,  # the service's store
        aws._runtime().connections.client,  # the subscriptions' items
    ]
    with hooks_on(clients[0].meta.events) as first, hooks_on(clients[1].meta.events) as second:
        for register in (first, second):
            register("provide-client-params.dynamodb.Query", counted)
        yield counted


def _members(service: SyncService, tenant: str) -> list[str]:
    """olga (an owner in kids), zed (a writer, no group) and the outsiders (writers in
    no group), members as data; the subs of those subscribing."""
    subs = ["olga", "zed", *(f"out{n}" for n in range(OUTSIDERS))]
    for sub in subs:
        role, groups = ("OWNER", ["kids"]) if sub == "olga" else ("WRITER", [])
        fields: dict[str, Any] = {"role": role, "groups": groups}
        mutation = Mutation("create", family.MEMBER, tenant, sub, None, fields)
        service.apply(mutation, "olga", OWNER, moved=sub != "olga")
    return [s for s in subs if s != "zed"]


def test_a_groups_change_pokes_its_members_by_the_roster_and_reads_nothing_per_outsider(
    management: ManagementApi, settings: Settings, tenant: str, queries: _Queries
) -> None:
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret))
    subs = _members(service, tenant)
    since = service.latest_change(tenant, None)
    devices = {sub: Device(management) for sub in subs}
    for sub, device in devices.items():
        device.init([tenant], bearer([tenant], sub=sub)["Authorization"])
        device.subscribe(sub, tenant, since=since)
    stream = TableStream(settings)
    kids = Visibility.of("zed", [], ["kids"])
    made = Mutation(
        "create", family.PERSON, tenant, None, None, {}, visibility=kids, sets_visibility=True
    )
    token = service.apply(made, "zed", OWNER).record.change_token
    batch = _head_filter(stream.records_until_head_of(tenant))
    queries.partitions.clear()
    assert aws.stream_handler({"Records": batch}) == {"sent": 1}
    assert _tokens(devices["olga"], "olga") == [token]
    assert all(_tokens(devices[s], s) == [] for s in subs if s != "olga")
    # The subscriptions' Query and the roster's: none per outsider (before, each read
    # its access item and its view).
    print(f"Queries of a group change's fan-out, {OUTSIDERS} outsiders: {queries.partitions}")
    assert sorted(queries.partitions) == sorted(
        [keys.subscriptions_pk(tenant), keys.members_pk(tenant)]
    ), queries.partitions
