"""The service, by capability: reading (`changes`, entities), upgrades (an
upgraded app's catch-up), writing (single
writes and pushes), history (earlier versions, restores), tenancy (deleting a
tenant), exports (a tenant's data as a file, over `ExportJobs` and `ExportFiles`), attachments
(blobs addressed by content, over `BlobStore`), over a `Store`
(`api.service.ports`). Knows nothing of GraphQL
or HTTP. `SyncService` is the composition the GraphQL layer and realtime call:
each capability a module of its own, wired to one store in
`api.service.sync_service`.

This package's names are imported on their first use, not with the package: the
sweep (`api.service.blob_sweep`, a Lambda function without SnapStart, so every
hourly start is cold) imports the package and none of the capabilities the
composition wires, some 25 ms of CPU of its 450 (docs/cold-start.md)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from api.service.ports import Page, PushResult, PushStatus, Store, Written
    from api.service.sync_service import SyncService

__all__ = ["Page", "PushResult", "PushStatus", "Store", "SyncService", "Written"]

_MODULE_OF = {
    "SyncService": "api.service.sync_service",
    **dict.fromkeys(["Page", "PushResult", "PushStatus", "Store", "Written"], "api.service.ports"),
}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE_OF[name]), name)
