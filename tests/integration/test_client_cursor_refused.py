"""The reference client when a server refuses a cursor it holds (INVALID_CURSOR):
two servers on one table, signing cursors with different CURSOR_SECRETs, behind one
address that moves from one to the other between two pages of a sync (a rotated
secret, or a server of an earlier release answering during a rollback or a rolling
deploy, which does not read a later release's cursors). The client drops the cursor
and asks that read again from its start (the token persisted with its last page),
once per sync: it ends with exactly the server's state, without a whole-tenant
resync, its queued edits pushed (docs/evolution.md, "Served by an older server")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from sync_client import HttpTransport, SyncClient, SyncReport
from sync_client.client import SyncFailed
from sync_client.schema import ClientSchema

from api.settings import Settings
from tests.support import release2
from tests.support.gql import bearer
from tests.support.servers import api_server
from tests.support.switch_proxy import SwitchProxy

pytestmark = pytest.mark.slow

R1 = ClientSchema.of(release2.DECLARED, 1)
R2 = ClientSchema.of(release2.DECLARED, 2)
# More than two pages of the client's pulls (PULL_LIMIT 100).
PEOPLE = 250


@pytest.fixture(scope="module")
def servers(settings: Settings) -> Iterator[tuple[str, str]]:
    """Two servers of one table whose cursors the other refuses."""
    with (
        api_server(settings, extra_env={**release2.SERVER_ENV, "CURSOR_SECRET": "a" * 40}) as a,
        api_server(settings, extra_env={**release2.SERVER_ENV, "CURSOR_SECRET": "b" * 40}) as b,
    ):
        yield a, b


@pytest.fixture
def proxy(servers: tuple[str, str]) -> Iterator[SwitchProxy]:
    with SwitchProxy(*servers) as front:
        yield front


def _token(tenant: str) -> str:
    return bearer([tenant])["Authorization"].split()[1]


def _app(path: Path, tenant: str, url: str, schema: ClientSchema = R2) -> SyncClient:
    return SyncClient(path, tenant, HttpTransport(url, _token(tenant)), schema=schema)


def _people(writer: SyncClient, count: int, **fields: str) -> list[str]:
    ids = [writer.create("Person", {"givenName": f"p{n:03}", **fields}) for n in range(count)]
    report = writer.sync()
    assert report.applied == count and not report.rejected, report
    return ids


def _delete(url: str, tenant: str, entity_id: str) -> None:
    """Another device deletes a person (straight to a server, not through the proxy)."""
    headers = {"Authorization": f"Bearer {_token(tenant)}"}
    ask = "query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }"
    delete = "mutation($i: DeletePersonInput!) { deletePerson(input: $i) { deletedItem { id } } }"
    with httpx2.Client(timeout=30) as http:
        found = http.post(
            f"{url}/graphql",
            json={"query": ask, "variables": {"t": tenant, "id": entity_id}},
            headers=headers,
        ).json()
        token = found["data"]["person"]["changeToken"]
        i = {"tenantID": tenant, "id": entity_id, "changeToken": token}
        done = http.post(
            f"{url}/graphql", json={"query": delete, "variables": {"i": i}}, headers=headers
        ).json()
        assert done["data"]["deletePerson"]["deletedItem"]["id"] == entity_id, done


def _server_state(url: str, tenant: str, tmp_path: Path) -> dict[str, dict[str, object]]:
    """What a new device's first sync of the tenant holds."""
    fresh = _app(tmp_path / "fresh.db", tenant, url)
    fresh.sync()
    return fresh.items()


def test_a_cursor_refused_between_two_pages_restarts_the_pull_from_the_persisted_token(
    servers: tuple[str, str], proxy: SwitchProxy, tmp_path: Path, tenant: str
) -> None:
    a, b = servers
    writer = _app(tmp_path / "writer.db", tenant, a)
    first = _people(writer, 1)[0]
    device = _app(tmp_path / "device.db", tenant, proxy.url)
    device.sync()
    before = device.store.since()
    assert before is not None
    people = _people(writer, PEOPLE)
    deleted = people[0]
    device.update(first, {"familyName": "Queued"})
    created = device.create("Person", {"givenName": "made offline"})
    # Page 1 from server A, whose cursor server B refuses; a person of page 1 is
    # deleted meanwhile: the read again from page 1's token brings the deletion.
    proxy.switch_after_cursor()
    proxy.on_switch = lambda: _delete(a, tenant, deleted)
    report = device.sync()

    assert report.cursors_refused == 1 and report.resyncs == 0, report
    assert device.pending() == 0 and report.applied == 2, report
    pages = proxy.requests("changes")
    assert [p.code for p in pages].count("INVALID_CURSOR") == 1, pages
    refused = next(n for n, p in enumerate(pages) if p.code == "INVALID_CURSOR")
    again = pages[refused + 1]
    # Asked again without the cursor, from the token page 1 persisted: not the
    # tenant again (no request with neither since nor cursor), not the sync's start.
    assert again.cursor is None and again.since is not None and again.since > before, pages
    assert not any(p.since is None and p.cursor is None for p in pages[1:]), pages
    state = _server_state(b, tenant, tmp_path)
    assert deleted not in state and device.items() == state
    assert state[first] == {"__typename": "Person", "givenName": "p000", "familyName": "Queued"}
    assert state[created] == {"__typename": "Person", "givenName": "made offline"}


