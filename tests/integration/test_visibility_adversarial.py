"""An adversarial read of who sees what (contract 3.12): bob, a member who must not
see alice's private records, and a member removed from the tenant, try to read,
infer or keep what they may not through the GraphQL API on DynamoDB Local and the
local S3. A test that fails names a leak (its assertion says what would close it);
one that passes guards a probe that found nothing."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx2
import pytest

from api.domain.cursor import CursorCodec
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility
from api.service import SyncService
from api.settings import Settings
from api.storage.store import DynamoStore
from tests.integration.test_visibility_sync import Device, Member, _view
from tests.support.blobs import REQUEST_UPLOAD, reference, sha256_of
from tests.support.family import PERSON
from tests.support.gql import GraphQLClient

_HISTORY = (
    "query($t: ID!, $id: ID!, $l: Int, $c: String) {"
    " history(tenantID: $t, id: $id, limit: $l, cursor: $c) {"
    " items { changeToken ... on Person { givenName } } cursor } }"
)
_UPDATE = (
    "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) {"
    " person { id changeToken givenName } } }"
)
_DELETE = "mutation($i: DeletePersonInput!) { deletePerson(input: $i) { deletedItem { id } } }"
_SHARE = "mutation($i: SetVisibilityInput!) { setVisibility(input: $i) { item { id } } }"
_RESTORE = (
    "mutation($i: RestoreVersionInput!) { restoreVersion(input: $i) { item { id changeToken } } }"
)
_CREATE = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) {"
    " person { id changeToken givenName } } }"
)
_PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results {"
    " status replayed error { code message reason }"
    " item { __typename id changeToken ... on Person { givenName visibility { owner } } } } } }"
)
_ATTACHMENT = (
    "query($t: ID!, $sha: String!, $id: ID) {"
    " attachment(tenantID: $t, sha256: $sha, id: $id) { url } }"
)


def _service() -> SyncService:
    return SyncService(DynamoStore(), CursorCodec("x"))


def _errors(body: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A response's errors as what a caller can compare: code, reason, message."""
    return [
        (
            e.get("extensions", {}).get("code"),
            e.get("extensions", {}).get("reason"),
            e["message"],
            sorted(e.get("extensions", {})),
        )
        for e in body.get("errors") or []
    ]


def _update(alice: Member, id: str, token: str, name: str) -> str:
    i = {"tenantID": alice.tenant, "id": id, "changeToken": token, "changes": {"givenName": name}}
    return str(alice.data(_UPDATE, {"i": i})["updatePerson"]["person"]["changeToken"])


def _shape(body: object, id: str) -> str:
    """A response as a caller compares two of them: its id made anonymous."""
    return str(body).replace(id, "<id>")


# --- Findings: each fails on main now ---------------------------------------------


def test_history_does_not_tell_a_private_record_from_no_record(
    gql: GraphQLClient, tenant: str
) -> None:
    """An existence oracle without writing anything: `history` of an id no record has
    is an empty list, of alice's private record NOT_FOUND. Passes when both answer
    alike (e.g. NOT_FOUND for an id with no versions, or an empty list for both)."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    alice.create("secret1", [])
    hidden = bob.call(_HISTORY, {"t": tenant, "id": "secret1"})
    absent = bob.call(_HISTORY, {"t": tenant, "id": "nothing1"})
    assert _shape(hidden, "secret1") == _shape(absent, "nothing1")


def test_history_pages_do_not_count_the_versions_the_caller_never_saw(
    gql: GraphQLClient, tenant: str
) -> None:
    """Alice edits her private record 3 times, then shares it with bob. None of its
    earlier versions included bob, yet `history(limit: 1)` hands him a cursor per
    hidden version: he counts alice's private edits (empty pages, non-null cursors).
    Passes when a page whose versions are all hidden goes on reading (or ends)."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    token = alice.create("p1", [])
    for name in ("s1", "s2", "s3"):
        token = _update(alice, "p1", token, name)
    alice.share("p1", token, ["bob"])
    pages: list[list[Any]] = []
    cursor = None
    while True:
        page = bob.data(_HISTORY, {"t": tenant, "id": "p1", "l": 1, "c": cursor})["history"]
        pages.append(page["items"])
        cursor = page["cursor"]
        if cursor is None or len(pages) > 10:
            break
    assert pages == [[]], f"bob followed {len(pages)} pages of hidden versions: {pages}"


def test_catch_up_pages_do_not_count_records_outside_the_view(tenant: str) -> None:
    """catchUp filters a page after reading it, so bob following `limit: 1` pages
    over alice's private records gets one empty page with a cursor per record: their
    number. Passes when a page of hidden records goes on reading (or the caller's
    catch-up reads only its view)."""
    service = _service()
    private = Visibility("", ())
    for i in range(3):
        (done,) = service.push(
            tenant,
            [
                Mutation(
                    "create",
                    PERSON,
                    tenant,
                    f"a{i}",
                    None,
                    {"givenName": "A"},
                    visibility=private,
                    sets_visibility=True,
                )
            ],
            by="alice",
            role="writer",
        )
        assert done.record is not None, done.error
    up_to = service.changes(tenant, sub="bob").change_token
    assert up_to is not None
    pages: list[list[Any]] = []
    cursor = None
    while True:
        page = service.catch_up(tenant, up_to, types=[PERSON], cursor=cursor, limit=1, by="bob")
        pages.append(page.items)
        cursor = page.cursor
        if cursor is None or len(pages) > 10:
            break
    assert all(p == [] for p in pages)
    assert len(pages) == 1, f"bob followed {len(pages)} empty pages: one per private record"


def test_a_client_mutation_id_replays_nothing_outside_the_view(
    gql: GraphQLClient, tenant: str
) -> None:
    """Outcomes are kept per tenant and clientMutationID, and a replay is answered
    before the view is checked: bob resending alice's push entry (same id and body)
    gets APPLIED with alice's private record (its token, owner, times); a different
    body under her id tells him the id was used. Passes when a replay's record
    outside the caller's view answers NOT_FOUND (or outcomes are kept per caller)."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    entry = {
        "createPerson": {
            "tenantID": tenant,
            "id": "p1",
            "person": {"givenName": "Secret"},
            "visibility": {"sharedWith": []},
            "clientMutationID": "cmid-alice-1",
        }
    }
    push = {"i": {"tenantID": tenant, "mutations": [entry]}}
    (mine,) = alice.data(_PUSH, push)["pushChanges"]["results"]
    assert mine["status"] == "APPLIED"
    (theirs,) = bob.data(_PUSH, push)["pushChanges"]["results"]
    assert theirs["item"] is None, f"bob got alice's private record by replay: {theirs}"
    assert theirs["status"] == "REJECTED" and theirs["error"]["code"] == "NOT_FOUND", theirs


def test_a_resend_after_the_record_left_the_view_is_not_applied(
    gql: GraphQLClient, tenant: str
) -> None:
    """Bob's outbox resends his update of a record alice has unshared since (the
    first send's answer was lost). The contract: a write whose record left the
    caller's view while it was on its way is NOT_FOUND. The replay answers APPLIED
    with the record, visibility and all. Passes when the replay checks the view."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    token = alice.create("p1", ["bob"])
    entry = {
        "updatePerson": {
            "tenantID": tenant,
            "id": "p1",
            "changeToken": token,
            "changes": {"givenName": "by bob"},
            "clientMutationID": "cmid-bob-1",
        }
    }
    push = {"i": {"tenantID": tenant, "mutations": [entry]}}
    (first,) = bob.data(_PUSH, push)["pushChanges"]["results"]
    assert first["status"] == "APPLIED"
    alice.share("p1", first["item"]["changeToken"], [])
    (again,) = bob.data(_PUSH, push)["pushChanges"]["results"]
    assert again["item"] is None and again["status"] == "REJECTED", again


