"""A record that leaves Bob's view leaves his WatermelonDB device (clients/watermelondb,
WatermelonDB 0.28 from npm in Node, test/left_view.mjs), as an app of the family
app's release 3 syncing against a server: unshared between two pages of his first
sync, or between two syncs with an edit of his unsynced (reported refused with code
LEFT_VIEW, never pushed); Ann keeps the letter (contract 3.12)."""

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


@pytest.fixture(scope="module")
def report(settings: Settings) -> dict[str, Any]:
    node_packages.install(node_packages.WATERMELONDB)
    shutil.copy(MODULE / "index.js", DEPS / "index.js")
    (DEPS / "test").mkdir(exist_ok=True)
    shutil.copy(MODULE / "test" / "left_view.mjs", DEPS / "test" / "left_view.mjs")
    prefix = f"wml-{uuid.uuid4().hex[:8]}"
    tenants = [f"{prefix}-pages", f"{prefix}-queued"]

    def token(sub: str) -> str:
        claims = [f"{t}:writer" for t in tenants] if sub == "bob" else tenants
        return bearer(claims, sub=sub, secret=TEST_AUTH_SECRET)["Authorization"].split()[1]

    node = shutil.which("node")
    assert node
    with api_server(settings) as url:
        result = subprocess.run(
            [node, "test/left_view.mjs", f"{url}/graphql", token("ann"), token("bob"), prefix],
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
    assert found["rejected"] == [["letter", "update", "LEFT_VIEW"]], found
    assert found["unsynced"] is False
    assert found["ann"] == {"givenName": "Letter", "familyName": None}  # never pushed
