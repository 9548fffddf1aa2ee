"""The reference client lets go of a record that left its member's view (contract
3.12, a LeftViewItem): the record, the bytes of its attachments, and its queued
edits, each reported refused with a code, while the record stays the owner's and
nothing of it is written. Bob's device syncs a record Ann shared with him; Ann
unshares it between two pages of his first sync, or between two of his syncs with
an edit of his queued offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from sync_client import SyncClient
from sync_client import client as sync_client
from sync_client.client import LEFT_VIEW, PushOutcome

from tests.integration.test_visibility_sync import _SHARE
from tests.support.gql import GraphQLClient, bearer

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
