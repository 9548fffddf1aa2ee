"""Bob's RxDB devices follow his groups and role (clients/rxdb, the real `rxdb`
package in Node 22, test/groups.mjs), as an app of the family app's release 4
replicating against a server, in a tenant whose members are data: he leaves the group
a letter and a memo are shared with, his edit of the letter queued offline (refused,
nothing written; both go, carol in the group and olga keep them); he joins it with
one device online and one offline (both get it, as a new device does); removed
(REMOVED) with an edit
queued, his device lets go of the tenant (onNotAMember); demoted to READER with an
edit queued, the edit is refused FORBIDDEN (ROLE) and nothing goes (contract 3.12
"Groups", 6)."""

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

VIEW = {"cy": "cy", "di": "di", "ed": "ed"}
WITH_LETTER = {"letter": "Letter", **VIEW}
OLGAS = {"givenName": "Letter", "familyName": None}


@pytest.fixture(scope="module")
def report(settings: Settings) -> dict[str, Any]:
    module_dir: Path = rxdb.install()
    prefix = f"rxg-{uuid.uuid4().hex[:8]}"
    tenants = [f"{prefix}-{s}" for s in ("leave", "join", "removed", "demoted")]

    def token(sub: str) -> str:
        # In membership as data the token says who the caller is; its Member record
        # decides what it may do.
        return bearer(tenants, sub=sub, secret=TEST_AUTH_SECRET)["Authorization"].split()[1]

    with api_server(settings) as url:
        result = subprocess.run(
            [rxdb.NODE, "test/groups.mjs", f"{url}/graphql"]
            + [token(s) for s in ("olga", "bob", "carol")]
            + [prefix],
            cwd=module_dir,
            env=rxdb.node_env(),
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


def test_bob_leaves_kids_his_queued_edit_is_refused_and_the_letter_goes(
    report: dict[str, Any],
) -> None:
    found = _found(report, "leaveQueued")
    assert found["before"] == {**WITH_LETTER, "memo": "Memo"}, found
    assert found["docs"] == VIEW, found  # the memo went with a LeftViewItem
    assert found["rejected"] == [["letter", "NOT_FOUND", None]], found
    assert found["carol"] == {**WITH_LETTER, "memo": "Memo"}, found
    assert found["olga"] == OLGAS, found  # nothing written


def test_bob_joins_kids_his_online_and_offline_devices_both_get_the_letter(
    report: dict[str, Any],
) -> None:
    found = _found(report, "joinTwoDevices")
    assert found["before"] == [VIEW, VIEW], found
    assert found["phone"] == found["tablet"] == found["fresh"] == WITH_LETTER, found


def test_bob_removed_with_an_edit_queued_his_device_lets_go_of_the_tenant(
    report: dict[str, Any],
) -> None:
    found = _found(report, "removedQueued")
    assert found["notAMember"] == {"refused": 1, "code": "FORBIDDEN", "reason": "NOT_A_MEMBER"}
    assert found["rejected"] == [["letter", "FORBIDDEN", "NOT_A_MEMBER"]], found
    assert found["removed"] is True, found
    assert found["olga"] == OLGAS, found


def test_bob_demoted_to_reader_his_queued_edit_is_refused_and_nothing_goes(
    report: dict[str, Any],
) -> None:
    found = _found(report, "demotedQueued")
    assert found["rejected"] == [["letter", "FORBIDDEN", "ROLE"]], found
    assert found["notAMember"] is None, found
    assert found["docs"] == found["before"] == WITH_LETTER, found
    assert found["olga"] == OLGAS, found
