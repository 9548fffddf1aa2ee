"""WatermelonDB syncing through the API with clients/watermelondb, in Node: the real
`@nozbe/watermelondb` package (pinned, unmodified) on its LokiJS adapter, against the
server and DynamoDB Local that the test session starts. "Equal" in every scenario:
each device holds exactly what a first sync of the tenant read to its last page
returns, a new device's first sync through the module too, and nothing is left to
push."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.settings import PROJECT_ROOT, Settings
from tests.support import node_packages, release2
from tests.support.gql import TEST_AUTH_SECRET, bearer
from tests.support.servers import api_server

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)

MODULE = PROJECT_ROOT / "clients" / "watermelondb"
# The default app's generated WatermelonDB schema (scripts/generate-clients).
COMMITTED_SCHEMA = PROJECT_ROOT / "examples" / "family" / "clients" / "watermelondb" / "schema.js"
DEPS = node_packages.WATERMELONDB.target
TENANTS = (
    "bulk",
    "silent",
    "offline",
    "delete",
    "many",
    "interrupted",
    "lost",
    "rejected",
    "reader",
    "token",
    "gone-pull",
    "gone-push",
    "live",
    "photo",
    "random-1",
    "random-2",
    "resync",
    "upgrade",
    "first",
    "undead",
    "retired",
    "rollback",
    "rolling",
    "member",
    "signout",
    "role",
    "unreachable",
)


@pytest.fixture(scope="module")
def module_dir() -> Path:
    """clients/watermelondb with its pinned dev dependencies (npm ci from the committed
    package-lock.json), in .cache/, and its sources beside them."""
    node_packages.install(node_packages.WATERMELONDB)
    shutil.copy(MODULE / "index.js", DEPS / "index.js")
    (DEPS / "test").mkdir(exist_ok=True)
    shutil.copy(MODULE / "test" / "scenarios.mjs", DEPS / "test" / "scenarios.mjs")
    # The tests' app's generated schema of each release, which the scenarios import.
    for release in sorted(p for p in release2.clients(1).parent.iterdir() if p.is_dir()):
        target = DEPS / "generated" / "release2" / release.name / "watermelondb"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(release / "watermelondb" / "schema.js", target / "schema.js")
    return DEPS


def _token(prefix: str) -> str:
    tenants = [f"{prefix}-{name}" for name in TENANTS]
    return bearer(tenants, secret=TEST_AUTH_SECRET)["Authorization"].split()[1]


@pytest.fixture(scope="module")
def report(
    module_dir: Path, settings: Settings, release_servers: dict[str, str]
) -> Iterator[dict[str, Any]]:
    """Every everyday scenario, against a server of tests/apps/release2/ (the
    product's catalog plus release 2's field, enum value and type: what the upgrade
    scenarios need, and a superset of what the others use)."""
    prefix = f"wm-{uuid.uuid4().hex[:8]}"
    with api_server(settings, extra_env=release2.SERVER_ENV) as url:
        yield _run(module_dir, url, _token(prefix), prefix, servers=release_servers)


def _run(
    module_dir: Path,
    url: str,
    token: str,
    prefix: str,
    *only: str,
    servers: dict[str, str] | None = None,
) -> dict[str, Any]:
    node = shutil.which("node")
    assert node
    # A reader of the tenants `reader` and `role` (contract 6, roles: its writes are
    # FORBIDDEN), and a token that lists none of the scenarios' tenants (a user
    # removed from them).
    reader = bearer([f"{prefix}-reader:reader", f"{prefix}-role:reader"], secret=TEST_AUTH_SECRET)[
        "Authorization"
    ]
    other = bearer([f"{prefix}-elsewhere"], secret=TEST_AUTH_SECRET)["Authorization"]
    result = subprocess.run(
        [
            node,
            "test/scenarios.mjs",
            f"{url}/graphql",
            token,
            prefix,
            *([",".join(only)] if only else []),
        ],
        cwd=module_dir,
        env={
            **os.environ,
            "WM_READER_TOKEN": reader.split()[1],
            "WM_OTHER_TOKEN": other.split()[1],
            **{f"WM_{name.upper()}_URL": at for name, at in (servers or {}).items()},
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    for name, findings in data.items():
        assert "failed" not in findings, (name, findings.get("failed", ""))
    return data


def test_a_device_away_longer_than_the_retention_resyncs_and_keeps_its_offline_edits(
    module_dir: Path, settings: Settings
) -> None:
    """Contract 3.6: the server keeps deletions 2 s; a device offline for 3 s, with an
    edit and a create of its own, gets RESYNC_REQUIRED, reads the tenant again with
    WatermelonDB's replacement strategy, drops the record deleted meanwhile and
    pushes its edits."""
    prefix = f"wm-{uuid.uuid4().hex[:8]}"
    with api_server(settings, extra_env={"RETENTION_SECONDS": "2"}) as url:
        found = _run(module_dir, url, _token(prefix), prefix, "resyncAcrossTheHorizon")
    resync = found["resyncAcrossTheHorizon"]
    assert resync["resyncs"] >= 1 and resync["equal"], resync
    server = resync["server"]
    assert "x" not in server  # deleted while the device was away: dropped by the resync
    assert server["y"] == {"givenName": "y", "familyName": "changed"}
    assert server["z"] == {"givenName": "z", "occupation": "offline edit"}
    assert server["w"] == {"givenName": "created offline"}


def test_a_silent_push_ahead_of_the_copy_syncs_and_one_not_ahead_makes_no_request(
    report: dict[str, Any],
) -> None:
    silent = {k: v for k, v in report["silentPush"].items() if k != "seconds"}
    assert silent == {
        "stale": False,
        "other": False,
        "idle": 0,
        "waiting": "Pat",
        "pulled": True,
        "after": "Patty",
        "again": False,  # now the copy holds that token
    }


def test_a_bulk_pull_comes_in_pages_applied_a_few_at_a_time(report: dict[str, Any]) -> None:
    bulk = report["bulkPull"]
    assert bulk["equal"] and bulk["count"] == 250 and bulk["tokens"] == 250, bulk
    assert bulk["reminders"] == 20 and bulk["remindersEqual"], bulk
    assert bulk["pages"] >= 6 and bulk["rounds"] >= 3, bulk  # 2 pages per synchronize()


def test_two_devices_offline_editing_the_same_and_different_records_converge(
    report: dict[str, Any],
) -> None:
    run = report["offlineEdits"]
    assert run["equal"], run
    assert run["offlineFailed"]  # offline, synchronize() fails and nothing is lost
    assert run["conflictsB"] >= 2 and run["roundsB"] >= 3, run  # failed, pulled, pushed again
    server = run["server"]
    assert server["x"] == {"givenName": "Anna", "familyName": "Lovelace"}  # per column
    assert server["w"] == {"givenName": "Di", "occupation": "surgeon"}  # the last push wins
    assert server["y"] == {"givenName": "Bo", "occupation": "pilot"}
    assert server["z"] == {"givenName": "Cy", "familyName": "Young"}
    assert server["na"] == {"givenName": "new on a"} and server["nb"] == {"givenName": "new on b"}


def test_a_deletion_racing_an_edit_wins_in_either_order(report: dict[str, Any]) -> None:
    run = report["deleteVersusEdit"]
    assert run["equal"], run
    assert run["server"] == {"k": {"givenName": "Kept", "occupation": "still here"}}, run
    assert run["conflictsA"] >= 1, run  # the deletion met the edited version


def test_300_offline_edits_reach_the_server_with_conflicts_on_the_way(
    report: dict[str, Any],
) -> None:
    run = report["manyOfflineEdits"]
    assert run["equal"] and run["edits"] == 300, run
    assert run["serverCount"] == 150 and run["conflicts"] >= 10, run


def test_an_interrupted_pull_resumes_from_the_last_page_it_applied(report: dict[str, Any]) -> None:
    run = report["interruptedPull"]
    assert run["interrupted"] and run["afterFailure"] == 100, run  # two pages applied
    # Not from the start: the 4 pages left of the interrupted read, then one page from
    # its end's token, in the same sync() call.
    assert run["resumedWithCursor"] and run["pagesAfterResume"] == 5, run
    # The writes committed before that call, after the interrupted read's bound.
    assert run["caughtUp"], run
    assert run["equal"] and run["count"] == 303, run


def test_a_lost_push_response_is_written_once(report: dict[str, Any]) -> None:
    run = report["lostPushResponse"]
    assert run["lost"] and run["equal"], run
    assert run["versions"] == 1, run  # one update: the earlier version and no second one


def test_a_rejected_record_is_reported_once_and_reverted(report: dict[str, Any]) -> None:
    run = report["rejectedRecord"]
    assert run["rejected"] == [["bad", "BAD_USER_INPUT"]], run
    assert run["equal"] and run["server"] == {"good": {"givenName": "fine"}}, run


def test_a_reader_s_refused_deletion_is_reported_once_and_the_record_comes_back(
    report: dict[str, Any],
) -> None:
    run = report["readerDeletion"]
    assert run["rejected"] == [["kept", "FORBIDDEN", "delete"]], run  # once, across syncs
    assert run["deletionsSent"] == 1, run  # not pushed again
    restored = {"givenName": "Kept", "occupation": "the server's"}
    assert run["afterSync"] == {"restored": restored, "clean": True}, run
    assert run["equal"] and run["server"] == {"kept": restored}, run


def test_a_table_declaring_a_subset_of_the_columns_deletes_a_record(
    report: dict[str, Any],
) -> None:
    """Its undeclared field set on the server, the deletion applies all the same."""
    narrow = report["readerDeletion"]["narrow"]
    assert narrow == {"conflicts": 0, "rejected": 0, "local": ["kept"]}, narrow
    assert "narrow" not in report["readerDeletion"]["server"]


def test_a_refused_token_is_refreshed(report: dict[str, Any]) -> None:
    run = report["tokenRefresh"]
    assert run["equal"] and run["refreshes"] >= 1, run


def test_a_deleted_tenant_drops_the_local_copy_from_a_pull_or_a_push(
    report: dict[str, Any],
) -> None:
    for where in ("pull", "push"):
        run = report["tenantDeleted"][where]
        assert run["code"] == "TENANT_DELETED" and run["told"] == 1, (where, run)
        assert run["localPeople"] == 0 and run["position"] is None and not run["unsynced"], (
            where,
            run,
        )
    assert report["tenantDeleted"]["pull"]["server"] == {}


def test_realtime_pokes_carry_changes_back_and_forth(report: dict[str, Any]) -> None:
    run = report["realtime"]
    assert run["equal"], run
    assert all(ms is not None for ms in run["ms"].values()), run


def test_a_photo_reference_syncs_and_downloads_the_same_bytes(report: dict[str, Any]) -> None:
    run = report["photoRecipe"]
    assert run["equal"] and run["identical"] and run["pulled"] == run["ref"], run


def test_random_three_device_runs_end_equal(report: dict[str, Any]) -> None:
    for name in ("random1", "random2"):
        assert report[name]["equal"] and report[name]["serverCount"] > 0, report[name]


def test_an_upgrade_s_migration_sync_brings_the_new_table_and_column_written_before_it(
    report: dict[str, Any],
) -> None:
    """Issue 47, finding 4: WatermelonDB passes pull a `migration` naming the table
    (notes) and the column (people.nickname) schema version 2 added; the module asks
    catchUp for them, up to the token the release 1 app had reached, then pulls on."""
    run = report["upgradeCatchesUp"]
    assert run["before"] == 9 and run["people"] == 9, run
    assert run["notes"] == 11, run  # the table added by the upgrade: every record
    assert run["nicknames"] == 9, run  # 7 set before the last release 1 pull, 2 after
    assert run["caughtUp"] == 18, run  # 7 people and 11 notes: none of the rest
    assert run["pushed"] == "offline edit" and run["clean"] and run["errors"] == [], run


def test_a_migration_adding_a_first_release_table_and_column_brings_what_was_written(
    report: dict[str, Any],
) -> None:
    """An app whose schema version 1 had only the people table, without occupation:
    its migration adds the reminders table and the occupation column, both of the
    catalog's first release; the catch-up brings all 11 reminders and 6 occupations
    (before: none of either)."""
    run = report["firstReleaseCatchesUp"]
    assert run["before"] == 9 and run["people"] == 9, run
    assert run["reminders"] == 11 and run["occupations"] == 6, run
    assert run["caughtUp"] == 20, run  # every reminder and person: the type named whole
    assert run["clean"] and run["errors"] == [], run


def test_people_deleted_through_a_rollback_stay_deleted_at_the_upgrade(
    report: dict[str, Any],
) -> None:
    """A release 2 app gave p1 and p2 a nickname; through a release 1 server p1 is
    deleted, p2 edited then deleted, p3 edited: the device upgraded to release 2
    holds p3 with its nickname, and neither deleted person (before: both came back)."""
    run = report["rollbackDeletionsAtUpgrade"]
    assert run["before"] == ["p3"], run
    assert run["after"] == {"p3": "nick3"}, run
    assert run["caughtUp"] == 1 and run["clean"] and run["errors"] == [], run


def test_a_retired_release_is_told_to_upgrade_and_keeps_its_unsent_records(
    report: dict[str, Any],
) -> None:
    run = report["upgradeRequired"]
    assert run["refused"] == {"code": "UPGRADE_REQUIRED", "servedRelease": None}, run
    assert run["kept"], run  # unsent, still marked so
    assert run["after"] is None and run["clean"], run  # the updated app sends it
    assert run["server"] == {"givenName": "Queued", "nickname": None}, run


def test_release_1_documents_answered_by_a_release_2_server_are_asked_again(
    report: dict[str, Any],
) -> None:
    """A rolling deploy: refused by a release 1 server, asked again with release 1's
    documents, answered by a release 2 server (it says so): asked again with the
    app's, the nickname arrives."""
    run = report["rollingDeploy"]
    assert run["error"] is None and run["nickname"] == "F", run


