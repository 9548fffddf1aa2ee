"""`SyncService`: the capabilities of the service (`api.service`) wired to one
store; what the GraphQL layer and realtime call."""

from __future__ import annotations

from collections.abc import Callable

from api.domain.audiences import Audience
from api.domain.cursor import CursorCodec
from api.domain.retention import Retention
from api.ordering import wall_clock_ms
from api.service.attachments import DEFAULT_QUOTA_BYTES, Attachments, BlobStore, Quota
from api.service.blob_views import BlobViews
from api.service.commit_audience import CommitAudiences
from api.service.exports import ExportFiles, ExportJobs, TenantExport
from api.service.first_poke import FirstPoke
from api.service.history import History
from api.service.membership import Membership
from api.service.ports import Store
from api.service.pushes import Pushes
from api.service.reading import Reading
from api.service.tenancy import TenantDeletion
from api.service.upgrades import Upgrades
from api.service.writing import Writing


class SyncService:
    """The capabilities wired to one store; the schema's verbs, each owned by one."""

    def __init__(
        self,
        store: Store,
        cursors: CursorCodec,
        clock_ms: Callable[[], int] = wall_clock_ms,
        on_commit: Callable[[str, str, Audience], None] | None = None,
        retention: Retention | None = None,
        history: bool = True,
        on_deleting: Callable[[str], None] | None = None,
        exports: ExportJobs | None = None,
        export_files: ExportFiles | None = None,
        blobs: BlobStore | None = None,
        quota: Quota | None = None,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        pushes: Pushes | None = None,
    ) -> None:
        # Silent pushes (registration; the rounds run where pokes are sent): None, off.
        self.pushes = pushes
        retention = retention or Retention()
        # Attachments need a blob store (S3): a service built without one has none.
        self.blobs = blobs
        # quota: the tenants' room for blobs (requestUpload); None keeps none.
        self.attachments = (
            None if blobs is None else Attachments(blobs, quota, quota_bytes, BlobViews(store))
        )
        self.reading = Reading(store, cursors, clock_ms, retention)
        self.membership = Membership(store)
        self.access = self.membership.access
        self.roster_at = self.membership.roster_at  # blocking: the AWS fan-out
        self.upgrades = Upgrades(store, cursors)
        # on_commit is called with (tenant, token, audience) after each committed
        # transaction: audience, whose view it changed (None: every member's).
        audiences = CommitAudiences()
        told = None if on_commit is None else audiences.telling(on_commit)
        self.writing = Writing(
            audiences.tapped(store), clock_ms, told, retention, history, self.attachments
        )
        self.history = History(store, self.writing, clock_ms, retention)
        # on_deleting is called with a tenant being deleted (closes its subscriptions).
        attachments = self.attachments

        def deleting(tenant_id: str) -> None:
            if attachments is not None:
                attachments.forget(tenant_id)
            if on_deleting is not None:
                on_deleting(tenant_id)

        self.tenancy = TenantDeletion(store, clock_ms, deleting, blobs, quota_bytes)
        self.get = self.reading.get
        self.changes = self.reading.changes
        self.latest_change = self.reading.latest_change
        first_poke = FirstPoke(store, self.reading)
        self.latest_seen = first_poke.latest_seen
        self.catch_up_audience = first_poke.catch_up_audience  # blocking: the AWS drain
        self.catch_up = self.upgrades.catch_up
        self.apply = self.writing.apply
        self.push = self.writing.push
        self.create = self.writing.create
        self.update = self.writing.update
        self.delete = self.writing.delete
        self.versions = self.history.versions
        self.restore = self.history.restore
        self.delete_tenant = self.tenancy.delete_tenant
        # Exports need their jobs' storage and where their files go (S3): a service
        # built without both has none.
        self.exports = (
            None
            if exports is None or export_files is None
            else TenantExport(exports, export_files, self.reading, clock_ms, retention)
        )
