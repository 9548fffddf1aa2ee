"""Bob's WatermelonDB devices follow his groups and role (clients/watermelondb,
WatermelonDB from npm in Node, test/groups.mjs), as an app of the family app's
release 4 syncing against a server, in a tenant whose members are data: he leaves the
group a letter and a memo are shared with, an edit of the letter unsynced (reported
refused with a code, never written; both go, carol in the group and olga keep them);
he joins it with one device syncing and one offline (both get them, as a new device
does); removed (REMOVED) with an edit unsynced, his device lets go of the tenant
(onNotAMember); demoted to READER with one, the edit is refused FORBIDDEN (ROLE) and
nothing else goes (contract 3.12 "Groups", 6)."""

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
VIEW = {"cy": "cy", "di": "di", "ed": "ed"}
KIDS = {"letter": "Letter", "memo": "Memo", **VIEW}
OLGAS = {"givenName": "Letter", "familyName": None}


@pytest.fixture(scope="module")
def report(settings: Settings) -> dict[str, Any]:
    node_packages.install(node_packages.WATERMELONDB)
    shutil.copy(MODULE / "index.js", DEPS / "index.js")
    (DEPS / "test").mkdir(exist_ok=True)
    shutil.copy(MODULE / "test" / "groups.mjs", DEPS / "test" / "groups.mjs")
    prefix = f"wmg-{uuid.uuid4().hex[:8]}"
    tenants = [f"{prefix}-{s}" for s in ("leave", "join", "removed", "demoted")]

    def token(sub: str) -> str:
        # In membership as data the token says who the caller is; its Member record
        # decides what it may do.
        return bearer(tenants, sub=sub, secret=TEST_AUTH_SECRET)["Authorization"].split()[1]

    node = shutil.which("node")
    assert node
    with api_server(settings) as url:
        result = subprocess.run(
            [node, "test/groups.mjs", f"{url}/graphql"]
            + [token(s) for s in ("olga", "bob", "carol")]
            + [prefix],
            cwd=DEPS,
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


def _found(report: dict[str, Any], name: str) -> dict[str, Any]:
    """One scenario's findings; a scenario that threw fails its own test only."""
    found: dict[str, Any] = report[name]
    assert "failed" not in found, (name, found.get("failed", ""))
    return found


def test_bob_leaves_kids_his_unsynced_edit_is_refused_and_both_records_go(
    report: dict[str, Any],
) -> None:
    found = _found(report, "leaveUnsynced")
    assert found["before"] == KIDS, found
    assert found["docs"] == VIEW, found
    # The pull goes first: its LeftViewItem refuses the edit on the device, unsent.
    assert found["rejected"] == [["letter", "LEFT_VIEW", None]], found
    assert found["unsynced"] is False, found
    assert found["carol"] == KIDS, found
    assert found["olga"] == OLGAS, found  # nothing written


def test_bob_joins_kids_his_syncing_and_offline_devices_both_get_its_records(
    report: dict[str, Any],
) -> None:
    found = _found(report, "joinTwoDevices")
    assert found["before"] == [VIEW, VIEW], found
    assert found["phone"] == found["tablet"] == found["fresh"] == KIDS, found


def test_bob_removed_with_an_edit_unsynced_his_device_lets_go_of_the_tenant(
    report: dict[str, Any],
) -> None:
    found = _found(report, "removedUnsynced")
    assert found["thrown"] == {"code": "FORBIDDEN", "reason": "NOT_A_MEMBER"}, found
    assert found["notAMember"] == {"refused": 1, "code": "FORBIDDEN", "reason": "NOT_A_MEMBER"}
    assert found["rejected"] == [["letter", "FORBIDDEN", "NOT_A_MEMBER"]], found
    assert found["docs"] == {}, found
    assert found["olga"] == OLGAS, found


def test_bob_demoted_to_reader_his_unsynced_edit_is_refused_and_nothing_goes(
    report: dict[str, Any],
) -> None:
    found = _found(report, "demotedUnsynced")
    assert found["rejected"] == [["letter", "FORBIDDEN", "ROLE"]], found
    assert found["notAMember"] is None, found
    assert found["docs"] == found["before"] == KIDS, found
    assert found["familyName"] is None, found  # reverted to the server's state
    assert found["olga"] == OLGAS, found
