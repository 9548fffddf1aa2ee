"""The API with calls of a tenant's deletion and export that do a set, small part of
the work, for `api_server(app=SMALL_CALLS_APP)`: a test of a crash between calls then
spans them with a fraction of the data, however fast the machine. (Seeding and
deleting 12,001 items took 52 s of CPU-bound work on 2 cores, and an export's calls
are bounded by time too; a call's code is the same at any size.)"""

from __future__ import annotations

from starlette.types import ASGIApp

from api.app import create_app as create_api
from api.service import exports, tenancy

SMALL_CALLS_APP = "tests.support.small_calls_app:create_app"
DELETED_PER_CALL = tenancy.ITEMS_PER_CALL // 5  # 1,000
EXPORT_STEPS_PER_CALL = 5  # of up to STEP_ITEMS (100) entities: 500


def create_app() -> ASGIApp:
    tenancy.ITEMS_PER_CALL = DELETED_PER_CALL
    exports.STEPS_PER_CALL = EXPORT_STEPS_PER_CALL
    return create_api()
