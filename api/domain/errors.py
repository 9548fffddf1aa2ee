"""Domain errors, each with the error code of contract 3.5.

    SyncError                       code
     +-- Unauthenticated            UNAUTHENTICATED
     +-- Forbidden                  FORBIDDEN
     +-- BadUserInput               BAD_USER_INPUT
     +-- NotFound                   NOT_FOUND
     +-- InvalidCursor              INVALID_CURSOR
     +-- AttachmentMissing          ATTACHMENT_MISSING
     +-- QuotaExceeded              QUOTA_EXCEEDED
     +-- InternalError              INTERNAL_SERVER_ERROR (one push entry that failed)
     +-- Unavailable                UNAVAILABLE (retryable)
     +-- CurrentVersionError        (carries the server's current version)
          +-- Conflict              CONFLICT
          +-- AlreadyExists         ALREADY_EXISTS

The last three are declared in `api.domain.records`, beside the version they carry,
and `StaleHead` (a write that lost a race on the tenant's head) in `api.domain.chain`,
beside the head: this module imports nothing of the domain, so that any module may
raise its errors.

The GraphQL layer turns these into `extensions` in one place
(`api.graphql.errors`); anything else becomes INTERNAL_SERVER_ERROR.
"""

from __future__ import annotations

from typing import ClassVar


class SyncError(Exception):
    code: ClassVar[str] = "INTERNAL_SERVER_ERROR"
    # Why, when one code covers refusals a client must tell apart (`extensions.reason`).
    reason: ClassVar[str | None] = None
    retryable: ClassVar[bool] = False
    # True when this is the stored first outcome of a retried clientMutationID.
    replayed: bool = False


class Unauthenticated(SyncError):
    code = "UNAUTHENTICATED"


class Forbidden(SyncError):
    code = "FORBIDDEN"


class NotAMember(Forbidden):
    """The caller is not a member of the tenant: a device lets go of its copy of it
    (docs/clients.md), where a refusal for its role (RoleForbidden) keeps everything."""

    reason = "NOT_A_MEMBER"


class RoleForbidden(Forbidden):
    reason = "ROLE"


class BadUserInput(SyncError):
    code = "BAD_USER_INPUT"


class NotFound(SyncError):
    code = "NOT_FOUND"


class InvalidCursor(SyncError):
    code = "INVALID_CURSOR"


class AttachmentMissing(SyncError):
    """A write references a blob the tenant does not hold with that sha256, size and
    content type (contract 3.10): upload it, then send the write again."""

    code = "ATTACHMENT_MISSING"


class QuotaExceeded(SyncError):
    """requestUpload of a blob the tenant's quota has no room left for (contract 3.10):
    nothing is presigned; room comes back when the sweep removes unreferenced blobs."""

    code = "QUOTA_EXCEEDED"


class TooManyDevices(QuotaExceeded):
    """registerPushDevice past the bound of devices per member or per tenant
    (docs/settings.md): nothing is written."""

    reason = "PUSH_DEVICES"


class TenantDeleted(SyncError):
    """The tenant is being deleted, or the device's `since` is from before it was
    deleted: the device drops its copy of the tenant (contract 3.8)."""

    code = "TENANT_DELETED"


class ResyncRequired(SyncError):
    """The device's `since` is older than the deletions the tenant still keeps
    (`api.domain.retention`): it syncs again from scratch (contract 3.6)."""

    code = "RESYNC_REQUIRED"


class UpgradeRequired(SyncError):
    """The app declares a catalog release older than the server still serves
    (MIN_CLIENT_RELEASE): it must be updated before it syncs again (docs/evolution.md)."""

    code = "UPGRADE_REQUIRED"


class InternalError(SyncError):
    """An unexpected failure, reported without detail (the log has the traceback)."""

    code = "INTERNAL_SERVER_ERROR"


class Unavailable(SyncError):
    code = "UNAVAILABLE"
    retryable = True


class WriteContention(Exception):
    """A write lost a race it may win on a retry; never shown to clients."""


class TransactionConflict(WriteContention):
    """DynamoDB cancelled the transaction because another one touched the same item."""


class OutcomeRecorded(Exception):
    """Another request with the same clientMutationID recorded its outcome first."""


class WritesRefused(Exception):
    """A transaction of several writes was cancelled because of some of them: by
    position in the transaction, each one's refusal (a SyncError that carries the
    current version, or OutcomeRecorded). The others may be tried again."""

    def __init__(self, refusals: dict[int, SyncError | OutcomeRecorded]) -> None:
        super().__init__(f"{len(refusals)} writes refused")
        self.refusals = refusals
