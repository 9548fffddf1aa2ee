"""The reference client against a real server: offline edits, conflicts, crashes."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sync_client import HttpTransport, SyncClient, TransportError

from api.domain.catalog import RELEASE
from api.settings import Settings
from tests.convergence.checker import SECRET, environment
from tests.convergence.faults import FaultyTransport
from tests.support.gql import bearer


@pytest.fixture(scope="module")
def url(settings: Settings) -> Iterator[str]:
    with environment(settings) as ([server_url], _, _):
        yield server_url


def _device(url: str, tmp_path: Path, name: str, tenant: str, **rates: float) -> SyncClient:
    token = bearer([tenant], secret=SECRET)["Authorization"].split()[1]
    transport = FaultyTransport(HttpTransport(url, token), random.Random(1), rates)
    return SyncClient(tmp_path / f"{name}.sqlite3", tenant, transport)


def test_two_devices_edit_offline_conflict_and_converge(
    url: str, tmp_path: Path, tenant: str
) -> None:
    phone, tablet = (_device(url, tmp_path, n, tenant) for n in ("phone", "tablet"))
    ann = phone.create("Person", {"givenName": "Ann", "familyName": "Lee"})
    phone.sync()
    tablet.sync()
    assert tablet.get(ann) == phone.get(ann)

    phone.update(ann, {"givenName": "Anna", "occupation": "pilot"})  # both offline
    tablet.update(ann, {"givenName": "Annie", "familyName": "Kim"})
    first = phone.sync()
    second = tablet.sync()
    assert first.applied == 1 and second.conflicts == 1
    phone.sync()
    # givenName: the server's (phone's) value wins; the tablet's familyName survives.
    expected = {
        "__typename": "Person",
        "givenName": "Anna",
        "familyName": "Kim",
        "occupation": "pilot",
    }
    assert phone.get(ann) == tablet.get(ann) == expected


def test_a_deletion_wins_over_a_concurrent_edit(url: str, tmp_path: Path, tenant: str) -> None:
    phone, tablet = (_device(url, tmp_path, n, tenant) for n in ("phone", "tablet"))
    note = phone.create("Reminder", {"title": "milk"})
    phone.sync()
    tablet.sync()
    phone.delete(note)
    tablet.update(note, {"completed": True})
    phone.sync()
    report = tablet.sync()
    assert report.conflicts == 1 and tablet.pending() == 0
    assert phone.get(note) is None and tablet.get(note) is None


class _Without:
    """A transport for a client that does not know one field (as a release 1 app does
    not know release 2's): the field is left out of every query it sends."""

    def __init__(self, field: str, transport: Any) -> None:
        self.field = field
        self.transport = transport

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = self.transport.execute(
            query.replace(f" {self.field} ", " "), variables
        )
        return body


def test_a_client_not_knowing_a_field_deletes_and_edits_without_touching_it(
    url: str, tmp_path: Path, tenant: str
) -> None:
    """Issue 47: the deletion applies whatever the unknown field holds (a token-guarded
    deletePerson, not a state the server must hold); the update leaves the field."""
    full = _device(url, tmp_path, "full", tenant)
    kept = full.create("Person", {"givenName": "Kim", "phoneNumber": "+1 555 0100"})
    gone = full.create("Person", {"givenName": "Sam", "phoneNumber": "+1 555 0101"})
    full.sync()
    narrow = _device(url, tmp_path, "narrow", tenant)
    narrow.transport = _Without("phoneNumber", narrow.transport)
    narrow.sync()
    assert narrow.get(gone) == {"__typename": "Person", "givenName": "Sam"}
    narrow.update(kept, {"givenName": "Kimberly"})
    narrow.delete(gone)
    report = narrow.sync()
    assert (report.applied, report.conflicts, report.rejected) == (2, 0, [])
    full.sync()
    assert full.get(gone) is None
    assert full.get(kept) == {
        "__typename": "Person",
        "givenName": "Kimberly",
        "phoneNumber": "+1 555 0100",
    }


def test_a_crash_after_a_lost_response_replays_instead_of_conflicting(
    url: str, tmp_path: Path, tenant: str
) -> None:
    device = _device(url, tmp_path, "flaky", tenant, lost_response=1.0)
    person = device.create("Person", {"givenName": "Bo"})
    with pytest.raises(TransportError):
        device.push()  # the server applied it; the answer never came
    device.close()
    reborn = _device(url, tmp_path, "flaky", tenant)  # same SQLite file, new process
    results: list[Any] = []
    reborn.on_push_result = results.append
    reborn.sync()
    assert [(r.status, r.replayed) for r in results] == [("APPLIED", True)]
    assert reborn.pending() == 0 and reborn.get(person) == {
        "__typename": "Person",
        "givenName": "Bo",
    }


def test_edits_squash_per_entity_before_sending(url: str, tmp_path: Path, tenant: str) -> None:
    device = _device(url, tmp_path, "squash", tenant)
    kept = device.create("Person", {"givenName": "a"})
    device.update(kept, {"givenName": "b"})
    device.update(kept, {"familyName": "c"})
    gone = device.create("Person", {"givenName": "never sent"})
    device.delete(gone)
    assert device.pending() == 1
    results: list[Any] = []
    device.on_push_result = results.append
    device.sync()
    assert len(results) == 1 and results[0].entry.verb == "create"
    assert device.get(kept) == {"__typename": "Person", "givenName": "b", "familyName": "c"}


@pytest.mark.slow
def test_a_pull_resumes_from_the_last_applied_page(url: str, tmp_path: Path, tenant: str) -> None:
    writer = _device(url, tmp_path, "writer", tenant)
    for i in range(250):
        writer.create("Reminder", {"title": f"r{i}"})
    writer.sync()
    reader = _device(url, tmp_path, "reader", tenant)
    transport = reader.transport
    assert isinstance(transport, FaultyTransport)
    calls = {"n": 0}
    real = transport.execute

    def die_on_third_page(query: str, variables: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 3:
            raise TransportError("connection dropped mid-sync")
        return real(query, variables)

    transport.execute = die_on_third_page  # type: ignore[method-assign]
    with pytest.raises(TransportError):
        reader.pull()
    assert len(reader.items()) == 200  # two pages applied and remembered
    transport.execute = real  # type: ignore[method-assign]
    reader.pull()
    assert reader.items() == writer.items() and len(reader.items()) == 250


# Every answer says the catalog release its server serves (contract 3.11).
RELEASED = {"release": RELEASE}


def test_the_transport_takes_the_address_or_the_endpoint_and_refuses_non_graphql(
    url: str, tenant: str
) -> None:
    token = bearer([tenant], secret=SECRET)["Authorization"].split()[1]
    query = "query($t: ID!) { changes(tenantID: $t) { changeToken } }"
    for given in (url, url + "/", url + "/graphql", url + "/graphql/"):
        body = HttpTransport(given, token).execute(query, {"t": tenant})
        assert body == {"data": {"changes": {"changeToken": None}}, "extensions": RELEASED}, given
    # A wrong path answers a plain-text 404: a TransportError that says so, not a crash.
    with pytest.raises(TransportError, match="HTTP 404 .* is not a GraphQL response"):
        HttpTransport(url + "/api", token).execute(query, {"t": tenant})
