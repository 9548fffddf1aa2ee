"""The reference client lets go of a record that left its member's view (contract
3.12, a LeftViewItem): the record, the bytes of its attachments, and its queued
edits, each reported refused with a code, while the record stays the owner's and
nothing of it is written. Bob's device syncs a record Ann shared with him; Ann
unshares it between two pages of his first sync, or between two of his syncs with
an edit of his queued offline."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from sync_client import SyncClient
from sync_client import client as sync_client
from sync_client.client import LEFT_VIEW, PushOutcome

from api.app import create_app
from api.settings import Settings
from tests.integration.test_visibility_sync import _SHARE
from tests.support.gql import GraphQLClient, bearer
from tests.support.short_retention import EXPIRED_S, RETENTION_S

PHOTO = b"\xff\xd8\xff" + b"a letter for Bob " * 64


class _Transport:
    """The client's transport over the in-process app as `sub`; `before_page` runs
    before each `changes` request after the first (what happens between pages)."""

    def __init__(self, client: TestClient, headers: dict[str, str]) -> None:
        self._client = client
        self.headers = headers
        self.pages = 0
        self.between_pages: Any = None

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        if "changes(" in query:
            if self.pages and variables.get("cursor") and self.between_pages is not None:
                self.between_pages()
                self.between_pages = None
            self.pages += 1
        response = self._client.post(
            "/graphql", json={"query": query, "variables": variables}, headers=self.headers
        )
        body: dict[str, Any] = response.json()
        return body


def _device(app_client: TestClient, path: Path, tenant: str, sub: str, **kw: Any) -> SyncClient:
    transport = _Transport(app_client, bearer([f"{tenant}:writer"], sub=sub))
    return SyncClient(path, tenant, transport, **kw)


def _set_visibility(gql: GraphQLClient, tenant: str, id: str, shared: list[str] | None) -> None:
    headers = bearer([tenant], sub="ann")
    headers["X-Sync-Release"] = "3"
    current = gql.execute(
        "query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }",
        {"t": tenant, "id": id},
        headers=headers,
    )["data"]["person"]["changeToken"]
    vis = None if shared is None else {"owner": "ann", "sharedWith": shared}
    i = {"tenantID": tenant, "id": id, "changeToken": current, "visibility": vis}
    body = gql.execute(_SHARE, {"i": i}, headers=headers)
    assert not body.get("errors"), body


@pytest.fixture
def shared(app_client: TestClient, gql: GraphQLClient, tenant: str, tmp_path: Path) -> Any:
    """Ann's device holds a letter with a photo, shared with Bob, and three records
    the whole tenant sees, written after it."""
    ann = _device(app_client, tmp_path / "ann.db", tenant, "ann")
    photo = ann.attach(PHOTO, "image/jpeg")
    letter = ann.create("Person", {"givenName": "Letter", "photo": photo})
    for name in ("Cy", "Di", "Ed"):
        ann.create("Person", {"givenName": name})
    assert ann.sync().applied == 4
    _set_visibility(gql, tenant, letter, ["bob"])
    yield ann, letter, photo["sha256"]
    ann.close()


def test_unshared_between_two_pages_of_bobs_first_sync_his_device_lets_it_go(
    app_client: TestClient,
    gql: GraphQLClient,
    tenant: str,
    tmp_path: Path,
    shared: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ann, letter, _ = shared
    monkeypatch.setattr(sync_client, "PULL_LIMIT", 2)
    bob = _device(app_client, tmp_path / "bob.db", tenant, "bob")
    transport = bob.transport
    assert isinstance(transport, _Transport)
    transport.between_pages = lambda: _set_visibility(gql, tenant, letter, [])
    first = bob.sync()
    assert first.pages >= 2 and transport.between_pages is None  # unshared mid-sync
    # The first sync ends at the bound its first read proved: the letter was his then.
    bob.sync()
    assert sorted(p["givenName"] for p in bob.items().values()) == ["Cy", "Di", "Ed"]
    assert bob.store.server_version(letter) is None
    ann.sync()
    assert (ann.get(letter) or {}).get("givenName") == "Letter"
    bob.close()


@pytest.mark.parametrize("pushed_first", [True, False])
def test_unshared_between_two_syncs_bobs_queued_edit_is_refused_and_the_letter_goes(
    app_client: TestClient,
    gql: GraphQLClient,
    tenant: str,
    tmp_path: Path,
    shared: Any,
    pushed_first: bool,
) -> None:
    """Bob's edit, queued offline, is refused: by the server (NOT_FOUND, the record
    outside his view) when his sync pushes first; on the device (LEFT_VIEW, never
    sent) when a pull brings the LeftViewItem first. The letter, its photo's bytes
    and his edit go; Ann's letter is as she left it."""
    ann, letter, sha256 = shared
    outcomes: list[PushOutcome] = []
    bob = _device(app_client, tmp_path / "bob.db", tenant, "bob", on_push_result=outcomes.append)
    bob.sync()
    assert bob.get(letter) is not None
    assert bob.open(sha256, letter) == PHOTO and bob.store.blob(sha256) is not None
    bob.update(letter, {"familyName": "Bob's"})  # offline
    _set_visibility(gql, tenant, letter, [])
    if pushed_first:
        report = bob.sync()
    else:
        report = sync_client.SyncReport()
        bob.pull(report)
        assert report.rejected and bob.pending() == 0
        report.rejected += bob.sync().rejected
    codes = [r["error"]["code"] for r in report.rejected]
    assert codes == ["NOT_FOUND" if pushed_first else LEFT_VIEW]
    assert [(o.status, o.error and o.error["code"]) for o in outcomes] == [("REJECTED", codes[0])]
    assert sorted(p["givenName"] for p in bob.items().values()) == ["Cy", "Di", "Ed"]
    assert bob.pending() == 0 and bob.store.blob(sha256) is None
    ann.sync()
    kept = ann.get(letter)
    assert kept is not None and kept["givenName"] == "Letter" and "familyName" not in kept
    bob.close()


