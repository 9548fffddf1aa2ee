"""The reference client follows its member's groups and role (contract 3.12 "Groups",
6 "Groups" and "Removing and re-adding a member"): olga shares a letter with the group
`kids`; Bob joins kids between two pages of his device's sync, or while a device of his
is offline, and his devices get the letter; he leaves kids between two pages, or with
an edit of the letter queued offline, and they let it go (the edit reported refused
with a code) while olga and carol, still in kids, keep it; removed (role REMOVED)
mid-sync, his device lets go of the tenant; demoted to READER with an edit queued, the
edit is refused FORBIDDEN (ROLE) and nothing is purged. Against the in-process
server on DynamoDB Local."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from sync_client import SyncClient
from sync_client import client as sync_client
from sync_client.client import LEFT_VIEW, PushOutcome

from tests.integration.test_client_left_view import _Transport
from tests.integration.test_groups import CREATE_PERSON, UPDATE_MEMBER, Caller, _family
from tests.support.gql import GraphQLClient, bearer

PUBLIC = ("cy", "di", "ed")


class _Paged(_Transport):
    """`between_pages` runs before the first page asked with a cursor once `ready()`
    holds (by default the sync's second page)."""

    def __init__(self, client: TestClient, headers: dict[str, str]) -> None:
        super().__init__(client, headers)
        self.ready: Callable[[], bool] = lambda: True

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        hook: Callable[[], None] | None = self.between_pages
        self.between_pages = None  # not the base's rule
        if "changes(" in query and variables.get("cursor") and hook and self.ready():
            run, hook = hook, None
            run()
        try:
            return super().execute(query, variables)
        finally:
            self.between_pages = hook


def _device(app_client: TestClient, path: Path, tenant: str, sub: str, **kw: Any) -> SyncClient:
    """A device of `sub`: its token names the tenant (in membership as data the
    token only says who it is; the Member record decides)."""
    return SyncClient(path, tenant, _Paged(app_client, bearer([tenant], sub=sub)), **kw)


def _people(device: SyncClient) -> list[str]:
    return sorted(i for i, item in device.items().items() if item["__typename"] == "Person")


def _member(olga: Caller, sub: str, changes: dict[str, Any]) -> None:
    """olga (owner) writes `changes` to `sub`'s Member record."""
    query = "query($t: ID!, $id: ID!) { member(tenantID: $t, id: $id) { changeToken } }"
    token = olga.data(query, {"t": olga.tenant, "id": sub})["member"]["changeToken"]
    i = {"tenantID": olga.tenant, "id": sub, "changeToken": token, "changes": changes}
    olga.data(UPDATE_MEMBER, {"i": i})


@pytest.fixture
def family(gql: GraphQLClient, tenant: str) -> tuple[Caller, Caller]:
    """olga (owner), bob (writer, in kids), carol (writer, moved into kids); olga's
    letter shared with kids only, then three records the whole tenant sees."""
    olga, _, carol, _ = _family(gql, tenant)
    _member(olga, "carol", {"groups": ["kids"]})
    olga.person("letter", [], ["kids"])
    for id in PUBLIC:
        _public(olga, id)
    return olga, carol


def _public(olga: Caller, id: str) -> None:
    """A record without a visibility: the whole tenant sees it."""
    i = {"tenantID": olga.tenant, "id": id, "person": {"givenName": id}}
    olga.data(CREATE_PERSON, {"i": i})


def _first_sync_paged(
    device: SyncClient,
    between: Any,
    monkeypatch: pytest.MonkeyPatch,
    ready: Callable[[], bool] = lambda: True,
) -> None:
    """The device's sync, two entries a page, with `between` run between two of its
    pages (the first two once `ready()` holds); then one more sync (a first sync
    ends at the bound its first read proved)."""
    monkeypatch.setattr(sync_client, "PULL_LIMIT", 2)
    transport = device.transport
    assert isinstance(transport, _Paged)
    transport.between_pages, transport.ready = between, ready
    report = device.sync()
    assert report.pages >= 2 and transport.between_pages is None  # it ran mid-sync
    device.sync()


# A group joined or left between two pages of a sync (pages after it carry a cursor,
# and only a sync's first request decides which groups it re-reads): the sync's last
# page, lifted past the bound its first read proved to the tenant's head, ends before
# the caller's own Member write above that bound (api.service.views.own_cut), and the
# next sync re-reads the group. Before that rule, joined mid-way through a later sync,
# the group's records never reached the device; left once a page brought a record of
# it, no LeftViewItem of it ever followed.


@pytest.mark.parametrize("first", [True, False])
def test_bob_joins_kids_between_two_pages_and_while_a_device_is_offline(
    app_client: TestClient,
    tenant: str,
    tmp_path: Path,
    family: Any,
    monkeypatch: pytest.MonkeyPatch,
    first: bool,
) -> None:
    """Bob joins kids between two pages of his phone's sync (its first, or a later
    one) while his tablet is offline: both get the letter, as a new device does."""
    olga, _ = family
    _member(olga, "bob", {"groups": []})
    phone = _device(app_client, tmp_path / "phone.db", tenant, "bob")
    tablet = _device(app_client, tmp_path / "tablet.db", tenant, "bob")
    tablet.sync()  # then offline across the join
    assert _people(tablet) == list(PUBLIC)
    if not first:
        phone.sync()
        for id in ("fay", "gus", "hal", "ivy", "jo"):  # pages for his next sync
            _public(olga, id)
    _first_sync_paged(phone, lambda: _member(olga, "bob", {"groups": ["kids"]}), monkeypatch)
    tablet.sync()  # back online
    fresh = _device(app_client, tmp_path / "fresh.db", tenant, "bob")
    fresh.sync()
    assert "letter" in _people(fresh)
    assert _people(phone) == _people(fresh) == _people(tablet)
    assert (tablet.get("letter") or {}).get("givenName") == "letter"
    for device in (phone, tablet, fresh):
        device.close()


@pytest.mark.parametrize("first", [True, False])
def test_bob_leaves_kids_between_two_pages_his_device_lets_the_letter_go(
    app_client: TestClient,
    tenant: str,
    tmp_path: Path,
    family: Any,
    monkeypatch: pytest.MonkeyPatch,
    first: bool,
) -> None:
    """Bob, in kids, leaves it once a page of his device's sync (its first, or a
    later one) brought the letter: the device lets the letter go by the end of its
    next sync; carol, still in kids, and olga keep it."""
    olga, carol = family
    carols = _device(app_client, tmp_path / "carol.db", tenant, "carol")
    carols.sync()
    phone = _device(app_client, tmp_path / "phone.db", tenant, "bob")
    leave = lambda: _member(olga, "bob", {"groups": []})  # noqa: E731
    if first:  # left once a page brought him the letter
        held = lambda: phone.store.server_version("letter") is not None  # noqa: E731
        _first_sync_paged(phone, leave, monkeypatch, held)
    else:
        phone.sync()
        assert "letter" in _people(phone)
        for id in ("fay", "gus", "hal", "ivy", "jo"):  # pages for his next sync
            _public(olga, id)
        _first_sync_paged(phone, leave, monkeypatch)
    fresh = _device(app_client, tmp_path / "fresh.db", tenant, "bob")
    fresh.sync()
    assert "letter" not in _people(fresh)
    assert _people(phone) == _people(fresh)
    assert phone.store.server_version("letter") is None
    carols.sync()
    assert "letter" in _people(carols)
    assert olga.read("letter") == {"id": "letter", "givenName": "letter"}
    assert carol.read("letter") == {"id": "letter", "givenName": "letter"}
    phone.close()
    carols.close()
    fresh.close()


@pytest.mark.parametrize("pushed_first", [True, False])
def test_bob_leaves_kids_with_an_edit_queued_both_devices_end_with_his_view(
    app_client: TestClient,
    tenant: str,
    tmp_path: Path,
    family: Any,
    pushed_first: bool,
) -> None:
    """His phone holds the letter with an edit of it queued offline; his tablet is
    online across the leave. The edit is refused: by the server (NOT_FOUND, outside
    his view) when the sync pushes first, on the device (LEFT_VIEW, never sent) when
    a pull brings the LeftViewItem first. Both devices end with exactly what a new
    device of his gets; carol's copy and olga's letter are as olga left them."""
    olga, _ = family
    outcomes: list[PushOutcome] = []
    phone = _device(app_client, tmp_path / "p.db", tenant, "bob", on_push_result=outcomes.append)
    tablet = _device(app_client, tmp_path / "tablet.db", tenant, "bob")
    carols = _device(app_client, tmp_path / "carol.db", tenant, "carol")
    for device in (phone, tablet, carols):
        device.sync()
        assert "letter" in _people(device)
    phone.update("letter", {"familyName": "Bob's"})  # offline
    _member(olga, "bob", {"groups": []})
    tablet.sync()
    if pushed_first:
        report = phone.sync()
    else:
        report = sync_client.SyncReport()
        phone.pull(report)
        assert report.rejected and phone.pending() == 0
        report.rejected += phone.sync().rejected
    codes = [r["error"]["code"] for r in report.rejected]
    assert codes == ["NOT_FOUND" if pushed_first else LEFT_VIEW]
    assert [(o.status, o.error and o.error["code"]) for o in outcomes] == [("REJECTED", codes[0])]
    fresh = _device(app_client, tmp_path / "fresh.db", tenant, "bob")
    fresh.sync()
    assert _people(fresh) == list(PUBLIC)
    for device in (phone, tablet):
        assert device.items() == fresh.items() and device.pending() == 0
        assert device.store.server_version("letter") is None
    carols.sync()
    kept = carols.get("letter")
    assert kept is not None and kept["givenName"] == "letter" and "familyName" not in kept
    for device in (phone, tablet, carols, fresh):
        device.close()


@pytest.mark.parametrize("queued", [False, True])
def test_bob_removed_his_device_lets_go_of_the_tenant(
    app_client: TestClient,
    tenant: str,
    tmp_path: Path,
    family: Any,
    monkeypatch: pytest.MonkeyPatch,
    queued: bool,
) -> None:
    """Removed (role REMOVED) between two pages of a sync, or while his device is
    offline with an edit of the letter queued: the next request is FORBIDDEN
    (NOT_A_MEMBER) and the device forgets the tenant, the queued edit reported
    refused with that error; carol keeps the letter."""
    olga, _ = family
    outcomes: list[PushOutcome] = []
    phone = _device(app_client, tmp_path / "p.db", tenant, "bob", on_push_result=outcomes.append)
    phone.sync()
    assert "letter" in _people(phone)
    transport = phone.transport
    assert isinstance(transport, _Paged)
    if queued:
        phone.update("letter", {"familyName": "Bob's"})  # offline
        _member(olga, "bob", {"role": "REMOVED"})
    else:
        monkeypatch.setattr(sync_client, "PULL_LIMIT", 2)
        for id in ("fay", "gus", "hal", "ivy", "jo"):  # several pages for his next pull
            olga.person(id, ["bob"], [])
        transport.pages = 0
        transport.between_pages = lambda: _member(olga, "bob", {"role": "REMOVED"})
    report = phone.sync()
    assert transport.between_pages is None  # the removal landed mid-sync
    assert report.not_a_member
    refused = [(r["error"]["code"], r["error"]["reason"]) for r in report.rejected]
    assert refused == ([("FORBIDDEN", "NOT_A_MEMBER")] if queued else [])
    assert [(o.status, (o.error or {}).get("reason")) for o in outcomes] == (
        [("REJECTED", "NOT_A_MEMBER")] if queued else []
    )
    assert phone.items() == {} and phone.pending() == 0 and phone.store.since() is None
    carols = _device(app_client, tmp_path / "carol.db", tenant, "carol")
    carols.sync()
    assert "letter" in _people(carols)
    phone.close()
    carols.close()


def test_bob_demoted_to_reader_with_an_edit_queued_it_is_refused_and_nothing_goes(
    app_client: TestClient, tenant: str, tmp_path: Path, family: Any
) -> None:
    olga, _ = family
    outcomes: list[PushOutcome] = []
    phone = _device(app_client, tmp_path / "p.db", tenant, "bob", on_push_result=outcomes.append)
    phone.sync()
    held = phone.items()
    assert "letter" in held
    phone.update("letter", {"familyName": "Bob's"})  # offline
    _member(olga, "bob", {"role": "READER"})
    report = phone.sync()
    assert not report.not_a_member
    refused = [(r["error"]["code"], r["error"].get("reason")) for r in report.rejected]
    assert refused == [("FORBIDDEN", "ROLE")]
    assert [(o.status, o.error and o.error["code"]) for o in outcomes] == [
        ("REJECTED", "FORBIDDEN")
    ]
    assert phone.pending() == 0 and phone.store.since() is not None
    now = phone.items()
    assert set(now) >= set(held) and now["letter"] == held["letter"]  # nothing purged
    assert olga.read("letter") == {"id": "letter", "givenName": "letter"}
    phone.close()
