"""The reference sync client: local edits, push through `pushChanges`, pull through
`changes`; attachments kept locally, uploaded before the push that references them."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ulid import ULID

from api.domain.attachments import MAX_BLOB_BYTES, allowed_content_type
from sync_client.local_store import LocalStore, ServerVersion
from sync_client.outbox import Entry, Verb, squash
from sync_client.rebase import rebase
from sync_client.schema import PRODUCT, RELEASE_HEADER, ClientSchema
from sync_client.transport import BlobTransport, HttpBlobTransport, Transport, TransportError

PUSH_BATCH = 100
# The code a queued edit is answered with when its record left the member's view
# (a LeftViewItem, contract 3.12): refused on the device, never sent.
LEFT_VIEW = "LEFT_VIEW"
PULL_LIMIT = 100
# Uploaded bytes no queued edit references are kept as a cache of at most this much.
BLOB_CACHE_BYTES = 64 * 1024 * 1024
REQUEST_UPLOAD = (
    "mutation Upload($t: ID!, $sha: String!, $size: Int!, $type: String!) {"
    " requestUpload(tenantID: $t, sha256: $sha, size: $size, contentType: $type) {"
    " alreadyPresent upload { url method headers { name value } } } }"
)
ATTACHMENT = (
    "query Attachment($t: ID!, $sha: String!) {"
    " attachment(tenantID: $t, sha256: $sha) { sha256 size contentType url } }"
)
# Naming the record that holds it (contract 3.12: a tenant with restricted records
# answers a download only through a record in the caller's view).
ATTACHMENT_OF = (
    "query Attachment($t: ID!, $sha: String!, $id: ID) {"
    " attachment(tenantID: $t, sha256: $sha, id: $id) { sha256 size contentType url } }"
)


class SyncFailed(Exception):
    """The server answered with an error for the whole request; retry later."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors[0].get("message", "sync failed"))
        self.errors = errors


class CorruptBlob(Exception):
    """Downloaded bytes that do not hash to the reference's sha256: refused, not kept."""


@dataclass
class SyncReport:
    applied: int = 0
    conflicts: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    pulled: int = 0
    pages: int = 0
    resyncs: int = 0  # RESYNC_REQUIRED answered by a full download
    tenant_deleted: bool = False  # TENANT_DELETED: the local copy was dropped
    # FORBIDDEN with reason NOT_A_MEMBER: the device no longer has access to the tenant
    # (removed from it, or a token that does not list it); the local copy was let go,
    # each queued edit in `rejected` with that error.
    not_a_member: bool = False
    uploaded: int = 0  # blobs PUT to the blob store
    already_present: int = 0  # blobs requestUpload said the server already held
    reuploads: int = 0  # entries answered ATTACHMENT_MISSING, uploaded again and resent
    # INVALID_CURSOR for a page asked with a cursor (a server that did not sign it:
    # CURSOR_SECRET rotated, or a server of an earlier release during a rollback or a
    # rolling deploy): that read asked again from its start without the cursor, once
    # per sync; a second refusal is the sync's error.
    cursors_refused: int = 0


@dataclass(frozen=True)
class PushOutcome:
    """One push result as the device saw it (for logs, tests and the checker)."""

    entry: Entry
    status: str
    replayed: bool
    item: dict[str, Any] | None
    error: dict[str, Any] | None


DEVICE_HEADER = "X-Device-ID"