def test_a_release_2_app_served_by_a_release_1_server_syncs_what_it_knows_and_loses_nothing(
    report: dict[str, Any],
) -> None:
    """A rollback (issue 47, Build 2): the tables say which release added their type
    and fields (`release`, `fieldReleases`); the module asks the release 1 server with
    release 1's documents."""
    run = report["rollback"]
    during = run["during"]
    known = {"givenName": "Known", "familyName": "Edited", "nickname": "Kay"}
    # Pulled: a release 1 app's person, a nickname cleared by a release 2 app (the
    # server sends no version holding a field it lacks); nothing past a nickname set
    # meanwhile (a version it cannot render whole: its token stays below it).
    device = during["device"]
    assert device.get("made") == {"givenName": "Made on release 1"}, run
    assert device["cleared"] == {"givenName": "Cleared"}, run
    assert device["late"] == {"givenName": "Late"} and "made2" not in device, run
    # Nor past a note (a type it lacks: its pages hold every type, so the note's change
    # ends one, where `types` would skip it and move the token past it).
    assert during["notes"] == [["rn", "kept"]], run
    # Pushed: the edit of a release 1 field (the nickname kept on the server and here).
    assert during["server"]["k"] == known and device["k"] == known, run
    # Held, named in the error with the served release: the nickname edits, the note.
    assert run["refused"] == {"code": "HELD_FOR_RELEASE", "servedRelease": 1}, run
    assert during["server"]["plain"] == {"givenName": "Plain"}, run
    assert "r" not in during["server"] and during["note"] is None and during["kept"], run
    # A release 2 server again: the held records go, the rest arrives.
    assert run["after"] is None and run["clean"], run
    assert run["server"] == {
        "k": known,
        "plain": {"givenName": "Plain", "nickname": "Plainy"},
        "r": {"givenName": "Rolled", "nickname": "Rolly"},
        "cleared": {"givenName": "Cleared"},
        "made": {"givenName": "Made on release 1"},
        "late": {"givenName": "Late", "nickname": "Late"},
        "made2": {"givenName": "Made after it"},
    }, run
    assert run["device"] == run["server"] and run["note"] == {"text": "kept"}, run
    assert run["notes"] == [["rn", "kept"], ["sn", "from release 2"]], run


