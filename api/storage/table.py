"""The table definition (`table.json`, also read by serverless.yml) and its creation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

DEFINITION_FILE = Path(__file__).with_name("table.json")


def definition() -> dict[str, Any]:
    return dict(json.loads(DEFINITION_FILE.read_text()))


def ensure_table(client: Any, table_name: str) -> bool:
    """Create the table unless it exists; True when it was created. Idempotent."""
    try:
        client.create_table(TableName=table_name, **definition())
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
        return False
    client.get_waiter("table_exists").wait(TableName=table_name)
    return True
