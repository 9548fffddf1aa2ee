"""The API with its own log (loggers `api` and `api.request`, info and up) on
stderr, for tests that read what a real server logs:
`api_server(app="tests.support.logged_app:create_app", log_file=path)`."""

from __future__ import annotations

import logging
import sys
from typing import Any

from api.app import create_app as create_api


def create_app() -> Any:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("api")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    # Strawberry logs an operation's failure (a traceback) on this logger.
    logging.getLogger("strawberry").addHandler(handler)
    return create_api()