def test_a_refused_replay_leaves_the_first_outcome_to_whoever_sees_its_record(
    gql: GraphQLClient, tenant: str
) -> None:
    """Bob's resends refused above store nothing: alice's resend of her entry is
    still her first outcome, and bob's resend of his edit is his once the record is
    shared with him again."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    entry = {
        "createPerson": {
            "tenantID": tenant,
            "id": "p1",
            "person": {"givenName": "Secret"},
            "visibility": {"sharedWith": ["bob"]},
            "clientMutationID": "cmid-alice-2",
        }
    }
    push = {"i": {"tenantID": tenant, "mutations": [entry]}}
    (made,) = alice.data(_PUSH, push)["pushChanges"]["results"]
    edit = {
        "updatePerson": {
            "tenantID": tenant,
            "id": "p1",
            "changeToken": made["item"]["changeToken"],
            "changes": {"givenName": "by bob"},
            "clientMutationID": "cmid-bob-2",
        }
    }
    bobs = {"i": {"tenantID": tenant, "mutations": [edit]}}
    (edited,) = bob.data(_PUSH, bobs)["pushChanges"]["results"]
    unshared = alice.share("p1", edited["item"]["changeToken"], [])
    for member, sent in ((bob, push), (bob, bobs)):
        (refused,) = member.data(_PUSH, sent)["pushChanges"]["results"]
        assert (refused["status"], refused["error"]["code"]) == ("REJECTED", "NOT_FOUND")
        assert refused["item"] is None and refused["replayed"] is False, refused
    (again,) = alice.data(_PUSH, push)["pushChanges"]["results"]
    assert (again["status"], again["replayed"]) == ("APPLIED", True), again
    assert again["item"]["changeToken"] == made["item"]["changeToken"]
    alice.share("p1", unshared, ["bob"])
    (mine,) = bob.data(_PUSH, bobs)["pushChanges"]["results"]
    assert (mine["status"], mine["replayed"]) == ("APPLIED", True), mine
    assert mine["item"]["changeToken"] == edited["item"]["changeToken"]


def _upload_as(member: Member, data: bytes) -> dict[str, Any]:
    ref = reference(data)
    answer = member.data(
        REQUEST_UPLOAD,
        {"t": member.tenant, "sha": ref["sha256"], "size": ref["size"], "type": "image/jpeg"},
    )["requestUpload"]
    assert answer["alreadyPresent"] is False  # never told in a restricted tenant
    put = answer["upload"]
    headers = {h["name"]: h["value"] for h in put["headers"]}
    assert httpx2.put(put["url"], content=data, headers=headers).status_code == 200
    return ref


def test_a_reference_does_not_probe_or_fetch_another_members_private_blob(
    gql: GraphQLClient, tenant: str
) -> None:
    """The content-address side channel through the write path: requestUpload no
    longer says `alreadyPresent`, but a write referencing a sha256 is checked
    against the tenant's blobs, whoever uploaded them. Bob, knowing the hash of
    alice's private photo, creates his own record referencing it: ATTACHMENT_MISSING
    when the tenant lacks it, APPLIED when alice has it (the oracle); then his own
    record gives him a download link to alice's bytes. Passes when a reference
    succeeds only for a blob the writer uploaded or sees through a record in its
    view (else ATTACHMENT_MISSING, as for absent bytes)."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    alice.create("p0", [])  # the tenant has a restricted record
    photo = b"alice's private photo " + tenant.encode() * 64
    ref = _upload_as(alice, photo)
    made = alice.data(
        _CREATE,
        {
            "i": {
                "tenantID": tenant,
                "id": "p1",
                "person": {"givenName": "A", "photo": ref},
                "visibility": {"sharedWith": []},
            }
        },
    )
    assert made["createPerson"]["person"]["id"] == "p1"
    never = reference(b"bytes no one uploaded " + tenant.encode())

    def bob_refers(id: str, to: dict[str, Any]) -> dict[str, Any]:
        return bob.call(
            _CREATE,
            {"i": {"tenantID": tenant, "id": id, "person": {"givenName": "B", "photo": to}}},
        )

    absent = bob_refers("b1", never)
    assert _errors(absent)[0][0] == "ATTACHMENT_MISSING", absent
    probe = bob_refers("b2", ref)
    link = bob.call(_ATTACHMENT, {"t": tenant, "sha": ref["sha256"], "id": "b2"})
    url = ((link.get("data") or {}).get("attachment") or {}).get("url")
    fetched = None if url is None else httpx2.get(url).content
    assert (_shape(_errors(probe), ref["sha256"]), fetched == photo) == (
        _shape(_errors(absent), never["sha256"]),
        False,
    ), f"bob learns alice's private blob exists ({probe}) and downloads it: {fetched == photo}"