def test_the_readme_s_complete_example_runs_as_written(
    module_dir: Path, settings: Settings, tenant: str
) -> None:
    """example.mjs (schema, model, adapter, Database, sync), shown whole in the README,
    run as it says against a server: the person it saves comes back synced."""
    example = (MODULE / "example.mjs").read_text()
    assert f"```js\n{example}```" in (MODULE / "README.md").read_text()
    shutil.copy(MODULE / "example.mjs", module_dir / "example.mjs")
    # What `scripts/generate-clients --out generated` writes for the default app.
    generated = module_dir / "generated" / "watermelondb"
    generated.mkdir(parents=True, exist_ok=True)
    shutil.copy(COMMITTED_SCHEMA, generated / "schema.js")
    token = bearer([tenant], secret=TEST_AUTH_SECRET)["Authorization"].split()[1]
    node = shutil.which("node")
    assert node
    with api_server(settings) as url:
        result = subprocess.run(
            [node, "example.mjs", f"{url}/graphql", tenant, token],
            cwd=module_dir,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].endswith(" Ann Lee"), (result.stdout, result.stderr)


def test_a_device_removed_from_a_tenant_lets_go_of_it_and_reports_its_unsynced_changes(
    report: dict[str, Any],
) -> None:
    """Its token no longer lists the tenant: the pull is refused NOT_A_MEMBER, the
    database is reset (records, position, a local blob), each unsynced change (a
    create, an update, a deletion) is reported, and the client asks nothing more."""
    found = report["notAMember"]
    assert (found["code"], found["reason"]) == ("FORBIDDEN", "NOT_A_MEMBER"), found
    refused = [["create", "m3"], ["delete", "m2"], ["update", "m1"]]
    assert found["refused"] == refused and found["told"] == [refused]
    assert found["rejected"] == [[k, i, "FORBIDDEN", "NOT_A_MEMBER"] for k, i in refused]
    assert found["local"] == {"people": 0, "position": None, "bytes": None, "unsynced": False}
    assert found["again"] == {"code": "FORBIDDEN", "requests": 0}  # no request after it
    assert found["server"] == {"m1": {"givenName": "One"}, "m2": {"givenName": "Two"}}


