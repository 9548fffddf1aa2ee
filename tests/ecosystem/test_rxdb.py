"""RxDB replicating through the API with clients/rxdb (replicateSyncAPI), in Node 22:
the real `rxdb` package (memory storage) with its default conflict handler."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.settings import Settings
from tests.support import release2, rxdb
from tests.support.gql import TEST_AUTH_SECRET, bearer
from tests.support.servers import api_server

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)


@pytest.fixture(scope="module")
def module_dir() -> Path:
    """clients/rxdb with its locked dev dependencies (rxdb, rxjs, ...), in .cache/."""
    return rxdb.install()


@pytest.fixture(scope="module")
def report(
    module_dir: Path, settings: Settings, release_servers: dict[str, str]
) -> Iterator[dict[str, Any]]:
    """Every everyday scenario, against a server of tests/apps/release2/ (the
    product's catalog plus release 2's: what the upgrade scenarios need, and a
    superset of what the others use)."""
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    tenants = [
        f"{prefix}-{name}"
        for name in (
            "bulk",
            "two",
            "fields",
            "row",
            "overlap",
            "delete",
            "subset",
            "lost",
            "poke",
            "silent",
            "rejected",
            "pause",
            "merge-fieldLevel",
            "merge-default",
            "deleted",
            "deleted-outbox",
            "photo",
            "random-1",
            "random-2",
            "upgrade",
            "phone",
            "undead",
            "retired",
            "rollback",
            "rolling",
            "member",
            "signout",
            "role",
            "unreachable",
        )
    ]
    token = bearer(tenants, secret=TEST_AUTH_SECRET)["Authorization"].split()[1]
    with api_server(settings, extra_env=release2.SERVER_ENV) as url:
        yield _run(module_dir, url, token, prefix, servers=release_servers, tokens=_tokens(prefix))


def _tokens(prefix: str) -> dict[str, str]:
    """The membership scenarios' other tokens: one that does not list their tenants
    (the user was removed from them), one that lists `<prefix>-role` as a reader."""
    made = {"other": [f"{prefix}-elsewhere"], "reader": [f"{prefix}-role:reader"]}
    return {
        name: bearer(tenants, secret=TEST_AUTH_SECRET)["Authorization"].split()[1]
        for name, tenants in made.items()
    }


def _run(
    module_dir: Path,
    url: str,
    token: str,
    prefix: str,
    *only: str,
    servers: dict[str, str] | None = None,
    tokens: dict[str, str] | None = None,
) -> dict[str, Any]:
    result = subprocess.run(
        [
            rxdb.NODE,
            "test/scenarios.mjs",
            f"{url}/graphql",
            token,
            prefix,
            *([",".join(only)] if only else []),
        ],
        cwd=module_dir,
        env={
            **rxdb.node_env(),
            **{f"RX_{name.upper()}_URL": at for name, at in (servers or {}).items()},
            "RX_TOKENS": json.dumps(tokens or {}),
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
    """Contract 3.6 with RxDB: the server keeps deletions 2 s; a device offline for
    3 s, with an edit and a create of its own, gets RESYNC_REQUIRED, downloads the
    live data again, drops the entity deleted meanwhile and pushes its edits."""
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    token = bearer([f"{prefix}-resync"], secret=TEST_AUTH_SECRET)["Authorization"].split()[1]
    with api_server(settings, extra_env={"RETENTION_SECONDS": "2"}) as url:
        found = _run(module_dir, url, token, prefix, "resyncAcrossTheHorizon")
    resync = found["resyncAcrossTheHorizon"]
    assert resync["resyncs"] >= 1 and resync["errors"] == []
    assert resync["equal"], resync
    server = resync["server"]
    assert "x" not in server  # deleted while the device was away: dropped by the resync
    assert server["y"] == {"givenName": "y", "familyName": "changed"}
    assert server["z"] == {"givenName": "z", "occupation": "offline edit"}
    assert server["w"] == {"givenName": "created offline"}


def test_a_bulk_pull_of_250_people_comes_in_pages_of_only_that_type(report: dict[str, Any]) -> None:
    bulk = report["bulkPull"]
    assert bulk["count"] == 250 and bulk["equal"]
    assert bulk["requests"] >= 5  # pages of 50


def test_two_devices_converge(report: dict[str, Any]) -> None:
    two = report["twoDevicesConverge"]
    assert two["equal"] and two["a"]["x"] == {"givenName": "Ann", "familyName": "Lovelace"}


def test_concurrent_edits_of_different_fields_both_survive(report: dict[str, Any]) -> None:
    fields = report["concurrentFieldEdits"]
    assert fields["equal"]
    assert fields["server"]["y"] == {"givenName": "Anna", "occupation": "mathematician"}


def test_two_edits_in_a_row_before_any_pull_both_reach_the_server(
    report: dict[str, Any],
) -> None:
    row = report["twoEditsInARow"]
    assert row["server"]["z"] == {"givenName": "three"} == row["device"]["z"]
    assert row["errors"] == []


def test_a_pull_overlapping_a_push_converges_with_both_edits(report: dict[str, Any]) -> None:
    overlap = report["pullOverlappingPush"]
    assert overlap["equal"]
    assert overlap["server"]["w"] == {"givenName": "Anna", "occupation": "b"}


def test_delete_versus_edit_converges_on_the_deletion(report: dict[str, Any]) -> None:
    deleted = report["deleteVersusEdit"]
    assert deleted["equal"] and "v" not in deleted["server"]


def test_a_deletion_applies_whatever_fields_the_schema_does_not_declare(
    report: dict[str, Any],
) -> None:
    """Issue 47: the schema lacks phoneNumber, set on the server: the deletion is not a
    CONFLICT that RxDB's default handler answers by putting the person back."""
    run = report["subsetDeletion"]
    assert run["server"] == {} and run["equal"] and run["errors"] == [], run


