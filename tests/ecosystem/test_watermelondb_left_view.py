"""A record that leaves Bob's view leaves his WatermelonDB device (clients/watermelondb,
WatermelonDB 0.28 from npm in Node, test/left_view.mjs), as an app of the family
app's release 3 syncing against a server: unshared between two pages of his first
sync, or between two syncs with an edit of his unsynced (reported refused with code
LEFT_VIEW, never pushed); Ann keeps the letter (contract 3.12). A record Ann deletes
while Bob holds an unsynced edit of it goes too, the edit reported refused with code
CONFLICT and the DeletedItem (contract 3.2), never dropped unsaid."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from typing import Any

import pytest

from api.settings import PROJECT_ROOT, Settings
from tests.support import node_packages
from tests.support.gql import TEST_AUTH_SECRET, bearer
from tests.support.servers import api_server

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)

MODULE = PROJECT_ROOT / "clients" / "watermelondb"
DEPS = node_packages.WATERMELONDB.target


def _run(settings: Settings, scenarios: str = "", **env: str) -> dict[str, Any]:
    node_packages.install(node_packages.WATERMELONDB)
    shutil.copy(MODULE / "index.js", DEPS / "index.js")
    (DEPS / "test").mkdir(exist_ok=True)
    shutil.copy(MODULE / "test" / "left_view.mjs", DEPS / "test" / "left_view.mjs")
    prefix = f"wml-{uuid.uuid4().hex[:8]}"
    kinds = ("pages", "queued", "deleted", "resync")
    tenants = [f"{prefix}-{kind}" for kind in kinds]

    def token(sub: str) -> str:
        claims = [f"{t}:writer" for t in tenants] if sub == "bob" else tenants
        return bearer(claims, sub=sub, secret=TEST_AUTH_SECRET)["Authorization"].split()[1]

    node = shutil.which("node")
    assert node
    args = [f"{prefix}", *([scenarios] if scenarios else [])]
    with api_server(settings, extra_env=env) as url:
        result = subprocess.run(
            [node, "test/left_view.mjs", f"{url}/graphql", token("ann"), token("bob"), *args],
            cwd=DEPS,
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    for name, findings in data.items():
        assert "failed" not in findings, (name, findings.get("failed", ""))
    return data


@pytest.fixture(scope="module")
def report(settings: Settings) -> dict[str, Any]:
    return _run(settings)


def test_unshared_between_two_pages_of_bobs_first_sync_the_letter_leaves_his_device(
    report: dict[str, Any],
) -> None:
    found = report["betweenPages"]
    assert found["unsharedAfter"] == 1, found  # after the first page of the first sync
    # The first read's pages end at the bound its first page proved (the letter was
    # his then); the module reads on from there in the same sync() call, whose pull
    # brings the LeftViewItem.
    assert found["pages"][:3] == [
        ["Person:letter", "Person:cy"],
        ["Person:di", "Person:ed"],
        ["LeftViewItem:letter"],
    ], found
    view = {"cy": "cy", "di": "di", "ed": "ed"}
    assert found["afterFirst"] == found["docs"] == view, found
    assert found["ann"] == {"givenName": "Letter", "familyName": None}


def test_unshared_between_two_syncs_his_unsynced_edit_is_refused_and_both_records_go(
    report: dict[str, Any],
) -> None:
    """The letter, edited and not synced, and a memo he did not edit, both unshared."""
    found = report["queuedEdit"]
    assert found["before"]["letter"] == "Letter" and found["before"]["memo"] == "Memo"
    assert sorted(sum(found["pulled"], [])) == ["LeftViewItem:letter", "LeftViewItem:memo"]
    assert found["docs"] == {"cy": "cy", "di": "di", "ed": "ed"}, found
    assert found["rejected"] == [["letter", "update", "LEFT_VIEW", None]], found
    assert found["unsynced"] is False
    assert found["ann"] == {"givenName": "Letter", "familyName": None}  # never pushed


def test_a_record_deleted_under_his_unsynced_edit_goes_and_the_edit_is_reported(
    report: dict[str, Any],
) -> None:
    """The letter deleted before his sync (its pull brings the DeletedItem), the memo
    between its pull and its push (the push meets the deletion): both edits are
    reported refused CONFLICT with the DeletedItem, both records gone."""
    found = report["deletedEdit"]
    assert found["before"] == {"letter": "letter", "memo": "memo", "cy": "cy"}, found
    assert "DeletedItem:letter" in sum(found["pulled"], []), found
    assert found["docs"] == {"cy": "cy"}, found
    assert sorted(found["rejected"]) == [
        ["letter", "update", "CONFLICT", "DeletedItem"],
        ["memo", "update", "CONFLICT", "DeletedItem"],
    ], found
    assert found["unsynced"] is False


def test_a_resync_past_the_retention_reports_both_edits_it_cannot_keep(
    settings: Settings,
) -> None:
    """Contract 3.6 with records gone from Bob's view and from the tenant: the server
    keeps deletions 2 s and Bob is away 3 s with edits of the letter (unshared) and
    of Cy (deleted). The resync brings neither, and WatermelonDB's replacement would
    destroy both edited records unsaid; they are kept and pushed, and each edit is
    reported with the server's answer: NOT_FOUND for the letter (outside his view),
    CONFLICT with the DeletedItem for Cy. Both records go; Ann's letter unchanged."""
    found = _run(settings, "resyncEdits", RETENTION_SECONDS="2")["resyncEdits"]
    assert found["before"] == {"letter": "Letter", "cy": "cy", "di": "di"}, found
    assert found["docs"] == {"di": "di", "fay": "fay"}, found
    assert sorted(found["rejected"]) == [
        ["cy", "update", "CONFLICT", "DeletedItem"],
        ["letter", "update", "NOT_FOUND", None],
    ], found
    assert found["unsynced"] is False
    assert found["ann"] == {"givenName": "Letter", "familyName": None}