def test_signing_out_lets_go_of_the_tenant_without_a_request(report: dict[str, Any]) -> None:
    found = report["signOut"]
    assert found["refused"] == [
        ["create", "m3", "SIGNED_OUT"],
        ["delete", "m2", "SIGNED_OUT"],
        ["update", "m1", "SIGNED_OUT"],
    ], found
    assert found["requests"] == 0 and found["told"] == 1
    assert found["local"] == {"people": 0, "position": None, "bytes": None, "unsynced": False}
    assert found["server"] == {"m1": {"givenName": "One"}, "m2": {"givenName": "Two"}}


def test_a_refusal_for_the_role_lets_go_of_nothing(report: dict[str, Any]) -> None:
    """A reader's changes are refused for the role (FORBIDDEN, ROLE): each reported,
    put back as the server holds them; the database is not reset."""
    found = report["roleRefusalKeepsAll"]
    assert found["told"] == 0, found
    assert found["rejected"] == [
        ["create", "m3", "FORBIDDEN", "ROLE"],
        ["delete", "m2", "FORBIDDEN", "ROLE"],
        ["update", "m1", "FORBIDDEN", "ROLE"],
    ]
    assert found["device"] == {"m1": {"givenName": "One"}, "m2": {"givenName": "Two"}}
    assert found["position"] and found["bytes"] == "kept"


def test_an_unreachable_server_lets_go_of_nothing(report: dict[str, Any]) -> None:
    found = report["unreachableKeepsAll"]
    assert found["error"] == "TypeError" and found["told"] == 0, found
    assert found["during"] == {"people": 2, "unsynced": True, "position": True, "bytes": "kept"}
    # Back online, the unsynced changes go.
    assert found["server"] == {
        "m1": {"givenName": "One", "occupation": "edited offline"},
        "m3": {"givenName": "Three"},
    }
