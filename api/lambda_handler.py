"""AWS Lambda entry point: the same Starlette app behind API Gateway's HTTP API (Mangum).

Built once per Lambda instance, at import: the settings are read and the schema
is built, but nothing is fetched and no table is created (the table is a
CloudFormation resource in production).
"""

from __future__ import annotations

import logging

from mangum import Mangum

from api.app import create_app

logging.getLogger().setLevel(logging.INFO)  # Lambda's root handler is at WARNING

# An HTTP API carries no WebSocket (realtime on AWS is api.realtime.aws): no hub.
handler = Mangum(create_app(sockets=False), lifespan="off")
