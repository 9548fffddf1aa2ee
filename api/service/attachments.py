"""Attachments (contract 3.10): blobs addressed by content, over its own port
(`BlobStore`), not more methods on the Store.

`request_upload` answers "already present" when the tenant's bucket prefix holds
the declared bytes (one HeadObject: deduplicated, nothing to upload), else a
presigned PUT that the blob store verifies (size, content type, SHA-256), once
the declared size is taken from the tenant's quota (`Quota`: one conditional
UpdateItem; QUOTA_EXCEEDED when the room is smaller, nothing presigned). The
sweep (`api.service.blob_sweep`) recounts the room from what the bucket holds.
`attachment` answers a short-lived download link for a blob that is present with
the SHA-256 its key names, else NOT_FOUND, with one DynamoDB read and no write.

Both first read the generation of the tenant's blob keys (`Quota.generation`, one
GetItem of its usage item): TENANT_DELETED while the tenant is being deleted. A
deletion gives a tenant that reserved a new generation, so an upload presigned
before it and sent later lands where the tenant written again never looks
(docs/attachments.md, "Deleting a tenant").

Entities reference blobs (`Person.photo`): `references` says which blobs a write
sets, and `missing` which of them the store does not hold, asked by writing
before it touches the table; `download_link` signs an entity's reference on read.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

from api.domain.attachments import (
    DOWNLOAD_LINK_S,
    UPLOAD_LINK_S,
    Blob,
    BlobKeys,
    PresignedUpload,
    StoredBlob,
    allowed_content_type,
    check_sha256,
    declared_blob,
    referenced_blob,
    uploader_tag,
)
from api.domain.errors import (
    AttachmentMissing,
    BadUserInput,
    InternalError,
    NotFound,
    QuotaExceeded,
    SyncError,
    Unavailable,
)
from api.domain.identifiers import check_entity_id, check_identifier
from api.domain.mutations import Mutation
from api.domain.records import Record

logger = logging.getLogger(__name__)

# HeadObjects in flight for one write's references, and how long they may take in
# all: each gives up within 2 x (2 s to connect + 3 s to read) (`Settings.s3_client`);
# the whole request must answer within the 10 s Lambda timeout, with a coded error.
REFERENCE_CHECKS = 8
REFERENCE_DEADLINE_S = 5.0
# A boto3 presign is some 0.7 ms of CPU: a page of 1,000 photos spends 0.7 s
# signing, in one worker-thread call through the tenant's read gate
# (`download_links`), never on the event loop. A process reuses an entity's link
# while 10 of its 15 minutes remain (devices of one tenant read the same photos),
# for up to 10,000 blobs (about 5 MB of links): a saving, not a bound, since a
# tenant of more photos than that gets past it.
LINK_REUSE_LEFT_S = 10 * 60
LINKS_KEPT = 10_000


def references(mutation: Mutation) -> list[tuple[str, Blob]]:
    """The blobs a validated mutation makes its entity reference, by field: each
    attachment it sets. A put's state that keeps an attachment as it assumes adds
    nothing: the put applies only where the server holds that reference, checked
    when it was written."""
    names = mutation.item_type.attachment_fields
    if not names:
        return []
    if mutation.verb == "put":
        assert mutation.state is not None
        assumed = {} if mutation.assumed is None else mutation.assumed.fields
        values = {n: mutation.state.fields.get(n) for n in names}
        values = {n: v for n, v in values.items() if v != assumed.get(n)}
    else:
        values = {n: mutation.changes.get(n) for n in names}
    return [(n, referenced_blob(mutation.tenant_id, v)) for n, v in values.items() if v is not None]


def _now() -> datetime:
    return datetime.now(UTC)


def _why(blob: Blob, stored: StoredBlob | None) -> AttachmentMissing:
    if stored is None or stored.sha256 != blob.sha256:
        return AttachmentMissing(
            f"the tenant holds no blob {blob.sha256}: upload it first (requestUpload)"
        )
    return AttachmentMissing(
        f"blob {blob.sha256} is held as {stored.size} bytes of {stored.content_type}, "
        f"not {blob.size} bytes of {blob.content_type}: upload it as declared (requestUpload)"
    )


class BlobStore(Protocol):
    """What attachments need of the blob store (`api.storage.blobs.S3Blobs`)."""

    def stat(self, tenant_id: str, sha256: str, generation: str = "") -> StoredBlob | None: ...
    def presign_upload(
        self, blob: Blob, expires_in: int, generation: str = ""
    ) -> PresignedUpload: ...
    def presign_download(
        self, tenant_id: str, sha256: str, expires_in: int, generation: str = ""
    ) -> tuple[str, datetime]: ...
    def reachable(self) -> bool: ...
    def remove_all(
        self, tenant_id: str, limit: int, check: Callable[[], None] | None = None
    ) -> int:
        """Delete up to `limit` of the tenant's objects in the bucket (its blobs and its
        exports' files: every version, every incomplete upload); how many went (fewer:
        none left). `check` is called before each delete (a deletion's: it raises when
        the deletion is over)."""
        ...


class Quota(Protocol):
    """The tenants' room for blobs and the generation of their blob keys
    (`api.storage.blob_usage.BlobUsageTable`)."""

    def generation(self, tenant_id: str) -> str:
        """The generation of the tenant's blob keys; TenantDeleted while the tenant is
        being deleted."""
        ...

    def keys(self, tenant_id: str) -> BlobKeys:
        """`generation`, and whether the tenant has (had) a restricted record."""
        ...

    def reserve(self, tenant_id: str, size: int, quota: int, now_s: int) -> str | None:
        """Take `size` bytes of the tenant's room (`quota` before its first) for a link
        signed at `now_s` (epoch s): the generation it reserved in; None when the room
        is smaller (nothing taken). TenantDeleted while the tenant is being deleted
        (which marks and ends this in storage: `api.storage.tenants`)."""
        ...


class Views(Protocol):
    """Who sees which records of a tenant, as attachments need it
    (`api.service.blob_views`): a blob is shown to a member only through a record
    in its view (contract 3.10)."""

    def restricted(self, tenant_id: str) -> bool:
        """Whether the tenant has, or had, a record not every member sees (its head's
        flag: one consistent GetItem); asked only without a `Quota` (`Quota.keys`)."""
        ...

    def seen(self, tenant_id: str, sub: str, entity_id: str) -> Record | None:
        """The live entity `entity_id` if `sub` sees it, else None (one GetItem)."""
        ...


def referenced_sha256s(record: Record) -> set[str]:
    """The blobs a stored version references, by sha256."""
    names = record.item_type.attachment_fields
    values = (record.fields.get(n) for n in names)
    return {v["sha256"] for v in values if isinstance(v, dict) and "sha256" in v}


# A process reuses what it read of a tenant's generation for entities' download links
# (`download_link`, no read per photo) this long; a deletion in this process forgets
# it at once (`forget`).
GENERATION_REUSE_S = 60
GENERATIONS_KEPT = 10_000

# A tenant's blobs may take this much (BLOB_QUOTA_BYTES): 1 GiB, some 300 photos of
# 3 MB, $0.023 a month on S3 Standard.
DEFAULT_QUOTA_BYTES = 1024**3


@dataclass(frozen=True)
class UploadAnswer:
    already_present: bool
    upload: PresignedUpload | None = None


@dataclass(frozen=True)
class Attachment:
    sha256: str
    size: int
    content_type: str
    url: str
    url_expires_at: datetime


class Attachments:
    def __init__(
        self,
        blobs: BlobStore,
        quota: Quota | None = None,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        views: Views | None = None,
    ) -> None:
        self._blobs = blobs
        self._views = views  # None: every member sees every record (a blob store alone)
        self._quota = quota  # None: no quota kept (tests of the blob store alone)
        self._quota_bytes = quota_bytes
        # (tenant, sha256) -> a download link and until when, newest used last.
        self._links: OrderedDict[tuple[str, str], tuple[str, datetime]] = OrderedDict()
        self._links_lock = threading.Lock()
        # tenant -> its generation and when it was read (download links only).
        self._generations: OrderedDict[str, tuple[str, datetime]] = OrderedDict()

    def _generation(self, tenant_id: str) -> str:
        """The generation of the tenant's blob keys, read now (TenantDeleted while it
        is being deleted); "" without a quota (a blob store alone)."""
        return "" if self._quota is None else self._quota.generation(tenant_id)

    def _keys(self, tenant_id: str) -> BlobKeys:
        """The generation, and whether blobs are shown only through records."""
        if self._quota is not None:
            keys = self._quota.keys(tenant_id)
            return keys if self._views is not None else BlobKeys(keys.generation)
        return BlobKeys("", self._views is not None and self._views.restricted(tenant_id))

    def forget(self, tenant_id: str) -> None:
        """Drop what this process reuses of a tenant's blobs (it is being deleted)."""
        with self._links_lock:
            self._generations.pop(tenant_id, None)
            for key in [k for k in self._links if k[0] == tenant_id]:
                del self._links[key]

    def request_upload(
        self, tenant_id: str, sha256: str, size: int, content_type: str, by: str = ""
    ) -> UploadAnswer:
        blob = declared_blob(tenant_id, sha256, size, content_type)  # bad input: nothing asked
        keys = self._keys(tenant_id)  # TENANT_DELETED: nothing written
        generation = keys.generation
        # In a tenant with records some members do not see, whether it holds these
        # bytes is not told (they may be only another member's private record's): an
        # upload is answered, which stores the same bytes again under the same key.
        hidden = keys.restricted
        stored = None if hidden else self._blobs.stat(tenant_id, sha256, generation)
        if hidden and by:  # its link names the uploader: a write of `by` may use it
            blob = replace(blob, uploader=uploader_tag(by))
        if stored is not None and stored.holds(blob):
            return UploadAnswer(already_present=True)
        # Absent, or bytes that are not the declared ones: this upload replaces them,
        # and counts against the quota until the sweep recounts what the bucket holds.
        if self._quota is not None:
            reserved = (
                None
                if size > self._quota_bytes
                else self._quota.reserve(
                    tenant_id, size, self._quota_bytes, int(_now().timestamp())
                )
            )
            if reserved is None:
                raise QuotaExceeded(
                    f"the tenant's blobs would exceed its quota of {self._quota_bytes} bytes: "
                    "remove attachments no entity needs; blobs no entity references are "
                    "removed by the daily sweep after 7 days"
                )
            # The generation the reservation was taken in, read with it: the upload
            # goes where this generation's blobs are, never a later one's.
            generation = reserved
        return UploadAnswer(False, self._blobs.presign_upload(blob, UPLOAD_LINK_S, generation))

    def download_link(self, tenant_id: str, sha256: str) -> tuple[str, datetime]:
        """A download link of an entity's reference, with no call to the blob store: the
        write that stored the reference found the blob (`missing`). (The link fails
        if the blob went since: its tenant deleted, or its bytes uploaded again as
        another type.) Reused while LINK_REUSE_LEFT_S of it remain."""
        key = (tenant_id, sha256)
        with self._links_lock:
            kept = self._links.get(key)
            if kept is not None and kept[1] - _now() >= timedelta(seconds=LINK_REUSE_LEFT_S):
                self._links.move_to_end(key)
                return kept
            read = self._generations.get(tenant_id)
        if read is None or _now() - read[1] >= timedelta(seconds=GENERATION_REUSE_S):
            read = (self._generation(tenant_id), _now())
            with self._links_lock:
                self._generations[tenant_id] = read
                self._generations.move_to_end(tenant_id)
                while len(self._generations) > GENERATIONS_KEPT:
                    self._generations.popitem(last=False)
        link = self._blobs.presign_download(tenant_id, sha256, DOWNLOAD_LINK_S, read[0])
        with self._links_lock:
            self._links[key] = link
            self._links.move_to_end(key)
            while len(self._links) > LINKS_KEPT:
                self._links.popitem(last=False)
        return link

    def download_links(
        self, tenant_id: str, sha256s: Iterable[str]
    ) -> dict[str, tuple[str, datetime]]:
        """The download links of a page's references of one tenant, in one call (a
        worker thread's, in the tenant's admission): at most one signature each."""
        return {sha256: self.download_link(tenant_id, sha256) for sha256 in dict.fromkeys(sha256s)}

    def missing(self, blobs: Iterable[Blob], by: str | None = None) -> dict[Blob, SyncError]:
        """Of the blobs some writes reference, those the store does not hold with
        exactly that sha256, size and type, each with why (ATTACHMENT_MISSING; or
        UNAVAILABLE when the store did not answer in time). One HeadObject per
        distinct blob, REFERENCE_CHECKS at a time: a push of 100 entries each with a
        new photo waits for 13 rounds of some 20 ms on S3, not 100; and for at most
        REFERENCE_DEADLINE_S in all. First one read of the tenant's generation (its
        usage item): a tenant being deleted refuses each blob with TENANT_DELETED.
        In a tenant with restricted records (the usage item's flag), a blob is held
        for the writer `by` only if `by` uploaded its current version (the bytes may be
        only in another member's private record): else ATTACHMENT_MISSING, as absent."""
        distinct = list(dict.fromkeys(blobs))
        if not distinct:
            return {}
        generations: dict[str, str | SyncError] = {}
        uploaders: dict[str, str | None] = {}  # tenant -> the uploader a blob needs
        for tenant_id in {b.tenant_id for b in distinct}:
            try:
                keys = self._keys(tenant_id)
                generations[tenant_id] = keys.generation
                uploaders[tenant_id] = uploader_tag(by or "") if keys.restricted else None
            except SyncError as exc:  # TENANT_DELETED, or UNAVAILABLE: its writes alone
                generations[tenant_id] = exc
        checked = [b for b in distinct if isinstance(generations[b.tenant_id], str)]
        refused = {
            b: error for b in distinct if isinstance(error := generations[b.tenant_id], SyncError)
        }
        if not checked:
            return refused

        def check(b: Blob) -> SyncError | None:
            return self._check(b, str(generations[b.tenant_id]), uploaders[b.tenant_id])

        if len(checked) == 1:
            found = {checked[0]: check(checked[0])}
        else:
            pool = ThreadPoolExecutor(min(REFERENCE_CHECKS, len(checked)))
            futures = {pool.submit(check, b): b for b in checked}
            done, _ = wait(futures, timeout=REFERENCE_DEADLINE_S)
            # Checks still running end with their own S3 timeouts; nobody waits.
            pool.shutdown(wait=False, cancel_futures=True)
            late = Unavailable("the blob store did not answer in time; retry")
            found = {b: f.result() if f in done else late for f, b in futures.items()}
        return refused | {b: error for b, error in found.items() if error is not None}

    def _check(self, blob: Blob, generation: str, uploader: str | None) -> SyncError | None:
        try:
            stored = self._blobs.stat(blob.tenant_id, blob.sha256, generation)
        except SyncError as exc:  # UNAVAILABLE: this blob's writes alone
            return exc
        except Exception:  # a bug or a refusal (403): this blob's writes alone
            logger.exception("checking blob %s failed", blob.sha256)
            return InternalError("checking the attachment failed")
        if stored is not None and uploader is not None and stored.uploader != uploader:
            return _why(blob, None)  # not the writer's upload: as if absent
        return None if stored is not None and stored.holds(blob) else _why(blob, stored)

    def attachment(
        self, tenant_id: str, sha256: str, by: str = "", entity_id: str | None = None
    ) -> Attachment:
        """The blob `sha256` of the tenant and a download link, for the caller `by`.
        Named through `entity_id`: only if that entity is in the caller's view and
        references it. In a tenant with records some members do not see, the
        entity is required: a blob is shown only through a record in the view."""
        check_identifier(tenant_id, "tenantID")
        check_sha256(sha256)
        if entity_id is not None:
            check_entity_id(entity_id, "id")
        keys = self._keys(tenant_id)  # TENANT_DELETED while being deleted
        absent = NotFound(f"no attachment with sha256 {sha256} in this tenant")
        if self._views is not None and (entity_id is not None or keys.restricted):
            if entity_id is None:
                raise BadUserInput(
                    "name the record whose attachment this is (id): this tenant has "
                    "records that not every member sees"
                )
            # The same answer whether the record does not exist, is outside the
            # caller's view, or does not reference these bytes.
            seen = self._views.seen(tenant_id, by, entity_id)
            if seen is None or sha256 not in referenced_sha256s(seen):
                raise absent
        stored = self._blobs.stat(tenant_id, sha256, keys.generation)
        # Only bytes proven to hash to the key's sha256, of a type an upload may
        # declare (S3 refuses an upload with another type than the signed one).
        if (
            stored is None
            or stored.sha256 != sha256
            or not allowed_content_type(stored.content_type)
        ):
            raise absent
        link = self._blobs.presign_download(tenant_id, sha256, DOWNLOAD_LINK_S, keys.generation)
        url, expires = link
        return Attachment(sha256, stored.size, stored.content_type, url, expires)