def test_a_push_whose_response_is_lost_is_retried_with_its_id_and_writes_once(
    report: dict[str, Any],
) -> None:
    lost = report["lostPushResponse"]
    first, retried = lost["pushes"][0], lost["pushes"][1]
    assert first[0][0] == retried[0][0]  # the same clientMutationID
    assert first[0][1:] == ["APPLIED", False] and retried[0][1:] == ["APPLIED", True]
    assert lost["server"]["u"] == {"givenName": "Anna"} == lost["device"]["u"]


def test_a_poke_makes_a_live_device_pull_without_polling(report: dict[str, Any]) -> None:
    assert report["pokeDrivesPull"]["arrivedMs"] is not None


def test_a_silent_push_ahead_of_the_checkpoint_pulls_and_one_not_ahead_asks_nothing(
    report: dict[str, Any],
) -> None:
    silent = {k: v for k, v in report["silentPush"].items() if k != "seconds"}
    assert silent == {
        "first": "Pat",
        "stale": False,
        "other": False,
        "idle": 0,
        "waiting": "Pat",  # no socket: nothing pulled until the push
        "pulled": True,
        "after": "Patty",
    }


def test_a_rejected_row_is_reported_reverted_and_not_retried(report: dict[str, Any]) -> None:
    rejected = report["rejectedRow"]
    assert rejected["errors"].count("BAD_USER_INPUT") == 1  # once: not retried
    assert rejected["server"] == {"good": {"givenName": "fine"}} == rejected["device"]


def test_pause_then_start_keeps_one_socket_and_one_subscription(report: dict[str, Any]) -> None:
    run = report["pauseStartOneSocket"]
    one = {"sockets": 1, "subscriptions": 1}
    assert run["live"] == one and run["restarted"] == one, run
    assert run["paused"] == {"sockets": 0, "subscriptions": 0}, run
    assert run["cancelled"] == {"sockets": 0, "subscriptions": 0}, run
    assert run["arrived"], run


def test_the_field_level_conflict_handler_keeps_edits_the_server_did_not_overlap(
    report: dict[str, Any],
) -> None:
    merged = report["fieldLevelConflicts"]
    both = {"givenName": "Anna", "familyName": "Lovelace", "occupation": "doctor"}
    assert merged["fieldLevel"]["server"] == both == merged["fieldLevel"]["b"], merged
    assert merged["fieldLevel"]["a"] == both, merged
    # RxDB's default handler: B's familyName edit is dropped (the reason for the option).
    assert merged["default"]["b"]["familyName"] == "Lee", merged