def test_a_member_references_bytes_it_uploaded_itself(gql: GraphQLClient, tenant: str) -> None:
    """The other side of the test above: bob, who holds the same bytes as alice's
    private photo, uploads them himself (requestUpload names him in the upload's
    signed metadata) and may then reference them, and download them through his
    own record; until then his reference is ATTACHMENT_MISSING, as for absent
    bytes, and uploading again is the documented recovery (contract 3.10)."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    alice.create("p0", [])
    photo = b"the same photo twice " + tenant.encode() * 64
    ref = _upload_as(alice, photo)
    person = {"givenName": "A", "photo": ref}
    alice.data(
        _CREATE,
        {"i": {"tenantID": tenant, "id": "p1", "person": person, "visibility": {"sharedWith": []}}},
    )
    create = {"i": {"tenantID": tenant, "id": "b1", "person": {"givenName": "B", "photo": ref}}}
    assert _errors(bob.call(_CREATE, create))[0][0] == "ATTACHMENT_MISSING"
    assert _upload_as(bob, photo) == ref
    assert bob.data(_CREATE, create)["createPerson"]["person"]["id"] == "b1"
    url = bob.data(_ATTACHMENT, {"t": tenant, "sha": ref["sha256"], "id": "b1"})["attachment"]
    assert httpx2.get(url["url"]).content == photo


# --- Probes that found nothing: they guard the future ------------------------------

_EXPORT = (
    "mutation($t: ID!, $e: ID) { exportTenant(tenantID: $t, exportID: $e) "
    "{ exportID done entities versions bytes downloadURL } }"
)


def test_an_owners_export_holds_nothing_of_another_members_private_versions(
    gql: GraphQLClient, tenant: str
) -> None:
    """Carol, a tenant OWNER, exports: alice's record that was private before it
    was made tenant-wide is in it as now, but none of its private versions; alice's
    private record deleted since, and her live private one, not at all."""
    alice = Member(gql, tenant, "alice")
    carol = Member(gql, tenant, "carol", role="owner")
    token = alice.create("p1", [])
    token = _update(alice, "p1", token, "Secret1")
    token = _update(alice, "p1", token, "Public")
    alice.share("p1", token, None)
    gone = alice.create("p2", [])
    _update(alice, "p2", gone, "Secret2")
    gone = alice.data(
        'query($t: ID!) { person(tenantID: $t, id: "p2") { changeToken } }', {"t": tenant}
    )["person"]["changeToken"]
    alice.data(_DELETE, {"i": {"tenantID": tenant, "id": "p2", "changeToken": gone}})
    live = alice.create("p3", [])
    _update(alice, "p3", live, "Secret3")
    payload = carol.data(_EXPORT, {"t": tenant, "e": None})["exportTenant"]
    while not payload["done"]:
        payload = carol.data(_EXPORT, {"t": tenant, "e": payload["exportID"]})["exportTenant"]
    body = gzip.decompress(httpx2.get(payload["downloadURL"]).content).decode()
    lines = [json.loads(line) for line in body.splitlines()]
    ids = {(k, v["id"]) for line in lines for k, v in line.items() if k in ("entity", "version")}
    assert ids == {("entity", "p1")}, lines
    assert "Secret" not in body


def test_every_write_on_a_private_id_answers_as_on_an_absent_id(
    gql: GraphQLClient, tenant: str
) -> None:
    """Bob's update, delete, setVisibility, restoreVersion, and push entries
    (update, delete, setVisibility, put with assumed fields or deleted) on alice's
    private id answer exactly as on an id no record has, with alice's own token
    and fields: nothing tells them apart, and nothing is written."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    first = alice.create("s1", [])
    token = _update(alice, "s1", first, "Secret")

    def probes(id: str) -> list[tuple[str, dict[str, Any]]]:
        guarded = {"tenantID": tenant, "id": id, "changeToken": token}
        state = {"person": {"givenName": "Secret"}}
        entries: list[dict[str, Any]] = [
            {"updatePerson": {**guarded, "changes": {"givenName": "x"}}},
            {"deletePerson": guarded},
            {"setVisibility": {**guarded, "visibility": None}},
            {"setVisibility": {**guarded, "visibility": {"sharedWith": ["bob"]}}},
            {"putPerson": {"tenantID": tenant, "id": id, "assumed": state, "state": state}},
            {
                "putPerson": {
                    "tenantID": tenant,
                    "id": id,
                    "assumed": {"deleted": True},
                    "state": state,
                }
            },
            {
                "putPerson": {
                    "tenantID": tenant,
                    "id": id,
                    "assumed": state,
                    "state": {"deleted": True},
                    "mergeFields": True,
                }
            },
        ]
        return [
            (_UPDATE, {"i": {**guarded, "changes": {"givenName": "x"}}}),
            (_DELETE, {"i": guarded}),
            (_SHARE, {"i": {**guarded, "visibility": None}}),
            (_RESTORE, {"i": {**guarded, "version": first}}),
            (_PUSH, {"i": {"tenantID": tenant, "mutations": entries}}),
            (_PUSH, {"i": {"tenantID": tenant, "mutations": entries, "since": token}}),
        ]

    for (query, hidden), (_, absent) in zip(probes("s1"), probes("n1"), strict=True):
        got, expected = bob.call(query, hidden), bob.call(query, absent)
        assert _shape(got, "s1") == _shape(expected, "n1")
        assert "Secret" not in str(got) and "alice" not in str(got)
    assert alice.data(
        'query($t: ID!) { person(tenantID: $t, id: "s1") { changeToken givenName } }',
        {"t": tenant},
    )["person"] == {"changeToken": token, "givenName": "Secret"}


def test_a_write_from_a_token_minted_while_shared_gets_no_current(
    gql: GraphQLClient, tenant: str
) -> None:
    """Bob holds alice's record from when it was shared with him; she unshares it and
    edits it. His queued update, delete and put on his old copy are NOT_FOUND with
    no current version (not a CONFLICT carrying her new one), nothing written."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    held = alice.create("p1", ["bob"])
    token = alice.share("p1", held, [])
    token = _update(alice, "p1", token, "After")
    guarded = {"tenantID": tenant, "id": "p1", "changeToken": held}
    state = {"person": {"givenName": "p1"}}
    for query, variables in (
        (_UPDATE, {"i": {**guarded, "changes": {"givenName": "x"}}}),
        (_DELETE, {"i": guarded}),
        (_SHARE, {"i": {**guarded, "visibility": None}}),
    ):
        body = bob.call(query, variables)
        (error,) = body["errors"]
        assert error["extensions"] == {"code": "NOT_FOUND"}, body
    entries = [
        {"updatePerson": {**guarded, "changes": {"givenName": "x"}}},
        {"putPerson": {"tenantID": tenant, "id": "p1", "assumed": state, "state": state}},
        {
            "putPerson": {
                "tenantID": tenant,
                "id": "p1",
                "assumed": state,
                "state": {"person": {"familyName": "y"}},
                "mergeFields": True,
            }
        },
    ]
    results = bob.data(_PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    for result in results["pushChanges"]["results"]:
        assert result["item"] is None and result["error"]["code"] == "NOT_FOUND", result
    assert "After" not in str(results)
    assert alice.data(
        'query($t: ID!) { person(tenantID: $t, id: "p1") { changeToken } }', {"t": tenant}
    )["person"] == {"changeToken": token}


def test_an_attachment_through_a_record_outside_the_view_is_as_absent(
    gql: GraphQLClient, tenant: str
) -> None:
    """Bob asks for alice's private photo through her record's id: the same
    NOT_FOUND as through an id no record has; without an id, BAD_USER_INPUT."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    alice.create("p0", [])
    photo = b"alice's photo " + tenant.encode() * 64
    ref = _upload_as(alice, photo)
    person = {"givenName": "A", "photo": ref}
    alice.data(
        _CREATE,
        {"i": {"tenantID": tenant, "id": "p1", "person": person, "visibility": {"sharedWith": []}}},
    )
    sha = ref["sha256"]
    hidden = bob.call(_ATTACHMENT, {"t": tenant, "sha": sha, "id": "p1"})
    absent = bob.call(_ATTACHMENT, {"t": tenant, "sha": sha, "id": "n1"})
    assert _errors(hidden) == _errors(absent) and _errors(hidden)[0][0] == "NOT_FOUND"
    unnamed = bob.call(_ATTACHMENT, {"t": tenant, "sha": sha, "id": None})
    assert _errors(unnamed)[0][0] == "BAD_USER_INPUT", unnamed
    # alice's own link works: the probe above found the blob there.
    assert alice.data(_ATTACHMENT, {"t": tenant, "sha": sha, "id": "p1"})["attachment"]["url"]


