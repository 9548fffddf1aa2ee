"""Who sees which records, as attachments ask it (`api.service.attachments.Views`):
one entity read against the caller's view; the tenant's flag on its head, asked only
by attachments without a quota (the blob usage item carries the flag too)."""

from __future__ import annotations

from api.domain.records import Record
from api.domain.visibility import sees
from api.service.ports import Store


class BlobViews:
    def __init__(self, store: Store) -> None:
        self._store = store

    def restricted(self, tenant_id: str) -> bool:
        head = self._store.head(tenant_id)  # TENANT_DELETED while being deleted
        return head is not None and head.restricted

    def seen(self, tenant_id: str, sub: str, entity_id: str) -> Record | None:
        record = self._store.get(tenant_id, entity_id)
        if record is None or record.deleted or not sees(record.visibility, sub):
            return None
        return record