def test_random_multi_device_runs_end_with_every_device_equal_to_the_server(
    report: dict[str, Any],
) -> None:
    for name in ("random1", "random2"):
        assert report[name]["equal"], report[name]
        assert report[name]["serverCount"] > 0


def test_a_deleted_tenant_stops_the_replication_and_tells_the_app(
    report: dict[str, Any],
) -> None:
    deleted = report["tenantDeleted"]
    assert deleted["told"] == 1 and deleted["stopped"] is True
    assert deleted["server"] == {}


def test_a_device_offline_while_its_tenant_is_deleted_writes_none_of_its_outbox(
    report: dict[str, Any],
) -> None:
    deleted = report["tenantDeletedOutbox"]
    assert deleted["told"] == 1 and deleted["stopped"] is True
    assert deleted["server"] == {}


REFERENCE = {"sha256", "size", "contentType"}


def test_the_readme_shows_the_photo_example_that_the_tests_run() -> None:
    example = (rxdb.MODULE / "example.mjs").read_text()
    assert f"```js\n{example}```" in (rxdb.MODULE / "README.md").read_text()


def test_the_readme_s_device_in_node_runs_as_written(
    module_dir: Path, settings: Settings, tenant: str
) -> None:
    """examples/node.mjs, shown whole in the README, run as it says against a server."""
    script = (rxdb.MODULE / "examples" / "node.mjs").read_text()
    assert f"```js\n{script}```" in (rxdb.MODULE / "README.md").read_text()
    token = bearer([tenant], secret=TEST_AUTH_SECRET)["Authorization"].split()[1]
    with api_server(settings) as url:
        result = subprocess.run(
            [rxdb.NODE, "examples/node.mjs", f"{url}/graphql", tenant, token],
            cwd=module_dir,
            env=rxdb.node_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["ann Ann Lee"], (result.stdout, result.stderr)


def test_the_readme_s_dexie_storage_in_node_runs_on_fake_indexeddb(module_dir: Path) -> None:
    """The README's snippet (Dexie storage in Node, with fake-indexeddb), run as written."""
    script = (rxdb.MODULE / "test" / "dexie_node.mjs").read_text()
    snippet = script.split("// The lines above")[0]
    assert f"```js\n{snippet}```" in (rxdb.MODULE / "README.md").read_text()
    result = subprocess.run(
        [rxdb.NODE, "test/dexie_node.mjs"],
        cwd=module_dir,
        env=rxdb.node_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == {"storage": "dexie", "found": ["ann", "bob"]}, found


def test_a_photo_attached_online_then_offline_reaches_another_device_byte_for_byte(
    report: dict[str, Any],
) -> None:
    photo = report["photoAttachments"]
    online, offline, pulled = photo["online"], photo["offline"], photo["pulled"]
    assert online["server"]["photo"] == online["expected"] and online["uploads"] == 0, online
    # Offline: the reference saved at once, the bytes kept, uploaded on reconnect.
    assert offline["local"] == offline["expected"] and offline["notYetUploaded"], offline
    assert offline["kept"] == [offline["expected"]["sha256"]], offline
    assert offline["server"]["photo"] == offline["expected"], offline
    # The other device holds the reference only, and downloads the same bytes.
    assert pulled["photo"] == offline["expected"] and pulled["identical"], pulled
    assert pulled["server"] == {"givenName": "Anna", "photo": offline["expected"]}, pulled
    # Every state pushed carried the reference only, never a link.
    assert photo["pushedPhotos"] and all(set(p) == REFERENCE for p in photo["pushedPhotos"])
    assert photo["errorsBefore"] == [], photo


def test_a_reference_to_bytes_not_uploaded_is_rejected_with_nothing_written_until_saved_again(
    report: dict[str, Any],
) -> None:
    missing = report["photoAttachments"]["missing"]
    assert missing["errors"].count("ATTACHMENT_MISSING") == 1, missing  # once: not retried
    assert missing["server"] is None and missing["device"] is None, missing
    assert missing["notFound"], missing
    # Uploaded afterwards, the refused document saved again reaches the server.
    resaved = missing["resaved"]
    assert resaved["errors"] == [] and resaved["server"] is not None, resaved  # not NOT_FOUND
    assert resaved["server"]["givenName"] == "Ghost", resaved
    assert set(resaved["server"]["photo"]) == REFERENCE, resaved


def test_a_schema_version_bump_catches_up_on_the_new_field_written_before_it(
    report: dict[str, Any],
) -> None:
    """Issue 47, finding 3: RxDB keeps the replication's checkpoint through its schema
    migration; the module kept what the collection declared in it, and asks catchUp
    for the field the new version adds, up to that checkpoint's token."""
    run = report["upgradeCatchesUp"]
    assert run["pulled"] == 9 and run["people"] == 9, run
    assert run["nicknames"] == 9, run  # 7 set before the last release 1 pull, 2 after
    # The 7 people with a nickname, none of the rest; 6 when RxDB pushed p0's offline
    # edit before the pull's catch-up ran (they race): p0's version is then newer than
    # the checkpoint's token, and comes with the pull instead.
    assert run["caughtUp"] in (6, 7), run
    assert run["server"] == {"occupation": "offline edit", "nickname": "nick0"}, run
    assert run["errors"] == [], run


def test_a_schema_version_adding_a_first_release_field_catches_up_on_its_values(
    report: dict[str, Any],
) -> None:
    """A collection whose schema version 1 adds phoneNumber, a field of the catalog's
    first release, the app's release unchanged: the first pull after the migration
    brings the 5 numbers set before it (before: none)."""
    run = report["firstReleaseFieldCatchesUp"]
    assert run["pulled"] == 8 and run["people"] == 8, run
    assert run["phones"] == 5, run
    assert run["caughtUp"] == 8, run  # the field's type, read whole: it is release 1's
    assert run["errors"] == [], run


def test_people_deleted_through_a_rollback_stay_deleted_at_the_upgrade(
    report: dict[str, Any],
) -> None:
    """A release 2 app gave p1 and p2 a nickname; through a release 1 server p1 is
    deleted, p2 edited then deleted, p3 edited: the device updated to release 2 holds
    p3 with its nickname, and neither deleted person (before: both came back)."""
    run = report["rollbackDeletionsAtUpgrade"]
    assert run["before"] == ["p3"], run
    assert run["after"] == {"p3": "nick3"}, run
    assert run["errors"] == [], run


def test_a_retired_release_is_told_to_upgrade_and_keeps_its_unpushed_document(
    report: dict[str, Any],
) -> None:
    run = report["upgradeRequired"]
    assert run["refused"] == {"code": "UPGRADE_REQUIRED", "servedRelease": None}, run
    assert run["after"] == [] and run["server"] == {"givenName": "Queued"}, run


def test_release_1_documents_answered_by_a_release_2_server_are_asked_again(
    report: dict[str, Any],
) -> None:
    """A rolling deploy: refused by a release 1 server, asked again with release 1's
    documents, answered by a release 2 server (it says so): asked again with the
    app's, the nickname arrives."""
    run = report["rollingDeploy"]
    assert run["errors"] == [] and run["nickname"] == "F", run


def test_a_release_2_app_on_a_release_1_server_syncs_what_it_knows_and_loses_nothing(
    report: dict[str, Any],
) -> None:
    """A rollback (issue 47, Build 2): the app says which release added each field
    (`fieldReleases`) and asks the release 1 server with release 1's documents."""
    run = report["rollback"]
    # Pulled: a release 1 app's person, and a nickname cleared by a release 2 app (the
    # server sends no version holding a field it does not know: not kept locally).
    # Not past a nickname set meanwhile (a version it cannot render whole): its token
    # stays below it, and what follows waits for a release 2 server.
    assert run["pulled"] == {
        "made": {"givenName": "Made on release 1"},
        "cleared": {"givenName": "Cleared"},
        "late": {"givenName": "Late"},
        "made2": None,
    }, run
    # Pushed: the offline edit of a release 1 field; the server kept the nickname, and
    # so did the device (the push's answer lacks it).
    known = {"givenName": "Known", "familyName": "Edited", "nickname": "Kay"}
    assert run["pushed"] == {"k": known, "server": known, "errors": []}, run
    # In a batch with edits of nicknames: the release 1 field's goes, they wait
    # (reported with the served release).
    held = run["held"]
    assert held["refused"] == {"code": "HELD_FOR_RELEASE", "servedRelease": 1}, run
    assert held["server"]["cleared"] == {"givenName": "Cleared", "familyName": "Edited too"}, run
    assert held["server"]["plain"] == {"givenName": "Plain"} and "r" not in held["server"], run
    # A release 2 server again: the held rows go, the rest arrives; device and server agree.
    assert run["after"] == [], run
    assert run["server"] == {
        "k": known,
        "plain": {"givenName": "Plain", "nickname": "Plainy"},
        "r": {"givenName": "Rolled", "nickname": "Rolly"},
        "cleared": {"givenName": "Cleared", "familyName": "Edited too"},
        "made": {"givenName": "Made on release 1"},
        "late": {"givenName": "Late", "nickname": "Late"},
        "made2": {"givenName": "Made after it"},
    }, run
    assert run["device"] == run["server"], run


def test_a_device_removed_from_a_tenant_lets_go_of_it_and_reports_its_queued_edits(
    report: dict[str, Any],
) -> None:
    """Its token no longer lists the tenant: the next request is refused NOT_A_MEMBER,
    the replication stops and asks nothing more, the collection (documents and
    checkpoint) and the tenant's other local collection are removed, and both queued
    edits are reported, none written."""
    found = report["notAMember"]
    assert found["told"]["lost"] == [
        {"refused": ["queued", "x"], "code": "FORBIDDEN", "reason": "NOT_A_MEMBER"}
    ], found
    assert sorted(found["told"]["rejected"]) == [
        ["queued", "FORBIDDEN", "NOT_A_MEMBER"],
        ["x", "FORBIDDEN", "NOT_A_MEMBER"],
    ]
    assert found["stopped"] and found["removed"] == {"people": True, "uploads": True}
    assert found["after"] == 0  # not a request after it
    unchanged = {"x": {"givenName": "Ann"}, "y": {"givenName": "Bob"}}
    assert found["server"] == unchanged
    # The same replication again, with access: it reads from the start (no checkpoint kept).
    assert found["again"] == unchanged


def test_signing_out_lets_go_of_the_tenant_without_a_request(report: dict[str, Any]) -> None:
    found = report["signOut"]
    assert [lost["refused"] for lost in found["told"]["lost"]] == [["queued", "x"]], found
    assert sorted(found["told"]["rejected"]) == [
        ["queued", "SIGNED_OUT", None],
        ["x", "SIGNED_OUT", None],
    ]
    assert found["removed"] == {"people": True, "uploads": True} and found["after"] == 0
    unchanged = {"x": {"givenName": "Ann"}, "y": {"givenName": "Bob"}}
    assert found["server"] == unchanged and found["again"] == unchanged


def test_a_refusal_for_the_role_lets_go_of_nothing(report: dict[str, Any]) -> None:
    """A reader's writes: each row refused (ROLE) and put back as the server holds it;
    the replication runs on, the collections stay."""
    found = report["roleRefusalKeepsAll"]
    assert found["told"]["lost"] == [], found
    assert sorted(found["told"]["rejected"]) == [
        ["queued", "FORBIDDEN", "ROLE"],
        ["x", "FORBIDDEN", "ROLE"],
    ]
    assert not found["stopped"] and found["removed"] == {"people": False, "uploads": False}
    assert found["device"] == {"x": {"givenName": "Ann"}, "y": {"givenName": "Bob"}}
    assert found["uploads"] == 1


def test_an_unreachable_server_lets_go_of_nothing(report: dict[str, Any]) -> None:
    found = report["unreachableKeepsAll"]
    during = found["during"]
    assert found["tried"] > 0 and found["told"] == {"rejected": [], "lost": []}, found
    assert not during["stopped"] and during["removed"] == {"people": False, "uploads": False}
    assert during["uploads"] == 1 and "queued" in during["device"]
    # Back online, the queued edits go.
    assert found["server"] == {
        "x": {"givenName": "Ann", "familyName": "edited offline"},
        "y": {"givenName": "Bob"},
        "queued": {"givenName": "created offline"},
    }