class SyncClient:
    def __init__(
        self,
        path: str | Path,
        tenant_id: str,
        transport: Transport,
        *,
        deletion_wins: bool = True,
        on_push_result: Callable[[PushOutcome], None] | None = None,
        blobs: BlobTransport | None = None,
        blob_cache_bytes: int = BLOB_CACHE_BYTES,
        schema: ClientSchema = PRODUCT,
        device_id: str | None = None,
    ) -> None:
        self.tenant_id = tenant_id
        self.transport = transport
        # The app's catalog release: declared with every request (a transport with
        # `headers`, as HttpTransport, sends it), and what it selects and keeps.
        self.schema = schema
        # What requests select: the app's release, or an earlier one while a server
        # of that release answers (a rollback): `_execute`.
        self._asked = schema
        headers = getattr(transport, "headers", None)
        if isinstance(headers, dict):
            headers[RELEASE_HEADER] = str(schema.release)
            if device_id is not None:  # the id it registered for silent pushes: its
                headers[DEVICE_HEADER] = device_id  # own writes push it nothing
        self.blobs = blobs or HttpBlobTransport()
        self.store = LocalStore(path)
        self._note_release()
        self.deletion_wins = deletion_wins
        self.on_push_result = on_push_result
        self.blob_cache_bytes = blob_cache_bytes
        # ATTACHMENT_MISSING, per outbox entry, since the last sync() began: entries
        # uploaded again for a retry, and entries that failed that retry (held back,
        # with everything behind them, until the next sync).
        self._missing_retried: set[int] = set()
        self._missing_held: set[int] = set()

    def close(self) -> None:
        self.store.close()

    # --- the local copy --------------------------------------------------------

    def items(self) -> dict[str, dict[str, Any]]:
        """What the app shows: server versions with pending local edits applied."""
        view: dict[str, dict[str, Any]] = {}
        for version in self.store.server_versions():
            if not version.deleted:
                view[version.entity_id] = {"__typename": version.type_name, **version.fields}
        for entry in self.store.entries():
            if entry.verb == "delete":
                view.pop(entry.entity_id, None)
            elif entry.verb == "create":
                view[entry.entity_id] = {"__typename": entry.type_name, **_set(entry.changes)}
            elif entry.entity_id in view:
                merged = {**view[entry.entity_id], **entry.changes}
                view[entry.entity_id] = _set(merged)
        return view

    def get(self, entity_id: str) -> dict[str, Any] | None:
        return self.items().get(entity_id)

    def pending(self) -> int:
        return len(self.store.entries())

    # --- local edits (work offline) --------------------------------------------

    def create(self, type_name: str, fields: dict[str, Any], entity_id: str | None = None) -> str:
        entity_id = entity_id or str(ULID())
        with self.store.transaction():
            self.store.append(Entry(0, entity_id, type_name, "create", dict(fields)))
        return entity_id

    def update(self, entity_id: str, changes: dict[str, Any]) -> None:
        self._edit(entity_id, "update", dict(changes))

    def delete(self, entity_id: str) -> None:
        self._edit(entity_id, "delete", {})

    def _edit(self, entity_id: str, verb: Verb, changes: dict[str, Any]) -> None:
        current = self.get(entity_id)
        if current is None:
            raise KeyError(f"{entity_id} is not in the local copy")
        with self.store.transaction():
            queued = self.store.entries_for(entity_id)
            last = queued[-1] if queued else None
            folded, absorbed = squash(last, verb, changes)
            if absorbed:
                assert last is not None
                if folded is None:
                    self.store.remove(last.seq)
                else:
                    self.store.save(folded)
                return
            # Behind an entry in flight, the base is that entry's result: resolved at push.
            version = None if queued else self.store.server_version(entity_id)
            self.store.append(
                Entry(
                    0,
                    entity_id,
                    current["__typename"],
                    verb,
                    changes,
                    base_token=None if version is None else version.token,
                    base_fields={} if version is None else version.fields,
                )
            )

    # --- attachments (work offline) ---------------------------------------------

    def attach(self, data: bytes, content_type: str) -> dict[str, Any]:
        """Keep `data` in the local store; the reference to set in a field (`photo`,
        `file`). Nothing is sent now: a push uploads it before the first queued edit
        that references it."""
        if not allowed_content_type(content_type):
            raise ValueError(f"content type {content_type!r} is not accepted (contract 3.10)")
        if not 1 <= len(data) <= MAX_BLOB_BYTES:
            raise ValueError(f"an attachment is 1 to {MAX_BLOB_BYTES} bytes")
        sha256 = hashlib.sha256(data).hexdigest()
        with self.store.transaction():
            self.store.keep_blob(sha256, content_type, data, uploaded=False)
        return {"sha256": sha256, "size": len(data), "contentType": content_type}

    def open(self, sha256: str, entity_id: str | None = None) -> bytes:
        """The bytes of a blob: the local copy, else downloaded (a fresh link from
        `attachment`, naming `entity_id`, the record holding it, when given: a tenant
        with restricted records needs it), checked against the sha256 and kept.
        CorruptBlob when what came is not those bytes; SyncFailed (NOT_FOUND,
        FORBIDDEN, ...) or TransportError when the download is not possible now."""
        held = self.store.blob(sha256)
        if held is not None:
            with self.store.transaction():
                self.store.touch_blob(sha256)
            return held.data
        if entity_id is None:
            body = self.transport.execute(ATTACHMENT, {"t": self.tenant_id, "sha": sha256})
        else:
            variables = {"t": self.tenant_id, "sha": sha256, "id": entity_id}
            body = self.transport.execute(ATTACHMENT_OF, variables)
        if body.get("errors"):
            raise SyncFailed(body["errors"])
        answer = body["data"]["attachment"]
        data = self.blobs.get(answer["url"])
        if hashlib.sha256(data).hexdigest() != sha256:
            raise CorruptBlob(f"the bytes downloaded for {sha256} do not hash to it")
        with self.store.transaction():
            self.store.keep_blob(sha256, answer["contentType"], data, uploaded=True)
        return data

    # --- sync --------------------------------------------------------------------

    def sync(self) -> SyncReport:
        """Push the outbox (until it is empty or blocked), then pull to the end.

        Refused with FORBIDDEN and reason NOT_A_MEMBER (from any request of the sync:
        the device no longer has access to the tenant), it stops there and lets go of
        the tenant (`forget_tenant`): `not_a_member`, and each queued edit in
        `rejected` with that error. A FORBIDDEN for the role (a reader's write) is a
        rejected entry like any other; an unreachable server raises TransportError;
        neither drops anything."""
        report = SyncReport()
        try:
            self._sync(report)
        except SyncFailed as exc:
            refusal = _not_a_member(exc)
            if refusal is None:
                raise
            report.rejected.extend(self.forget_tenant(refusal))
            report.not_a_member = True
        return report

    def on_push(self, payload: dict[str, Any]) -> SyncReport | None:
        """A silent push's payload (APNs' or FCM's data: `{tenantID, changeToken}`,
        docs/realtime.md): sync when it is this tenant's and its token is ahead of the
        copy's; None (no request made) otherwise. A push is a hint, like a poke:
        the sync is the one source of data, and one missed costs only the wait for
        the next sync (the app opening, a timer)."""
        token = payload.get("changeToken")
        if payload.get("tenantID") != self.tenant_id or not isinstance(token, str):
            return None
        since = self.store.since()
        if since is not None and token <= since:  # ULIDs: their order is the text's
            return None
        return self.sync()

    def forget_tenant(self, error: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Let go of the tenant on this device: its versions, the sync position, the
        attachments' bytes (cached or not uploaded yet) and the outbox, in one local
        transaction, then the file compacted so that none of it stays in free pages.
        Answers each queued edit, never sent or not known to be applied, as refused:
        `{"entry", "error"}`, also given to `on_push_result` as REJECTED. `error` says
        why (the server's NOT_A_MEMBER refusal, from `sync()`); by default the app
        signed out (code SIGNED_OUT). No request is made. A later `sync()` starts
        from nothing, as a new device would."""
        error = error or {
            "code": "SIGNED_OUT",
            "message": "the app let go of the tenant before this edit was applied",
        }
        with self.store.transaction():
            entries = self.store.entries()
            self.store.clear()
        self.store.compact()
        refused = [{"entry": entry, "error": dict(error)} for entry in entries]
        if self.on_push_result is not None:
            for entry in entries:
                self.on_push_result(PushOutcome(entry, "REJECTED", False, None, dict(error)))
        return refused

    def _sync(self, report: SyncReport) -> None:
        # Each sync asks with the app's own release first: its server may be back.
        self._asked = self.schema
        self._missing_retried.clear()
        self._missing_held.clear()
        for _ in range(10):  # rebased conflicts are pushed again at once
            if not self.push(report):
                break
        try:
            self.catch_up(report)
        except SyncFailed as exc:
            if _code(exc) != "TENANT_DELETED":
                raise
            self._drop(report)
        self.pull(report)
        if report.resyncs:
            # Edits kept through a resync go out now, based on what it downloaded.
            for _ in range(10):
                if not self.push(report):
                    break
            self.pull(report)
        self._trim_blobs()

    def push(self, report: SyncReport | None = None) -> bool:
        """Upload the blobs its entries reference, then push one batch; False when
        there was nothing to push (or what is next waits for the next sync)."""
        report = report or SyncReport()
        batch = self._next_batch()
        # Blobs first: an entry goes only once every blob it references is uploaded.
        # A failed upload holds that entry and everything behind it, as a failed push.
        batch, failure = self._upload_for(batch, report)
        if isinstance(failure, SyncFailed) and _code(failure) == "TENANT_DELETED":
            self._drop(report)
            return False
        if not batch:
            if failure is not None:
                raise failure
            return False
        # `since`: the copy these edits were made on. The server refuses the whole
        # push (TENANT_DELETED) when the tenant was deleted since (contract 3.8).
        variables = {
            "input": {
                "tenantID": self.tenant_id,
                "mutations": [self._mutation(e) for e in batch],
                "since": self.store.since(),
            }
        }
        asked = self._asked
        try:
            # Its variables name this release's inputs: not asked again as is.
            body = self._execute("push", variables, again=False)
        except SyncFailed:
            if self._asked is not asked:
                return True  # an earlier release's server: the next batch fits it
            raise
        results = body["data"]["pushChanges"]["results"]
        if any((r["error"] or {}).get("code") == "TENANT_DELETED" for r in results):
            # Deleted, or being deleted: nothing was written; drop the copy and outbox.
            self._drop(report)
            return False
        for result in results:
            if _is_not_a_member(result["error"]):
                # No access to the tenant any more: the whole copy goes (sync()).
                raise SyncFailed(
                    [{"message": result["error"]["message"], "extensions": result["error"]}]
                )
        for entry, result in zip(batch, results, strict=True):
            with self.store.transaction():
                self._apply_result(entry, result, report)
            if self.on_push_result is not None:
                self.on_push_result(
                    PushOutcome(
                        entry, result["status"], result["replayed"], result["item"], result["error"]
                    )
                )
        if failure is not None:
            raise failure
        return True

    def _upload_for(
        self, batch: list[Entry], report: SyncReport
    ) -> tuple[list[Entry], Exception | None]:
        """Upload the blobs the batch references, in order; the entries that can go,
        and the failure that stopped the others (None: all can go)."""
        for index, entry in enumerate(batch):
            if entry.seq in self._missing_held:
                return batch[:index], None
            try:
                for ref in self._references(entry):
                    self._upload(ref, report)
            except (TransportError, SyncFailed) as exc:
                return batch[:index], exc
        return batch, None

    def _references(self, entry: Entry) -> list[dict[str, Any]]:
        fields = self.schema.attachment_fields.get(entry.type_name, ())
        return [entry.changes[f] for f in fields if isinstance(entry.changes.get(f), dict)]

    def _upload(self, ref: dict[str, Any], report: SyncReport) -> None:
        """Make sure the server holds a referenced blob this device has the bytes of."""
        held = self.store.blob(ref["sha256"])
        if held is None or len(held.data) != ref["size"]:
            return  # not ours: synced from the server, which checks it holds it
        if held.uploaded and held.content_type == ref["contentType"]:
            return
        variables = {
            "t": self.tenant_id,
            "sha": ref["sha256"],
            "size": ref["size"],
            "type": ref["contentType"],
        }
        body = self.transport.execute(REQUEST_UPLOAD, variables)
        if body.get("errors"):
            raise SyncFailed(body["errors"])
        answer = body["data"]["requestUpload"]
        if answer["alreadyPresent"]:
            report.already_present += 1
        else:
            put = answer["upload"]
            headers = {h["name"]: h["value"] for h in put["headers"]}
            self.blobs.put(put["url"], held.data, headers)
            report.uploaded += 1
        with self.store.transaction():
            self.store.mark_uploaded(ref["sha256"], ref["contentType"])

    def _trim_blobs(self) -> None:
        """Uploaded bytes no queued edit references stay as a cache, bounded."""
        with self.store.transaction():
            keep = {r["sha256"] for e in self.store.entries() for r in self._references(e)}
            self.store.trim_blobs(keep, self.blob_cache_bytes)

    def pull(self, report: SyncReport | None = None) -> None:
        """Pull every change since the persisted token, page by page; when the server
        no longer keeps deletions that far back (RESYNC_REQUIRED), resync. A cursor
        the server refuses (INVALID_CURSOR: it did not sign it) is dropped and the
        pull asked again from the token persisted with the last page applied, once
        per sync (`report.cursors_refused`); a second refusal raises."""
        report = report or SyncReport()
        cursor: str | None = None
        since = self.store.since()
        while True:
            try:
                page = self._page(since, cursor)
            except SyncFailed as exc:
                if cursor is None and _code(exc) == "RESYNC_REQUIRED":
                    self.resync(report)
                    return
                if _code(exc) == "TENANT_DELETED":
                    self._drop(report)
                    return
                if cursor is not None and _cursor_refused(exc, report):
                    # From the token persisted with the last page applied: every
                    # change after it comes again (contract 3.4), nothing is lost.
                    cursor, since = None, self.store.since()
                    continue
                raise
            # The page and its token in one local transaction: a crash before the
            # commit repeats the page, never skips it.
            with self.store.transaction():
                for item in page["items"]:
                    self._remember(item, report)
                if page["changeToken"] is not None:
                    self.store.set_since(page["changeToken"])
            report.pulled += len(page["items"])
            report.pages += 1
            cursor = page["cursor"]
            if cursor is None:
                return

    def _keep(self, page: dict[str, Any], report: SyncReport) -> dict[str, Any]:
        """A page's versions kept, in one local transaction; the page."""
        with self.store.transaction():
            for item in page["items"]:
                self._remember(item, report)
        report.pulled += len(page["items"])
        report.pages += 1
        return page

    def _remember(self, item: dict[str, Any], report: SyncReport | None = None) -> None:
        if item["__typename"] == "LeftViewItem":
            self._let_go(item["id"], report)
            return
        version = self._server_version(item)
        if version is not None:
            self.store.remember(version)

    def _let_go(
        self,
        entity_id: str,
        report: SyncReport | None,
        refused: Sequence[dict[str, Any]] = (),
    ) -> None:
        """A LeftViewItem (contract 3.12): the record left this member's view; it was
        not deleted, and nothing goes to the server. Its version goes, with the bytes
        of its attachments no other record or queued edit here references, and its
        queued edits, each answered as refused (LEFT_VIEW: in `report.rejected` and to
        `on_push_result`), as `forget_tenant` answers a tenant's. In the page's local
        transaction (or the push result's, which answered NOT_FOUND an edit that
        referenced `refused`)."""
        version = self.store.server_version(entity_id)
        entries = self.store.entries_for(entity_id)
        held = {r["sha256"] for r in refused}
        held |= {r["sha256"] for e in entries for r in self._references(e)}
        if version is not None:
            held |= {r["sha256"] for r in self._version_references(version)}
        for entry in entries:
            self.store.remove(entry.seq)
        self.store.forget(entity_id)
        still = {r["sha256"] for e in self.store.entries() for r in self._references(e)}
        still |= {
            r["sha256"] for v in self.store.server_versions() for r in self._version_references(v)
        }
        self.store.drop_blobs(held - still)
        error = {"code": LEFT_VIEW, "message": "the record left your view before this edit"}
        for entry in entries:
            if report is not None:
                report.rejected.append({"entry": entry, "error": dict(error)})
            if self.on_push_result is not None:
                self.on_push_result(PushOutcome(entry, "REJECTED", False, None, dict(error)))

    def _version_references(self, version: ServerVersion) -> list[dict[str, Any]]:
        fields = self.schema.attachment_fields.get(version.type_name, ())
        return [version.fields[f] for f in fields if isinstance(version.fields.get(f), dict)]

    def _server_version(self, item: dict[str, Any]) -> ServerVersion | None:
        """A server version as this release keeps it; None for a type it does not
        declare (sent by a server of a later release to an app that did not say its
        own): skipped, as the server skips them for an app that says it."""
        token = item["changeToken"]
        if item["__typename"] == "DeletedItem":
            name = self.schema.name_by_code.get(item["type"])
            return None if name is None else ServerVersion(item["id"], name, token, True, {})
        fields = self.schema.version_fields(item)
        if fields is None:
            return None
        return ServerVersion(item["id"], item["__typename"], token, False, _set(fields))

    # --- the app's release (docs/evolution.md) ------------------------------------

    def _note_release(self) -> None:
        """At the first start of a new release over an existing copy: remember what
        to catch up on (what the earlier release skipped, up to the token it had
        reached), done by the next syncs until the server has answered it whole."""
        with self.store.transaction():
            held = self.store.meta("release")
            if held is not None and int(held) < self.schema.release:
                since = self.store.since()
                if since is not None and self.store.meta("catch_up_from") is None:
                    self.store.set_meta("catch_up_from", held)
                    self.store.set_meta("catch_up_to", since)
            self.store.set_meta("release", str(self.schema.release))

    def catch_up(self, report: SyncReport | None = None) -> bool:
        """The versions an earlier release of the app skipped (types, fields and enum
        values it did not declare), up to the token it had reached, page by page from
        `catchUp`; True when done (or none is owed). A server of an earlier release
        (a rollback) answers UNAVAILABLE: the next sync asks again. A cursor refused
        (INVALID_CURSOR, once per sync) starts the catch-up again from its first page."""
        report = report or SyncReport()
        held, up_to = self.store.meta("catch_up_from"), self.store.meta("catch_up_to")
        if held is None or up_to is None:
            return True
        types, fields = self.schema.added_since(int(held))
        cursor: str | None = None
        while types or fields:
            variables: dict[str, Any] = {"t": self.tenant_id, "upTo": up_to, "cursor": cursor}
            variables |= {"types": types or None, "fields": fields or None, "limit": PULL_LIMIT}
            try:
                body = self._execute("catch_up", variables)
            except SyncFailed as failure:
                if _code(failure) == "UNAVAILABLE" or self._asked is not self.schema:
                    return False  # a server of an earlier release: the next sync asks again
                if cursor is not None and _cursor_refused(failure, report):
                    cursor = None  # from its first page again: kept versions stay kept
                    continue
                raise
            page = self._keep(body["data"]["catchUp"], report)
            cursor = page["cursor"]
            if cursor is None:
                break
        with self.store.transaction():
            self.store.set_meta("catch_up_from", None)
            self.store.set_meta("catch_up_to", None)
        return True

    def _drop(self, report: SyncReport) -> None:
        """Deleted on the server (contract 3.8): nothing of it is kept here, outbox
        included; the next sync starts from since: null, and what is written then
        writes the tenant again."""
        with self.store.transaction():
            self.store.clear()
        report.tenant_deleted = True

    def resync(self, report: SyncReport | None = None) -> None:
        """Download the live data again (contract 3.6) and drop every entity it does not
        return, except those an unsynced local edit names: the outbox stays, and is
        pushed on top (an edit of one deleted meanwhile comes back CONFLICT; of one that
        left the member's view, NOT_FOUND, which lets it go: `_apply_result`). The
        token moves only at the end, with the drop, in one local transaction: a crash
        halfway resyncs again rather than keep a deleted entity. A cursor refused
        (INVALID_CURSOR, once per sync) starts the download again from its first page."""
        report = report or SyncReport()
        returned: set[str] = set()
        cursor: str | None = None
        while True:
            try:
                page = self._keep(self._page(None, cursor), report)
            except SyncFailed as exc:
                if cursor is None or not _cursor_refused(exc, report):
                    raise
                # The whole download again: what the refused one returned is no proof
                # that a record is still live.
                returned.clear()
                cursor = None
                continue
            returned.update(item["id"] for item in page["items"])
            cursor = page["cursor"]
            if cursor is None:
                break
        with self.store.transaction():
            edited = {entry.entity_id for entry in self.store.entries()}
            for version in self.store.server_versions():
                if version.entity_id not in returned and version.entity_id not in edited:
                    self.store.forget(version.entity_id)
            if page["changeToken"] is not None:
                self.store.set_since(page["changeToken"])
        report.resyncs += 1

    def _page(self, since: str | None, cursor: str | None) -> dict[str, Any]:
        variables = {"t": self.tenant_id, "since": since, "cursor": cursor, "limit": PULL_LIMIT}
        page: dict[str, Any] = self._execute("pull", variables)["data"]["changes"]
        return page

    def _execute(
        self, document: str, variables: dict[str, Any], again: bool = True
    ) -> dict[str, Any]:
        """A request with this release's `document` (push, pull, catch_up); one the
        server could not validate because it serves an earlier release (it says
        which) is asked again with that release's (unless not `again`), which the
        next requests use while they succeed; one an earlier release's documents
        asked and a later release's server answered is asked again with the
        documents of the release it serves. SyncFailed for any other error."""
        for _ in range(3):
            body = self.transport.execute(getattr(self._asked, document), variables)
            served = (body.get("extensions") or {}).get("release")
            if not body.get("errors"):
                if isinstance(served, int) and self._asked.release < min(
                    served, self.schema.release
                ):
                    # An earlier release's documents answered by a server of a later
                    # one (a rolling deploy): its versions may hold fields they did
                    # not select, which a page stored as it came would lose for good.
                    # Asked again with the documents of the release it serves (a
                    # later server takes an earlier one's variables; a push is
                    # replayed by its clientMutationIDs).
                    self._asked = self.schema.at(min(served, self.schema.release))
                    continue
                return body
            if not isinstance(served, int) or served >= self._asked.release:
                break
            self._asked = self.schema.at(served)
            if not again:
                break
        if not body.get("errors"):
            # Servers of two releases answered in turn three times (a rolling deploy).
            raise SyncFailed(
                [
                    {
                        "message": "servers of several releases answered in turn",
                        "extensions": {"code": "UNAVAILABLE", "retryable": True},
                    }
                ]
            )
        raise SyncFailed(body["errors"])

    def _next_batch(self) -> list[Entry]:
        """The oldest entries, one per entity, with ids and bases fixed before sending."""
        batch: list[Entry] = []
        seen: set[str] = set()
        with self.store.transaction():
            for entry in self.store.entries():
                if entry.entity_id in seen:
                    continue  # its base is the result of the one already in the batch
                seen.add(entry.entity_id)
                if not self._asked.accepts(entry.type_name, entry.changes):
                    continue  # the server answering is of an earlier release: later
                if entry.verb != "create" and entry.base_token is None:
                    version = self.store.server_version(entry.entity_id)
                    if version is None:
                        continue  # its create is not acknowledged yet
                    entry = replace(entry, base_token=version.token, base_fields=version.fields)
                if not entry.sent:
                    # Persisted before sending: a retry after a lost response, even
                    # from a restarted app, repeats this exact mutation.
                    entry = replace(entry, client_mutation_id=str(uuid.uuid4()), sent=True)
                self.store.save(entry)
                batch.append(entry)
                if len(batch) == PUSH_BATCH:
                    break
        return batch

    def _mutation(self, entry: Entry) -> dict[str, Any]:
        key = entry.type_name[0].lower() + entry.type_name[1:]
        common = {"tenantID": self.tenant_id, "clientMutationID": entry.client_mutation_id}
        if entry.verb == "create":
            return {
                f"create{entry.type_name}": {**common, "id": entry.entity_id, key: entry.changes}
            }
        target = {**common, "id": entry.entity_id, "changeToken": entry.base_token}
        if entry.verb == "update":
            return {f"update{entry.type_name}": {**target, "changes": entry.changes}}
        return {f"delete{entry.type_name}": target}

    def _apply_result(self, entry: Entry, result: dict[str, Any], report: SyncReport) -> None:
        status, item, error = result["status"], result["item"], result["error"]
        if status == "APPLIED":
            self._remember(item)
            self.store.remove(entry.seq)
            report.applied += 1
            return
        if status == "CONFLICT":
            report.conflicts += 1
            current = self._server_version(item)
            assert current is not None  # the entry's own type
            self.store.remember(current)
            self._rebase(entry, current)
            if current.deleted and entry.verb != "delete" and self.deletion_wins:
                # The deletion won over this edit, which goes: reported refused, with
                # the server's answer (CONFLICT, its current the DeletedItem), as any
                # edit the device drops; not only counted.
                error = {
                    "code": "CONFLICT",
                    "message": "the record was deleted before this edit was applied",
                    "current": item,
                }
                report.rejected.append({"entry": entry, "error": error})
            return
        if error and error["code"] == "UNAVAILABLE":
            return  # retry later, unchanged
        if error and error["code"] == "ATTACHMENT_MISSING" and self._missing(entry, report):
            return  # kept: uploaded again and resent with the same clientMutationID
        report.rejected.append({"entry": entry, "error": error})
        self.store.remove(entry.seq)
        if error and error["code"] == "NOT_FOUND" and entry.verb != "create":
            # An edit of a record this device holds, answered as if it did not exist:
            # the record left the member's view (contract 3.12; ids are never reused,
            # and a deleted one answers CONFLICT). Let go of it as a LeftViewItem does,
            # the bytes this edit referenced too: a resync cannot tell it from a
            # deletion (neither comes back), so this answer is the only word of it.
            self._let_go(entry.entity_id, report, self._references(entry))

    def _missing(self, entry: Entry, report: SyncReport) -> bool:
        """The server does not hold a blob the entry references (it lost it, or it was
        uploaded again as another type): not a stored outcome, so the same mutation
        may go again. With the bytes here, upload them again and resend, once per
        sync; a second refusal holds the entry until the next sync. Without them the
        entry cannot be repaired: False, it is rejected."""
        refs = self._references(entry)
        if not refs or any(self.store.blob(r["sha256"]) is None for r in refs):
            return False
        for ref in refs:
            self.store.mark_uploaded(ref["sha256"], ref["contentType"], uploaded=False)
        if entry.seq in self._missing_retried:
            self._missing_held.add(entry.seq)
        else:
            self._missing_retried.add(entry.seq)
            report.reuploads += 1
        return True

    def _rebase(self, entry: Entry, current: ServerVersion) -> None:
        """Turn a conflicting entry into one based on the server's current version."""
        fresh = replace(
            entry,
            base_token=current.token,
            base_fields=current.fields,
            client_mutation_id=None,
            sent=False,
        )
        if current.deleted:
            if entry.verb == "delete" or self.deletion_wins:
                self.store.remove(entry.seq)
                return
            # Configured to keep edits: they survive as a new entity.
            fields = {**entry.base_fields, **entry.changes}
            self.store.remove(entry.seq)
            self.store.append(Entry(0, str(ULID()), entry.type_name, "create", _set(fields)))
            return
        if entry.verb == "delete":
            self.store.save(replace(fresh, verb="delete"))  # the deletion wins over edits
            return
        # An update, or a create whose id was taken: keep what the server did not change.
        base = entry.base_fields if entry.verb == "update" else {}
        changes = rebase(base, current.fields, entry.changes)
        if changes:
            self.store.save(replace(fresh, verb="update", changes=changes))
        else:
            self.store.remove(entry.seq)


def _is_not_a_member(error: dict[str, Any] | None) -> bool:
    """FORBIDDEN because the caller has no access to the tenant (contract 3.5), not
    for its role: the one refusal a device lets go of the tenant for."""
    if error is None:
        return False
    return error.get("code") == "FORBIDDEN" and error.get("reason") == "NOT_A_MEMBER"


def _not_a_member(exc: SyncFailed) -> dict[str, Any] | None:
    """The refusal as a push entry's error (`code`, `reason`, `message`) when the
    request was refused NOT_A_MEMBER; else None."""
    for error in exc.errors:
        extensions = error.get("extensions") or {}
        if _is_not_a_member(extensions):
            return {
                "code": "FORBIDDEN",
                "reason": "NOT_A_MEMBER",
                "message": error.get("message", "you do not have access to this tenant"),
            }
    return None


def _cursor_refused(exc: SyncFailed, report: SyncReport) -> bool:
    """Whether a request asked with a cursor was refused INVALID_CURSOR for the first
    time in this sync (counted in `report`): the read is asked again without it."""
    if _code(exc) != "INVALID_CURSOR" or report.cursors_refused:
        return False
    report.cursors_refused += 1
    return True


def _code(exc: SyncFailed) -> str | None:
    code = exc.errors[0].get("extensions", {}).get("code")
    return None if code is None else str(code)


def _set(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


__all__ = ["CorruptBlob", "PushOutcome", "SyncClient", "SyncFailed", "SyncReport", "TransportError"]
