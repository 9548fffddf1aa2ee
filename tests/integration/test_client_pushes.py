"""The reference client acts on a silent push: it syncs only when the push's token is
ahead of its copy's, and its writes name its device (docs/realtime.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sync_client import HttpTransport, SyncClient

from api.settings import Settings
from api.storage import keys
from tests.convergence.checker import SECRET, environment
from tests.support.gql import bearer


@pytest.fixture(scope="module")
def url(settings: Settings) -> Iterator[str]:
    with environment(settings) as ([server_url], _, _):
        yield server_url


class Counted(HttpTransport):
    def __init__(self, url: str, token: str) -> None:
        super().__init__(url, token)
        self.requests = 0

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        return super().execute(query, variables)


def _device(url: str, tmp_path: Path, name: str, tenant: str) -> tuple[SyncClient, Counted]:
    token = bearer([tenant], secret=SECRET)["Authorization"].split()[1]
    transport = Counted(url, token)
    client = SyncClient(tmp_path / f"{name}.sqlite3", tenant, transport, device_id=name)
    return client, transport


def test_a_push_ahead_of_the_copy_syncs_and_one_not_ahead_makes_no_request(
    url: str, tmp_path: Path, tenant: str, ddb: Any, settings: Settings
) -> None:
    ann, _ = _device(url, tmp_path, "ann-phone", tenant)
    bob, sent = _device(url, tmp_path, "bob-phone", tenant)
    ann.create("Person", {"givenName": "Ann"})
    ann.sync()
    head = ddb.get_item(
        TableName=settings.table_name,
        Key={"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}},
        ConsistentRead=True,
    )["Item"]
    assert head["dv"] == {"S": "ann-phone"}  # its writes name its device
    token = head["tok"]["S"]

    report = bob.on_push({"tenantID": tenant, "changeToken": token})
    assert report is not None and report.pulled == 1
    assert [i["givenName"] for i in bob.items().values()] == ["Ann"]
    before = sent.requests
    assert bob.on_push({"tenantID": tenant, "changeToken": token}) is None  # not ahead
    assert bob.on_push({"tenantID": "another", "changeToken": "9" * 26}) is None
    assert bob.on_push({"tenantID": tenant}) is None
    assert sent.requests == before
