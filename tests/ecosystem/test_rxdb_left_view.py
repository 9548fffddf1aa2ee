"""A record that leaves Bob's view leaves his RxDB device (clients/rxdb, the real
`rxdb` package in Node 22, test/left_view.mjs), as an app of the family app's
release 3 replicating against a server: unshared between two pages of his first
pull, or between two syncs with an edit of his queued offline (reported refused,
nothing written); Ann keeps the letter (contract 3.12)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from api.settings import Settings
from tests.support import rxdb
from tests.support.gql import TEST_AUTH_SECRET, bearer
from tests.support.servers import api_server

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)


@pytest.fixture(scope="module")
def report(settings: Settings) -> dict[str, Any]:
    module_dir: Path = rxdb.install()
    prefix = f"rxl-{uuid.uuid4().hex[:8]}"
    tenants = [f"{prefix}-pages", f"{prefix}-queued"]

    def token(sub: str) -> str:
        claims = [f"{t}:writer" for t in tenants] if sub == "bob" else tenants
        return bearer(claims, sub=sub, secret=TEST_AUTH_SECRET)["Authorization"].split()[1]

    with api_server(settings) as url:
        result = subprocess.run(
            [rxdb.NODE, "test/left_view.mjs", f"{url}/graphql", token("ann"), token("bob"), prefix],
            cwd=module_dir,
            env=rxdb.node_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    for name, findings in data.items():
        assert "failed" not in findings, (name, findings.get("failed", ""))
    return data


def test_unshared_between_two_pages_of_bobs_first_pull_the_letter_leaves_his_device(
    report: dict[str, Any],
) -> None:
    found = report["betweenPages"]
    assert found["unsharedAfter"] == 1, found  # after the first page of the first pull
    # The first pull's pages end at the bound its first read proved (the letter was
    # his then); RxDB pulls on from there, and the next page lets the letter go.
    pages = found["pages"]
    assert pages[:3] == [
        ["Person:letter", "Person:cy"],
        ["Person:di", "Person:ed"],
        ["LeftViewItem:letter"],
    ], found
    view = {"cy": "cy", "di": "di", "ed": "ed"}
    assert found["afterFirst"] == found["docs"] == view, found
    assert found["ann"] == {"givenName": "Letter", "familyName": None}


def test_unshared_between_two_syncs_his_queued_edit_is_refused_and_the_letter_goes(
    report: dict[str, Any],
) -> None:
    """The letter, edited offline, and a memo he did not edit, both unshared."""
    found = report["queuedEdit"]
    assert found["before"]["letter"] == "Letter" and found["before"]["memo"] == "Memo"
    assert found["docs"] == {"cy": "cy", "di": "di", "ed": "ed"}, found
    assert found["rejected"] == [["letter", "NOT_FOUND"]], found
    assert found["ann"] == {"givenName": "Letter", "familyName": None}  # nothing written