def test_a_letter_shared_again_comes_back_whole(
    app_client: TestClient, gql: GraphQLClient, tenant: str, tmp_path: Path, shared: Any
) -> None:
    """A LeftViewItem is not a deletion: shared again, the record reaches him again."""
    _, letter, _ = shared
    bob = _device(app_client, tmp_path / "bob.db", tenant, "bob")
    bob.sync()
    _set_visibility(gql, tenant, letter, [])
    bob.sync()
    assert bob.get(letter) is None
    _set_visibility(gql, tenant, letter, ["bob"])
    bob.sync()
    assert (bob.get(letter) or {}).get("givenName") == "Letter"
    bob.close()


@pytest.fixture
def later(settings: Settings) -> Iterator[TestClient]:
    """The same table served past the retention: a server whose clock is EXPIRED_S
    ahead, retention RETENTION_S (tests.support.short_retention), as a device back
    from a long time offline finds it."""
    ahead = dataclasses.replace(
        settings, retention_seconds=RETENTION_S, clock_offset_ms=EXPIRED_S * 1000
    )
    with TestClient(create_app(ahead)) as client:
        yield client


def test_a_resync_meeting_his_queued_edit_lets_the_letter_go_once_the_server_refuses_it(
    app_client: TestClient,
    gql: GraphQLClient,
    tenant: str,
    tmp_path: Path,
    shared: Any,
    later: TestClient,
) -> None:
    """Bob's device, offline past the retention with edits of the letter queued,
    resyncs (contract 3.6) before it pushes: the unshare is older than the
    retention, so the resync sends no sentinel, and it cannot tell a record that
    left the view from one deleted: it keeps the letter, which his queued edits
    name, and pushes the first. The server's NOT_FOUND (a write outside his view; a
    deleted record answers CONFLICT) lets the letter go as a LeftViewItem does: its
    version, its photo's bytes, and the edit queued behind the one sent, refused
    LEFT_VIEW. Before, the letter stayed on his device for good."""
    ann, letter, sha256 = shared
    outcomes: list[PushOutcome] = []
    bob = _device(app_client, tmp_path / "bob.db", tenant, "bob", on_push_result=outcomes.append)
    bob.sync()
    assert bob.open(sha256, letter) == PHOTO
    bob.update(letter, {"familyName": "Bob's"})  # offline
    (sent,) = bob.store.entries()
    bob.store.save(dataclasses.replace(sent, sent=True, client_mutation_id=str(uuid.uuid4())))
    bob.update(letter, {"occupation": "pen pal"})  # queued behind the one in flight
    _set_visibility(gql, tenant, letter, [])
    # Long after: the tenant written again, Bob back (his device's transport now
    # reaches the server past the retention).
    fay = GraphQLClient(later).create(tenant, "Person", {"givenName": "Fay"})
    assert fay
    transport = bob.transport
    assert isinstance(transport, _Transport)
    transport._client = later
    report = sync_client.SyncReport()
    bob.pull(report)
    assert report.resyncs == 1 and not report.rejected
    assert bob.get(letter) is not None and bob.pending() == 2  # kept for its edits
    report = bob.sync()
    codes = sorted((r["error"]["code"], str(r["entry"].changes)) for r in report.rejected)
    assert codes == [
        (LEFT_VIEW, "{'occupation': 'pen pal'}"),
        ("NOT_FOUND", "{'familyName': \"Bob's\"}"),
    ]
    assert sorted((o.status, (o.error or {}).get("code")) for o in outcomes) == [
        ("REJECTED", LEFT_VIEW),
        ("REJECTED", "NOT_FOUND"),
    ]
    assert bob.get(letter) is None and bob.store.server_version(letter) is None
    assert bob.pending() == 0 and bob.store.blob(sha256) is None
    assert sorted(p["givenName"] for p in bob.items().values()) == ["Cy", "Di", "Ed", "Fay"]
    ann.sync()
    kept = ann.get(letter)
    assert kept is not None and kept["givenName"] == "Letter" and "familyName" not in kept
    bob.close()


