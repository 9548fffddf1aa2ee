"""The table definition (`table.json`, also read by serverless.yml) and its creation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

DEFINITION_FILE = Path(__file__).with_name("table.json")


def definition() -> dict[str, Any]:
    """The table as CloudFormation's AWS::DynamoDB::Table properties describe it."""
    return dict(json.loads(DEFINITION_FILE.read_text()))


def ensure_table(client: Any, table_name: str) -> bool:
    """Create the table (and its TTL) unless it exists; True when it was created. Idempotent."""
    table = definition()
    ttl = table.pop("TimeToLiveSpecification")
    try:
        client.create_table(TableName=table_name, **table)
        created = True
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
        created = False
    client.get_waiter("table_exists").wait(TableName=table_name)
    described = client.describe_time_to_live(TableName=table_name)["TimeToLiveDescription"]
    if described.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        client.update_time_to_live(TableName=table_name, TimeToLiveSpecification=ttl)
    return created
