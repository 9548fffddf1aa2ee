"""AWS Lambda entry point: the same Starlette app behind API Gateway's HTTP API (Mangum).

Built once per Lambda instance, at import, with what a first request needs: the
settings, the schema and the DynamoDB client; nothing is fetched and no table is
created (the table is a CloudFormation resource in production). What a request
may never need is made on first use: S3's client (attachments and exports; the
dearest part of building the app, docs/cold-start.md). Realtime and the sweep are
other functions and are not imported here.

With SnapStart the import runs once, when a version is published, and the
snapshot is taken after it: the hook below makes S3's client before the snapshot,
so a restored instance has it too, and pays for it nowhere. What startup made is
then left out of garbage collections (`api.app.freeze_startup_heap`).
"""

from __future__ import annotations

import logging

from mangum import Mangum

from api.app import create_lambda_app, freeze_startup_heap

logging.getLogger().setLevel(logging.INFO)  # Lambda's root handler is at WARNING

# An HTTP API carries no WebSocket (realtime on AWS is api.realtime.aws): no hub.
app = create_lambda_app()
handler = Mangum(app, lifespan="off")
freeze_startup_heap()


def before_snapshot() -> None:
    """Make what is otherwise made on first use, for the snapshot to hold."""
    app.state.s3.client()
    freeze_startup_heap()  # S3's client joins what collections leave alone


try:
    # Lambda's Python runtimes include the Snapshot Restore for Python library; it
    # runs the hook once, at publication, before the snapshot.
    from snapshot_restore_py import register_before_snapshot
except ImportError:  # anywhere else no snapshot is taken: nothing to do
    pass
else:
    register_before_snapshot(before_snapshot)
