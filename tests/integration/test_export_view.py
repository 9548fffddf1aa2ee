"""A finished export is linked no more once a record it may hold has left its
caller's view (contract 3.9, 3.12): shared with the caller and unshared, a
tenant-wide record made private to another, a group's record taken out of the
caller's group; and it is still linked after changes that leave its caller's view
as it was. Through the API of a real server on DynamoDB Local and the S3 engine."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx2
import pytest

from api.domain.errors import NotFound
from api.domain.membership import OWNER
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility
from api.service import SyncService, export_view
from api.settings import Settings
from api.storage.exports import ExportTable
from tests.integration.test_export import _service as _export_service
from tests.integration.test_group_paths import DAVE, OLGA, ZED, kids
from tests.integration.test_group_paths import KIDS as ZEDS_KIDS
from tests.integration.test_visibility_leaks import (
    ALICE,
    BOB,
    EXPORT,
    _call,
    _code,
    _edit,
    _exported,
    _share,
    _write,
    service,
)
from tests.support.family import MEMBER as MEMBER_TYPE
from tests.support.gql import GraphQLClient

__all__ = ["kids", "service"]  # the fixtures

_PRIVATE = Visibility.of(ALICE, [])


def _again(gql: GraphQLClient, sub: str, tenant: str, export_id: str) -> dict[str, Any]:
    """The answer to `sub`'s next call with `export_id`; a link it gives must not hold
    a line the test names (checked by the caller)."""
    return dict(_call(gql, sub, tenant, EXPORT, e=export_id))


def _linked(body: dict[str, Any]) -> bytes:
    answer = (body.get("data") or {}).get("exportTenant")
    if answer is None or answer["downloadURL"] is None:
        return b""
    return gzip.decompress(httpx2.get(answer["downloadURL"]).content)


def _ids(lines: list[dict[str, Any]]) -> set[str]:
    return {line["entity"]["id"] for line in lines if "entity" in line}


def test_a_finished_export_is_not_linked_once_a_record_shared_with_its_caller_is_unshared(
    gql: GraphQLClient, service: SyncService, tenant: str, unhurried_exports: None
) -> None:
    """Alice shares her letter with Bob, Bob exports (the file holds it), Alice
    unshares it: Bob's next call with that exportID is NOT_FOUND, no link to the
    letter; his new export is his view now."""
    letter = _write(service, tenant, ALICE, {"givenName": "letter"}, Visibility.of(ALICE, [BOB]))
    payload, lines = _exported(gql, BOB, tenant)
    assert letter.id in _ids(lines)
    _share(service, ALICE, letter, Visibility.of(ALICE, []))
    body = _again(gql, BOB, tenant, payload["exportID"])
    assert b"letter" not in _linked(body), "a record out of Bob's view, linked"
    assert _code(body) == "NOT_FOUND"
    assert "letter" not in json.dumps(body) and letter.id not in json.dumps(body)
    _, lines = _exported(gql, BOB, tenant)
    assert letter.id not in _ids(lines)


def test_a_finished_export_is_not_linked_once_a_tenant_wide_record_is_made_private(
    gql: GraphQLClient, service: SyncService, tenant: str, unhurried_exports: None
) -> None:
    """A tenant-wide record in Bob's export, then made private to Alice (its sentinel
    is in the main log, not Bob's stream): Bob's link is refused."""
    notes = _write(service, tenant, ALICE, {"givenName": "notes"})
    payload, lines = _exported(gql, BOB, tenant)
    assert notes.id in _ids(lines)
    _share(service, ALICE, notes, Visibility.of(ALICE, []))
    body = _again(gql, BOB, tenant, payload["exportID"])
    assert b"notes" not in _linked(body), "a record out of Bob's view, linked"
    assert _code(body) == "NOT_FOUND"


def test_a_finished_export_is_not_linked_once_a_groups_record_leaves_the_group(
    gql: GraphQLClient, service: SyncService, kids: str, unhurried_exports: None
) -> None:
    """olga exports while in kids (zed's kids record in the file), then zed makes it
    private: olga is still in kids, and her link is refused."""
    record = _write(service, kids, ZED, {"givenName": "kids-only"}, ZEDS_KIDS)
    payload, lines = _exported(gql, OLGA, kids)
    assert record.id in _ids(lines)
    _share(service, ZED, record, Visibility.of(ZED, []))
    body = _again(gql, OLGA, kids, payload["exportID"])
    assert b"kids-only" not in _linked(body), "a record out of olga's view, linked"
    assert _code(body) == "NOT_FOUND"


def test_an_export_in_progress_is_not_continued_once_a_record_it_holds_is_unshared(
    gql: GraphQLClient, service: SyncService, tenant: str, unhurried_exports: None
) -> None:
    """Bob's export has read the letter (its first call), Alice unshares it: his next
    call is NOT_FOUND, not a file holding the letter's lines."""
    letter = _write(service, tenant, ALICE, {"givenName": "letter"}, Visibility.of(ALICE, [BOB]))
    started = _call(gql, BOB, tenant, EXPORT, e=None)
    assert "errors" not in started, started
    _share(service, ALICE, letter, Visibility.of(ALICE, []))
    body = _again(gql, BOB, tenant, started["data"]["exportTenant"]["exportID"])
    assert b"letter" not in _linked(body)
    assert _code(body) == "NOT_FOUND"


def test_a_finished_export_is_still_linked_after_changes_that_leave_its_callers_view(
    gql: GraphQLClient, service: SyncService, tenant: str, unhurried_exports: None
) -> None:
    """After Bob's export: Alice edits the letter she shares with him, shares it with
    a third member too, writes and unshares records Bob never saw (a private one, one
    shared with carol only), deletes nothing of his: Bob's link is still given, and
    holds what it held. And a record shared with Bob that left his view before the
    export began does not refuse it."""
    gone = _write(service, tenant, ALICE, {"givenName": "gone"}, Visibility.of(ALICE, [BOB]))
    _share(service, ALICE, gone, Visibility.of(ALICE, []))
    letter = _write(service, tenant, ALICE, {"givenName": "letter"}, Visibility.of(ALICE, [BOB]))
    payload, lines = _exported(gql, BOB, tenant)
    assert letter.id in _ids(lines) and gone.id not in _ids(lines)
    letter = _edit(service, ALICE, letter, {"givenName": "letter2"})
    letter = _share(service, ALICE, letter, Visibility.of(ALICE, [BOB, "carol"]))
    secret = _write(service, tenant, ALICE, {"givenName": "s"}, Visibility.of(ALICE, []))
    _share(service, ALICE, secret, Visibility.of(ALICE, ["carol"]))
    carols = _write(service, tenant, ALICE, {"givenName": "c"}, Visibility.of(ALICE, ["carol"]))
    _share(service, ALICE, carols, Visibility.of(ALICE, []))
    _write(service, tenant, BOB, {"givenName": "wide"})
    body = _again(gql, BOB, tenant, payload["exportID"])
    assert "errors" not in body, body
    assert _linked(body) == _linked({"data": {"exportTenant": payload}})


def test_a_finished_export_is_not_linked_to_its_caller_once_demoted_then_removed(
    gql: GraphQLClient, service: SyncService, kids: str, unhurried_exports: None
) -> None:
    """olga exports; dave (an owner) makes her a writer: her call with the exportID is
    FORBIDDEN (ROLE); then removes her: FORBIDDEN (NOT_A_MEMBER); no link either time."""
    payload, _ = _exported(gql, OLGA, kids)
    base = service.membership.access(kids, OLGA).viewer(OLGA).token
    demote = Mutation("update", MEMBER_TYPE, kids, OLGA, base, {"role": "WRITER"})
    member = service.apply(demote, DAVE, OWNER, moved=True).record
    _refused(gql, kids, payload["exportID"], "ROLE")
    remove = Mutation("delete", MEMBER_TYPE, kids, OLGA, member.change_token, {})
    service.apply(remove, DAVE, OWNER, moved=True)
    _refused(gql, kids, payload["exportID"], "NOT_A_MEMBER")


def _refused(gql: GraphQLClient, tenant: str, export_id: str, reason: str) -> None:
    body = _again(gql, OLGA, tenant, export_id)
    assert _linked(body) == b"", body
    assert _code(body) == "FORBIDDEN"
    assert body["errors"][0]["extensions"]["reason"] == reason


class _Counting(ExportTable):
    """The export table, counting the LeftView check's read units and pages."""

    def __init__(self) -> None:
        self.checks: list[tuple[bool, float]] = []

    def left_view(
        self, tenant_id: str, principals: Any, after: str, max_read_units: float
    ) -> tuple[set[str], bool, str | None]:
        with self.metered() as meter:
            found, complete, proven = super().left_view(
                tenant_id, principals, after, max_read_units
            )
        self.checks.append((complete, meter.read_units))
        return found, complete, proven


def test_the_left_view_check_reads_within_its_units_and_refuses_past_them(
    settings: Settings,
    service: SyncService,
    tenant: str,
    unhurried_exports: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bob's export, then 60 tenant-wide records written (main log entries the check
    reads and its filter leaves): his next call is linked, its check within
    CHECK_READ_UNITS; with the check's units cut to 3, the same call is refused (what
    left his view cannot be told within them), never linked unchecked. Alice's private
    note makes the tenant one with restricted records (else no sentinel to look for)."""
    _write(service, tenant, ALICE, {"givenName": "first"})
    _write(service, tenant, ALICE, {"givenName": "note"}, _PRIVATE)
    table = _Counting()
    exports = _export_service(settings, table=table).exports
    job = exports.export_tenant(tenant, None, BOB)
    while not job.done:
        job = exports.export_tenant(tenant, job.export_id, BOB)
    for n in range(60):
        _write(service, tenant, ALICE, {"givenName": f"later {n}"})
    table.checks.clear()
    assert exports.export_tenant(tenant, job.export_id, BOB).done
    ((complete, units),) = table.checks
    assert complete and units <= export_view.CHECK_READ_UNITS
    monkeypatch.setattr(export_view, "CHECK_READ_UNITS", 3.0)
    with pytest.raises(NotFound):
        exports.export_tenant(tenant, job.export_id, BOB)
    assert table.checks[-1][0] is False and table.checks[-1][1] <= 3 + 1


def test_each_call_of_an_export_checks_only_what_was_written_since_the_last(
    settings: Settings, service: SyncService, tenant: str, unhurried_exports: None
) -> None:
    """Bob's export, a step a call, its tenant written 60 times after its first step:
    the next call's check reads them, and the call after it (nothing written since)
    reads only the head's transaction: a busy tenant's export is not refused for the
    changes of all its calls together."""
    _write(service, tenant, ALICE, {"givenName": "note"}, _PRIVATE)
    for n in range(3):
        _write(service, tenant, ALICE, {"givenName": f"p{n}"})
    table = _Counting()
    exports = _export_service(settings, table=table).exports
    job = exports.export_tenant(tenant, None, BOB, steps=1)
    for n in range(60):
        long = {k: f"{n} " + k[:5] * 35 for k in ("givenName", "familyName", "occupation")}
        _write(service, tenant, ALICE, long)
    job = exports.export_tenant(tenant, job.export_id, BOB, steps=1)
    job = exports.export_tenant(tenant, job.export_id, BOB, steps=1)
    (_, first), (_, second) = table.checks
    assert job.checked is not None and first >= 10 and second <= 3, table.checks


def test_a_tenant_that_never_restricted_a_record_reads_only_its_head(
    settings: Settings, service: SyncService, tenant: str, unhurried_exports: None
) -> None:
    """A tenant-wide tenant (its head without `vis`) holds no sentinel: Bob's export's
    calls after 60 writes read the head (1 unit), not the log the writes filled."""
    _write(service, tenant, ALICE, {"givenName": "first"})
    table = _Counting()
    exports = _export_service(settings, table=table).exports
    job = exports.export_tenant(tenant, None, BOB)
    while not job.done:
        job = exports.export_tenant(tenant, job.export_id, BOB)
    for n in range(60):
        _write(service, tenant, ALICE, {"givenName": f"later {n}"})
    table.checks.clear()
    assert exports.export_tenant(tenant, job.export_id, BOB).done
    assert table.checks == [(True, 1.0)], table.checks