def test_a_download_link_outlives_the_view_only_within_its_lifetime(
    gql: GraphQLClient, tenant: str
) -> None:
    """Bob asks for the photo of a record alice shares with him, then she unshares
    it. A presigned GET cannot be revoked (S3 checks only its signature and
    expiry), so his link still downloads her bytes until it expires: the documented
    bound (contract 3.10 and 3.12) is the link's lifetime, 15 minutes from its
    signing, which `urlExpiresAt` states; a new link is refused at once."""
    from datetime import UTC, datetime, timedelta
    from urllib.parse import parse_qs, urlsplit

    from api.domain.attachments import DOWNLOAD_LINK_S

    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    alice.create("p0", [])
    photo = b"shared for a moment " + tenant.encode() * 64
    ref = _upload_as(alice, photo)
    made = alice.data(
        _CREATE,
        {
            "i": {
                "tenantID": tenant,
                "id": "p1",
                "person": {"givenName": "A", "photo": ref},
                "visibility": {"sharedWith": ["bob"]},
            }
        },
    )["createPerson"]["person"]
    asked = _ATTACHMENT.replace("{ url }", "{ url urlExpiresAt }")
    link = bob.data(asked, {"t": tenant, "sha": ref["sha256"], "id": "p1"})["attachment"]
    url = link["url"]
    assert httpx2.get(url).content == photo
    alice.share("p1", made["changeToken"], [])
    again = bob.call(_ATTACHMENT, {"t": tenant, "sha": ref["sha256"], "id": "p1"})
    assert _errors(again)[0][0] == "NOT_FOUND"  # a new link: refused
    # The link made before: usable until it expires, and not a moment longer than
    # its signature allows (S3 refuses it after X-Amz-Date + X-Amz-Expires).
    signed = parse_qs(urlsplit(url).query)
    lifetime = int(signed["X-Amz-Expires"][0])
    signed_at = datetime.strptime(signed["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    expires_at = datetime.fromisoformat(link["urlExpiresAt"].replace("Z", "+00:00"))
    assert lifetime == DOWNLOAD_LINK_S == 15 * 60
    # urlExpiresAt, taken before signing, never promises more than the signature
    # (X-Amz-Date is truncated to the second).
    assert expires_at <= signed_at + timedelta(seconds=lifetime + 1)


_WORDS = "query($t: ID!, $c: String, $l: Int, $s: ID) { changes(tenantID: $t, since: $s,"
_PAGE = (
    f"{_WORDS} cursor: $c, limit: $l) {{ items {{ __typename id changeToken }}"
    " cursor changeToken } }"
)


def test_a_cursor_minted_before_an_unshare_ends_in_exactly_the_view(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """Bob's device pages through a first sync one item at a time; between its
    pages alice unshares a record he already got, shares one he has not reached,
    makes a tenant-wide one private and a private one tenant-wide. Following the
    cursors and then `changes` to the end, the device holds exactly bob's view, and
    no page after the unshare carries the unshared record's fields."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    tokens = {
        "a": alice.create("a", ["bob"]),
        "b": alice.create("b", None),
        "c": alice.create("c", []),
        "d": alice.create("d", []),
        "e": alice.create("e", None),
    }
    held: dict[str, str] = {}
    since, cursor, pages = None, None, 0
    while True:
        page = bob.data(_PAGE, {"t": tenant, "c": cursor, "l": 1, "s": since})["changes"]
        for item in page["items"]:
            if item["__typename"] in ("DeletedItem", "LeftViewItem"):
                held.pop(item["id"], None)
            else:
                held[item["id"]] = item["changeToken"]
        pages += 1
        if pages == 1:
            for id, shared in (("a", []), ("c", ["bob"]), ("e", []), ("d", None)):
                tokens[id] = alice.share(id, tokens[id], shared)
        since, cursor = page["changeToken"], page["cursor"]
        if cursor is None:
            break
    device = Device(bob, limit=1)
    device.held, device.token = held, since
    device.sync()
    assert device.held == _view(ddb, settings, tenant, "bob")
    assert set(device.held) == {"b", "c", "d"}


def _settle(device: Device) -> None:
    """Sync until the token stops moving (what a device poked by `changesAvailable`
    does): see the finding below on a first run that ends short of the head."""
    while True:
        before = device.token
        device.sync()
        if device.token == before:
            return


def test_following_changes_to_the_end_in_a_quiet_tenant_reaches_its_head(
    gql: GraphQLClient, tenant: str
) -> None:
    """FINDING (fails on main; no change is missed, but a device stops short): six
    records shared with bob, nothing written since. Bob's first sync in pages of 3
    follows cursors to the end and stops at the fifth record's token, without the
    sixth: the bound is fixed at the first page, whose stream Query (Limit 3) did
    not return the head's `vp` entry, so B is the head's `pv` even though a later
    page's Query reads that entry. The device is then behind a change committed
    long ago until its next poll. Passes when a page whose stream Query returns the
    head's entries lifts the bound to the head's token (or the docs state that a
    run of cursors may end one transaction short of a quiet head)."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    last = ""
    for i in range(6):
        last = alice.create(f"r{i}", ["bob"])
    device = Device(bob, limit=3)
    device.sync()
    assert (len(device.held), device.token) == (6, last)


def _shared_with_20(service: SyncService, tenant: str, id: str, group: list[str]) -> str:
    (result,) = service.push(
        tenant,
        [
            Mutation(
                "create",
                PERSON,
                tenant,
                id,
                None,
                {"givenName": id},
                visibility=Visibility("alice", tuple(group)),
                sets_visibility=True,
            )
        ],
        by="alice",
        role="writer",
    )
    assert result.record is not None, result.error
    return result.record.change_token


def test_records_shared_with_20_moved_between_audiences_by_two_servers(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings, inject: Any
) -> None:
    """The 100-action limit: alice's records each shared with 20 members are moved,
    in one push of many entries, from one audience of 20 to another (41 stream
    entries put, 21 removed, each), by two servers in turn, so each transaction
    follows another server's of the same size and must check its 62 stream
    entries. Every write applies, and each member's device, synced before and
    after, holds exactly its view."""
    first = [f"x{i:02d}" for i in range(20)]
    second = [f"y{i:02d}" for i in range(20)]
    one, two = _service(), _service()
    tokens = {f"r{i}": _shared_with_20(one, tenant, f"r{i}", first) for i in range(6)}
    watchers = {sub: Device(Member(gql, tenant, sub), limit=3) for sub in ("x00", "y19", "z")}
    for device in watchers.values():
        _settle(device)
    assert set(watchers["x00"].held) == set(tokens) and not watchers["y19"].held
    for n, id in enumerate(sorted(tokens)):
        server = one if n % 2 else two
        mutations = [
            Mutation(
                "share",
                PERSON,
                tenant,
                id,
                tokens[id],
                visibility=Visibility("alice", tuple(second if n % 2 == 0 else first[:10])),
                sets_visibility=True,
            )
        ]
        (result,) = server.push(tenant, mutations, by="alice", role="writer")
        assert result.record is not None, result.error
        tokens[id] = result.record.change_token
    for sub, device in watchers.items():
        _settle(device)
        assert device.held == _view(ddb, settings, tenant, sub), sub
    assert set(watchers["y19"].held) == {"r0", "r2", "r4"}
    assert set(watchers["x00"].held) == {"r1", "r3", "r5"}
    # Then one push of many from the other server: every record to the second
    # audience, each entry after one of the same size.
    sizes: list[int] = []
    batches: list[int] = []
    inject(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: sizes.append(len(params["TransactItems"])),
    )
    inject("provide-client-params.dynamodb.BatchGetItem", lambda **_: batches.append(1))
    mutations = [
        Mutation(
            "share",
            PERSON,
            tenant,
            id,
            tokens[id],
            visibility=Visibility("alice", tuple(second)),
            sets_visibility=True,
        )
        for id in sorted(tokens)
    ]
    results = one.push(tenant, mutations, by="alice", role="writer")
    assert [r.error for r in results] == [None] * 6
    assert sizes and max(sizes) <= 100 and batches, (sizes, batches)
    for sub, device in watchers.items():
        _settle(device)
        assert device.held == _view(ddb, settings, tenant, sub), sub
    assert set(watchers["y19"].held) == set(tokens) and not watchers["x00"].held


_SUBSCRIBE = (
    "subscription($t: ID!, $s: ID) { changesAvailable(tenantID: $t, since: $s) "
    "{ tenantID changeToken } }"
)


@pytest.mark.slow
@pytest.mark.serial
def test_a_subscription_is_poked_only_for_changes_in_its_view(
    app_client: Any, gql: GraphQLClient, tenant: str
) -> None:
    """Bob's open subscription: alice's private writes (a creation, an edit, and
    an edit of a record she unshared from him) poke him with nothing; the unshare
    itself pokes him (his device must forget the record); the first event after his
    token is the unshare's, and the next a tenant-wide write's, never a private
    write's token (a poke's timing or token would tell him when alice writes).
    FINDING: fails on main in about half the runs (3 of 6 here), poked for alice's
    private creation or for her edit of the record she unshared: see the next test,
    which shows the cause deterministically."""
    from tests.integration.test_realtime import _connect, _receive

    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    shared = alice.create("s1", ["bob"])
    device = Device(bob)
    device.sync()
    with _connect(app_client) as ws:
        ws.send_json({"type": "connection_init", "payload": {**bob.headers}})
        assert _receive(ws) == {"type": "connection_ack"}
        ws.send_json(
            {
                "id": "b",
                "type": "subscribe",
                "payload": {"query": _SUBSCRIBE, "variables": {"t": tenant, "s": device.token}},
            }
        )
        # A tenant-wide write first: its event says the subscription is live.
        opened = alice.create("t0", None)
        event = _receive(ws)
        assert event["payload"]["data"]["changesAvailable"]["changeToken"] == opened, event
        private = alice.create("p1", [])
        edited = _update(alice, "p1", private, "Secret")
        unshared = alice.share("s1", shared, [])
        event = _receive(ws)
        got = event["payload"]["data"]["changesAvailable"]["changeToken"]
        named = {private: "alice's private creation", edited: "alice's private edit"}
        assert got == unshared, f"bob poked for {named.get(got, got)}"
        hidden = _update(alice, "s1", unshared, "Secret")
        public = alice.create("t1", None)
        event = _receive(ws)
        got = event["payload"]["data"]["changesAvailable"]["changeToken"]
        named = {hidden: "alice's edit of the record she unshared from him"}
        assert got == public, f"bob poked for {named.get(got, got)}"
    device.sync()
    assert set(device.held) == {"t0", "t1"}


def test_the_stream_followers_catch_up_pokes_only_the_heads_audience(
    tenant: str, ddb: Any, settings: Settings
) -> None:
    """Why the test above failed in some runs: when a server's stream follower
    starts (its first subscription), it published the current head of every
    subscribed tenant with audience None (every member), whatever the head's
    transaction wrote. A private write that is the head then poked bob with its
    token. `publish_heads` (and so the follower's catch-up, `_catch_up_once`) gives
    each head the audience its attributes say (`head_pokes`), and UNTOLD to the
    others, whose subscriptions send an event only for a change in their view."""
    from api.domain.audiences import UNTOLD, in_audience
    from api.realtime.streams import publish_heads

    service = _service()
    (done,) = service.push(
        tenant,
        [
            Mutation(
                "create",
                PERSON,
                tenant,
                "p1",
                None,
                {"givenName": "Secret"},
                visibility=Visibility("", ()),
                sets_visibility=True,
            )
        ],
        by="alice",
        role="writer",
    )
    assert done.record is not None, done.error
    published: list[tuple[str, str, Any]] = []
    publish_heads(ddb, settings.table_name, [tenant], lambda *a: published.append(a))
    # Told to the head's audience; UNTOLD to the others, who may have missed earlier
    # pokes the head does not name: each of their subscriptions reads its own view
    # first (docs/realtime.md, "Who is poked"), and bob's has nothing in it.
    assert published == [(tenant, done.record.change_token, frozenset({"m:alice"}) | UNTOLD)]
    assert not in_audience("bob", published[0][2])
    assert service.latest_seen(tenant, None, "bob") is None, "bob is poked for alice's write"
    assert service.latest_seen(tenant, None, "alice") == done.record.change_token


_TYPED = (
    "query($t: ID!, $s: ID, $c: String, $l: Int) { changes(tenantID: $t, since: $s,"
    " cursor: $c, limit: $l, types: [PERSON]) { items { __typename id changeToken"
    " ... on Person { givenName } } cursor changeToken } }"
)


def _typed_sync(
    member: Member, held: dict[str, str], since: str | None, shared: tuple[str, str] = ("", "")
) -> str | None:
    """Follow a typed sync to its end; no item carries a private edit ("Secret"), but
    for the version `shared` (id, token): one written privately, then shared with the
    member, whose content the member sees from then on."""
    cursor = None
    while True:
        page = member.data(_TYPED, {"t": member.tenant, "s": since, "c": cursor, "l": 1})
        page = page["changes"]
        for item in page["items"]:
            assert "Secret" not in str(item) or (item["id"], item["changeToken"]) == shared, item
            if item["__typename"] in ("DeletedItem", "LeftViewItem"):
                held.pop(item["id"], None)
            else:
                held[item["id"]] = item["changeToken"]
        since, cursor = page["changeToken"], page["cursor"]
        if cursor is None:
            return since


def test_a_sync_of_chosen_types_carries_exactly_the_view(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """FINDING (fails on main; a missed change, for good): `changes(types:
    [PERSON])` in pages of one, across shares, unshares and private edits (alice's
    private records named Secret). Record b enters bob's view (alice shares it
    with him), yet his typed sync ends at the head without it: held {} where his
    view is {b} (an untyped sync, or pages of 10, deliver it). Related to the
    next test (pages that lose the caller's stream). Passes when the
    device ends with exactly his view; no page carries a private version."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    tokens = {
        "a": alice.create("a", ["bob"]),
        "b": alice.create("b", []),
        "c": alice.create("c", None),
    }
    tokens["b"] = _update(alice, "b", tokens["b"], "Secret")
    held: dict[str, str] = {}
    since = _typed_sync(bob, held, None)
    assert set(held) == {"a", "c"}
    tokens["a"] = alice.share("a", tokens["a"], [])
    tokens["a"] = _update(alice, "a", tokens["a"], "Secret")
    tokens["c"] = alice.share("c", tokens["c"], [])
    tokens["b"] = alice.share("b", tokens["b"], ["bob"])
    alice.create("d", [])
    # b's content is alice's private edit, shared with bob by its new token.
    _typed_sync(bob, held, since, shared=("b", tokens["b"]))
    view = _view(ddb, settings, tenant, "bob")
    assert held == view and set(held) == {"b"}


def test_a_removed_member_gets_nothing_through_the_other_doors(
    gql: GraphQLClient, tenant: str
) -> None:
    """In a tenant of membership as data, bob is removed. Beyond the doors the
    members tests cover: his requestUpload, setVisibility and restoreVersion on a
    record shared with him, and a resend of his own earlier push entry (its
    clientMutationID) are NOT_A_MEMBER, never the stored record."""
    from tests.integration.test_members import CREATE as CREATE_MEMBER
    from tests.integration.test_members import DELETE as DELETE_MEMBER

    owner = Member(gql, tenant, "alice", role="owner")
    owner.data(
        CREATE_MEMBER, {"i": {"tenantID": tenant, "id": "alice", "member": {"role": "OWNER"}}}
    )
    record = owner.data(
        CREATE_MEMBER, {"i": {"tenantID": tenant, "id": "bob", "member": {"role": "WRITER"}}}
    )["createMember"]["member"]
    bob = Member(gql, tenant, "bob")
    token = owner.create("p1", ["bob"])
    entry = {
        "updatePerson": {
            "tenantID": tenant,
            "id": "p1",
            "changeToken": token,
            "changes": {"givenName": "by bob"},
            "clientMutationID": "cmid-bob-2",
        }
    }
    push = {"i": {"tenantID": tenant, "mutations": [entry]}}
    (first,) = bob.data(_PUSH, push)["pushChanges"]["results"]
    assert first["status"] == "APPLIED"
    token = first["item"]["changeToken"]
    owner.data(
        DELETE_MEMBER,
        {"i": {"tenantID": tenant, "id": "bob", "changeToken": record["changeToken"]}},
    )
    sha = sha256_of(b"x")
    for query, variables in (
        (REQUEST_UPLOAD, {"t": tenant, "sha": sha, "size": 1, "type": "image/jpeg"}),
        (_SHARE, {"i": {"tenantID": tenant, "id": "p1", "changeToken": token, "visibility": None}}),
        (_RESTORE, {"i": {"tenantID": tenant, "id": "p1", "changeToken": token, "version": token}}),
        (_PUSH, push),
        (_ATTACHMENT, {"t": tenant, "sha": sha, "id": "p1"}),
    ):
        body = bob.call(query, variables)
        assert "by bob" not in str(body.get("data")), body
        (error,) = body["errors"]
        assert (error["extensions"]["code"], error["extensions"].get("reason")) == (
            "FORBIDDEN",
            "NOT_A_MEMBER",
        ), body


def test_a_first_sync_past_deletions_holds_every_record_shared_with_the_member(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """FINDING (fails on main; a missed change, for good): a tenant whose main log
    holds deletions (which a first sync leaves out) and records shared with bob.
    Bob's first sync in pages of 1, 2 or 4 ends without some of them, and syncing
    on from its token never brings them: with pages of 2 he holds s0 but never s1
    and s2. One cause: a page the first sync fills past left-out entries ends
    by `Reading._cut`, whose cursor (`_page`) drops the `streams` flag that
    `_streamed` sets, so every later page reads the main log alone. Keeping the
    flag there when the cut page has a cursor (tried, not committed) closed pages
    of 2 and 4 but not pages of 1, nor the typed sync above: with pages of 1 the
    page cut is a sized read that reached the bound (no cursor, so no flag to
    copy), and the cursor of the very first page already says streams=False. The
    flag has to come from whether this sync reads streams, not from the page cut.
    Passes when every page size ends with exactly bob's view."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    for i in range(3):
        gone = alice.create(f"t{i}", None)
        alice.data(_DELETE, {"i": {"tenantID": tenant, "id": f"t{i}", "changeToken": gone}})
        alice.create(f"s{i}", ["bob"])
        alice.create(f"w{i}", None)
    alice.create("z", [])
    view = _view(ddb, settings, tenant, "bob")
    assert set(view) == {"s0", "s1", "s2", "w0", "w1", "w2"}
    missing = {}
    for limit in (1, 2, 3, 4):
        device = Device(bob, limit=limit)
        _settle(device)
        if device.held != view:
            missing[limit] = sorted(set(view) - set(device.held))
    assert missing == {}, f"by page size, the shared records bob never gets: {missing}"


_MEMBER = "query($t: ID!, $id: ID!) { member(tenantID: $t, id: $id) { id role } }"
_PERSON = (
    "query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken givenName"
    " visibility { owner sharedWith } } }"
)


def test_a_member_it_is_shared_with_cannot_widen_or_keep_a_record(
    gql: GraphQLClient, tenant: str
) -> None:
    """Bob, a writer alice shares a record with: a put whose state names a wider
    audience (carol), or the whole tenant, keeps alice's visibility (a put's
    visibility applies only when it creates), and his setVisibility is FORBIDDEN.
    Once she unshares it, his history of it is NOT_FOUND, and restoring a version
    he saw is NOT_FOUND: nothing of it, no version text."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    carol = Member(gql, tenant, "carol")
    token = alice.create("p1", ["bob"])
    seen = token
    fields = {"givenName": "p1"}
    for visibility in ({"sharedWith": ["bob", "carol"]}, None):
        entry = {
            "putPerson": {
                "tenantID": tenant,
                "id": "p1",
                "assumed": {"person": fields},
                "state": {"person": {"givenName": "by bob"}, "visibility": visibility},
            }
        }
        (done,) = bob.data(_PUSH, {"i": {"tenantID": tenant, "mutations": [entry]}})["pushChanges"][
            "results"
        ]
        assert done["status"] == "APPLIED", done
        fields = {"givenName": "by bob"}
        token = done["item"]["changeToken"]
    assert carol.data(_PERSON, {"t": tenant, "id": "p1"}) == {"person": None}
    current = alice.data(_PERSON, {"t": tenant, "id": "p1"})["person"]
    assert current["visibility"] == {"owner": "alice", "sharedWith": ["bob"]}
    body = bob.call(
        _SHARE, {"i": {"tenantID": tenant, "id": "p1", "changeToken": token, "visibility": None}}
    )
    assert body["errors"][0]["extensions"] == {"code": "FORBIDDEN", "reason": "ROLE"}, body
    token = alice.share("p1", token, [])
    _update(alice, "p1", token, "Secret")
    history = bob.call(_HISTORY, {"t": tenant, "id": "p1"})
    assert _errors(history)[0][0] == "NOT_FOUND" and "Secret" not in str(history)
    restored = bob.call(
        _RESTORE, {"i": {"tenantID": tenant, "id": "p1", "changeToken": token, "version": seen}}
    )
    assert _errors(restored)[0][0] == "NOT_FOUND" and "Secret" not in str(restored)


def test_a_member_record_cannot_be_made_private(gql: GraphQLClient, tenant: str) -> None:
    """Membership is the whole tenant's (contract 3.12): a Member record takes no
    visibility, so none can hide from the members it governs. Asked for one, the
    creation is BAD_USER_INPUT and nothing is written; bob's sync holds every member."""
    from tests.integration.test_members import CREATE as CREATE_MEMBER

    owner = Member(gql, tenant, "olga", role="owner")
    owner.data(
        CREATE_MEMBER, {"i": {"tenantID": tenant, "id": "olga", "member": {"role": "OWNER"}}}
    )
    owner.data(
        CREATE_MEMBER, {"i": {"tenantID": tenant, "id": "bob", "member": {"role": "WRITER"}}}
    )
    made = owner.call(
        CREATE_MEMBER,
        {
            "i": {
                "tenantID": tenant,
                "id": "dan",
                "member": {"role": "READER", "displayName": "Secret"},
                "visibility": {"sharedWith": []},
            }
        },
    )
    assert [e["extensions"]["code"] for e in made["errors"]] == ["BAD_USER_INPUT"], made
    bob = Member(gql, tenant, "bob")
    assert bob.data(_MEMBER, {"t": tenant, "id": "dan"}) == {"member": None}
    device = Device(bob)
    device.sync()
    assert "dan" not in device.held and {"olga", "bob"} <= set(device.held)


def test_a_burst_of_pokes_does_not_hand_a_member_another_members_private_token(
    tenant: str, ddb: Any, settings: Settings
) -> None:
    """FINDING (fails on main; minor, a timestamp): two heads read from the
    table's stream in one batch, alice's share with bob and then her private
    edit, are one poke: the newest token with the union of their audiences
    (`head_pokes`, and likewise `PokeRelay.offer` between servers). Bob is then
    poked with the token of alice's private edit, a ULID whose time says when she
    wrote privately. Passes when each member is poked with the newest token of
    the changes in its own view."""
    from api.domain.audiences import UNTOLD, in_audience
    from api.realtime.streams import head_pokes
    from api.storage import keys

    service = _service()
    heads = []

    def write(mutation: Mutation) -> str:
        (done,) = service.push(tenant, [mutation], by="alice", role="writer")
        assert done.record is not None, done.error
        key = {"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}}
        item = ddb.get_item(TableName=settings.table_name, Key=key, ConsistentRead=True)["Item"]
        heads.append({"eventName": "MODIFY", "dynamodb": {"Keys": key, "NewImage": item}})
        return done.record.change_token

    private = Visibility("", ())
    first = write(
        Mutation(
            "create",
            PERSON,
            tenant,
            "p1",
            None,
            {"givenName": "A"},
            visibility=private,
            sets_visibility=True,
        )
    )
    shared = write(
        Mutation(
            "share",
            PERSON,
            tenant,
            "p1",
            first,
            visibility=Visibility("", ("bob",)),
            sets_visibility=True,
        )
    )
    other = write(
        Mutation(
            "create",
            PERSON,
            tenant,
            "p2",
            None,
            {"givenName": "Secret"},
            visibility=private,
            sets_visibility=True,
        )
    )
    token, audience = head_pokes(heads[1:])[tenant]
    named = {other: "the token of alice's private edit"}
    if in_audience("bob", audience):
        assert token == shared, f"bob is poked with {named.get(token, token)}"
    else:
        # Not told the newest token: bob's subscription reads its own view first
        # (UNTOLD, as a catch-up's poke), and is sent the change it finds there.
        assert audience is not None and audience >= UNTOLD, f"bob is not poked: {audience}"
        seen = service.latest_seen(tenant, first, "bob")
        assert seen == shared, f"bob is poked with {named.get(str(seen), seen)}"


def test_an_export_holds_no_version_of_a_record_that_left_the_owners_view(
    gql: GraphQLClient, tenant: str
) -> None:
    """FINDING (fails on main): alice shares a record with carol (a tenant OWNER),
    edits it, then makes it private and edits it again. Carol's history of it is
    NOT_FOUND (contract 3.12: outside the view, history is NOT_FOUND), but her
    export holds the versions she once saw of it: the export keeps what history
    refuses, and a record that left her view stays in her file. Passes when an
    export's versions follow history (none of a record outside the caller's
    view); the private edit is not in it either way."""
    alice = Member(gql, tenant, "alice")
    carol = Member(gql, tenant, "carol", role="owner")
    token = alice.create("p4", ["carol"])
    token = _update(alice, "p4", token, "SharedText")
    token = alice.share("p4", token, [])
    _update(alice, "p4", token, "Secret4")
    alice.create("w1", None)
    assert _errors(carol.call(_HISTORY, {"t": tenant, "id": "p4"}))[0][0] == "NOT_FOUND"
    payload = carol.data(_EXPORT, {"t": tenant, "e": None})["exportTenant"]
    while not payload["done"]:
        payload = carol.data(_EXPORT, {"t": tenant, "e": payload["exportID"]})["exportTenant"]
    body = gzip.decompress(httpx2.get(payload["downloadURL"]).content).decode()
    lines = [json.loads(line) for line in body.splitlines()]
    ids = {(k, v["id"]) for line in lines for k, v in line.items() if k in ("entity", "version")}
    versions = [
        (line["version"]["changeToken"], line["version"].get("givenName"))
        for line in lines
        if "version" in line
    ]
    assert "Secret4" not in body
    assert ids == {("entity", "w1")}, f"carol's export holds p4's versions {versions}"


_LEFT = (
    "query($t: ID!, $s: ID) { changes(tenantID: $t, since: $s) { items { __typename id"
    " changeToken ... on LeftViewItem { writtenBy visibility { owner sharedWith } }"
    " ... on DeletedItem { writtenBy visibility { owner sharedWith } } } changeToken } }"
)


def test_a_left_view_item_does_not_tell_who_sees_the_record_now(
    gql: GraphQLClient, tenant: str
) -> None:
    """FINDING (fails on main): alice moves a record from bob to carol. Bob's
    LeftViewItem (contract 3.12 lists `id tenantID changeToken type createdAt updatedAt`) implements
    SynchronizedItem, so it can be asked for `visibility`: it must not name carol
    (the audience after bob left it), neither from his stream's sentinel nor
    from the main log's, which every member of the tenant reads when a tenant-wide
    record is restricted. Passes when a LeftViewItem's visibility is
    null (or at most names what bob already knew)."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    token = alice.create("p1", ["bob"])
    wide = alice.create("p2", None)
    since = bob.data(_LEFT, {"t": tenant, "s": None})["changes"]["changeToken"]
    alice.share("p1", token, ["carol"])  # bob's stream gets the sentinel
    alice.share("p2", wide, ["carol"])  # the main log's: every member's
    items = bob.data(_LEFT, {"t": tenant, "s": since})["changes"]["items"]
    assert [i["__typename"] for i in items] == ["LeftViewItem"] * 2
    told = {i["id"]: i["visibility"] for i in items}
    # A device of release 2 gets a DeletedItem in its place: the same question.
    old = bob.call(_LEFT, {"t": tenant, "s": since}, release=2)["data"]["changes"]["items"]
    assert [i["__typename"] for i in old] == ["DeletedItem"] * 2
    told_old = {i["id"]: i["visibility"] for i in old}
    assert "carol" not in str((told, told_old)), f"bob is told who sees them now: {told}"


def test_changes_of_view_between_a_syncs_log_read_and_its_stream_read(
    tenant: str, ddb: Any, settings: Settings, inject: Any
) -> None:
    """A concurrent writer at the worst instant: each time bob's sync is about to
    Query his stream (after its log read), alice commits a change of who sees what
    (a share with bob, an unshare, tenant-wide to private, private to tenant-wide,
    a private edit). Following cursors to the end and then polling until the token
    stops moving, bob ends with exactly his view, at every page size tried."""
    from api.storage import keys

    writer = _service()  # another server
    tokens: dict[str, str] = {}
    for id, vis in (("a", None), ("b", Visibility("", ())), ("c", Visibility("", ("bob",)))):
        (done,) = writer.push(
            tenant,
            [
                Mutation(
                    "create",
                    PERSON,
                    tenant,
                    id,
                    None,
                    {"givenName": id},
                    visibility=vis,
                    sets_visibility=True,
                )
            ],
            by="alice",
            role="writer",
        )
        assert done.record is not None
        tokens[id] = done.record.change_token
    plan = [
        ("b", Visibility("", ("bob",))),
        ("a", Visibility("", ())),
        ("c", Visibility("", ())),
        ("b", None),
        ("a", Visibility("", ("bob",))),
        ("c", None),
        ("b", Visibility("", ())),
    ]
    steps: list[tuple[str, Visibility | None]] = []
    stream = keys.stream_pk(tenant, "m:bob")
    busy = [False]

    def between(params: dict[str, Any], **_: Any) -> None:
        values = params.get("ExpressionAttributeValues", {})
        if busy[0] or not steps or stream not in str(values):
            return
        busy[0] = True
        try:
            id, vis = steps.pop(0)
            (done,) = writer.push(
                tenant,
                [
                    Mutation(
                        "share",
                        PERSON,
                        tenant,
                        id,
                        tokens[id],
                        visibility=vis,
                        sets_visibility=True,
                    )
                ],
                by="alice",
                role="writer",
            )
            assert done.record is not None, done.error
            tokens[id] = done.record.change_token
        finally:
            busy[0] = False

    inject("provide-client-params.dynamodb.Query", between)
    reader = _service()
    for limit in (1, 2, 3):
        steps[:] = plan  # a new device of bob's, and the same changes at its stream reads
        held: dict[str, str] = {}
        since: str | None = None
        for _ in range(20):
            before, cursor = since, None
            while True:
                page = reader.changes(tenant, since=since, cursor=cursor, limit=limit, sub="bob")
                for r in page.items:
                    if r.deleted or r.left_view:
                        held.pop(r.id, None)
                    else:
                        held[r.id] = r.change_token
                cursor = page.cursor
                if cursor is None:
                    since = page.change_token
                    break
            if since == before:
                break
        assert steps == [], f"steps not run: {steps}"
        assert held == _view(ddb, settings, tenant, "bob"), (limit, held)


_DELETE_TENANT = (
    "mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { removedItems done } }"
)


def test_a_deleted_tenants_streams_do_not_come_back_in_its_next_life(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """FINDING (fails on main; deleted data comes back): alice shares a record with
    bob, then the tenant is deleted (`deleteTenant` until done), then written
    again: alice creates a private record, so syncs read streams again. Bob's first
    sync of the new life holds old1, the deleted life's record, read from his
    stream partition `T#<t>#V#m:bob`, which the deletion left (the stored format's
    notes say sweeping `T#<t>#V#*` is not done yet). Passes when the deletion
    removes the streams' partitions too (or a stream read ignores entries below
    the head's `born`)."""
    from api.storage import keys
    from tests.support.store_state import _query_all

    alice = Member(gql, tenant, "alice", role="owner")
    bob = Member(gql, tenant, "bob")
    alice.create("old1", ["bob"])
    done = False
    for _ in range(50):
        done = alice.data(_DELETE_TENANT, {"t": tenant})["deleteTenant"]["done"]
        if done:
            break
    assert done
    left = _query_all(ddb, settings.table_name, keys.stream_pk(tenant, "m:bob"))
    alice.create("new1", [])
    alice.create("new2", ["bob"])
    device = Device(bob)
    device.sync()
    assert (sorted(device.held), [i["sk"]["S"] for i in left]) == (["new2"], []), (
        "the old life's record old1 comes back to bob"
        if "old1" in device.held
        else "bob's stream keeps the old life's entries"
    )