def test_a_second_refusal_in_one_sync_is_its_error_and_the_next_sync_ends_it(
    servers: tuple[str, str], proxy: SwitchProxy, tmp_path: Path, tenant: str
) -> None:
    """Servers alternating at each page (their secrets differ): no loop. The sync
    raises INVALID_CURSOR after one restart, the edits already pushed and nothing
    lost; the next sync, one server answering, goes on from the token it kept."""
    a, b = servers
    writer = _app(tmp_path / "writer.db", tenant, a)
    device = _app(tmp_path / "device.db", tenant, proxy.url)
    device.sync()
    _people(writer, PEOPLE)
    created = device.create("Person", {"givenName": "made offline"})
    proxy.switch_after_cursor(times=2)
    with pytest.raises(SyncFailed) as refused:
        device.sync()
    assert refused.value.errors[0]["extensions"]["code"] == "INVALID_CURSOR"
    assert device.pending() == 0
    assert [p.code for p in proxy.requests("changes")].count("INVALID_CURSOR") == 2

    proxy.use(1)
    report = device.sync()
    assert report.resyncs == 0 and report.cursors_refused == 0, report
    state = _server_state(b, tenant, tmp_path)
    assert created in state and device.items() == state


def test_a_cursor_refused_during_a_resync_downloads_the_tenant_again_from_its_start(
    servers: tuple[str, str], proxy: SwitchProxy, tmp_path: Path, tenant: str
) -> None:
    """A resync (since: null) persists no token before its end: asked again whole.
    What its first attempt returned proves nothing: a person deleted between the two
    attempts is not kept."""
    a, b = servers
    writer = _app(tmp_path / "writer.db", tenant, a)
    people = _people(writer, PEOPLE)
    device = _app(tmp_path / "device.db", tenant, proxy.url)
    device.sync()
    proxy.switch_after_cursor()
    # Two deletions: a first sync sends those of the tenant's latest write only.

    def delete_two() -> None:
        for gone in people[:2]:
            _delete(a, tenant, gone)

    proxy.on_switch = delete_two
    done = SyncReport()
    device.resync(done)
    assert done.cursors_refused == 1 and done.resyncs == 1, done
    starts = [p for p in proxy.requests("changes")[1:] if p.since is None and p.cursor is None]
    assert len(starts) == 2, proxy.requests("changes")  # the resync, and its restart
    state = _server_state(b, tenant, tmp_path)
    assert people[0] not in state and people[1] not in state and device.items() == state


def test_a_catch_up_cursor_refused_restarts_the_catch_up(
    servers: tuple[str, str], proxy: SwitchProxy, tmp_path: Path, tenant: str
) -> None:
    """An app upgraded to release 2 catches up on the nicknames its release 1 syncs
    left out, page by page; a cursor refused starts the catch-up again, and the sync
    downloads nothing else again."""
    a, b = servers
    writer = _app(tmp_path / "writer.db", tenant, a)
    _people(writer, PEOPLE, nickname="nick")
    phone = _app(tmp_path / "phone.db", tenant, a, R1)
    phone.sync()
    phone.close()
    upgraded = _app(tmp_path / "phone.db", tenant, proxy.url, R2)
    proxy.switch_after_cursor(on=("catchUp",))
    report = upgraded.sync()
    assert report.cursors_refused == 1 and report.resyncs == 0, report
    catch_ups = proxy.requests("catchUp")
    assert [c.code for c in catch_ups].count("INVALID_CURSOR") == 1, catch_ups
    assert not any(p.since is None for p in proxy.requests("changes")), proxy.log
    assert upgraded.store.meta("catch_up_from") is None
    state = _server_state(b, tenant, tmp_path)
    assert upgraded.items() == state
    assert all(v.get("nickname") == "nick" for v in state.values())