@pytest.mark.parametrize("pushed_first", [True, False])
def test_a_record_deleted_under_his_queued_edit_goes_and_the_edit_is_reported(
    app_client: TestClient, tenant: str, tmp_path: Path, shared: Any, pushed_first: bool
) -> None:
    """Not a LeftViewItem: Ann deletes Cy, a record the whole tenant sees, while Bob's
    edit of it is queued offline. His push meets the deletion (CONFLICT carrying the
    DeletedItem, contract 3.2), or his pull brings the DeletedItem first and the push
    then meets it: the deletion wins (deletion_wins), and the edit it drops is
    reported refused (`rejected`, code CONFLICT, the DeletedItem as `current`), not
    only counted. Before, `rejected` stayed empty."""
    ann, _, _ = shared
    outcomes: list[PushOutcome] = []
    bob = _device(app_client, tmp_path / "bob.db", tenant, "bob", on_push_result=outcomes.append)
    bob.sync()
    (cy,) = [i for i, p in bob.items().items() if p["givenName"] == "Cy"]
    bob.update(cy, {"familyName": "Bob's"})  # offline
    ann.sync()
    ann.delete(cy)
    assert ann.sync().applied == 1
    report = sync_client.SyncReport()
    if not pushed_first:
        bob.pull(report)
        assert bob.get(cy) is None and bob.pending() == 1  # still to be answered
    after = bob.sync()
    report.rejected += after.rejected
    assert after.conflicts == 1
    (refused,) = report.rejected
    assert refused["entry"].changes == {"familyName": "Bob's"}
    assert refused["error"]["code"] == "CONFLICT"
    current = refused["error"]["current"]
    assert (current["__typename"], current["id"]) == ("DeletedItem", cy)
    assert [(o.status, (o.item or {}).get("__typename")) for o in outcomes] == [
        ("CONFLICT", "DeletedItem")
    ]
    assert bob.get(cy) is None and bob.pending() == 0
    bob.close()
