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
    """Create the table (with its TTL and stream) unless it exists; True when it was
    created. Idempotent; adds the stream to a table made before it had one."""
    table = definition()
    ttl = table.pop("TimeToLiveSpecification")
    # CloudFormation's StreamSpecification has no StreamEnabled; the API's needs it.
    stream = {"StreamEnabled": True, **table.pop("StreamSpecification")}
    try:
        client.create_table(TableName=table_name, StreamSpecification=stream, **table)
        created = True
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
        created = False
    client.get_waiter("table_exists").wait(TableName=table_name)
    if not created:
        described = client.describe_table(TableName=table_name)["Table"]
        if not described.get("StreamSpecification", {}).get("StreamEnabled"):
            client.update_table(TableName=table_name, StreamSpecification=stream)
    described = client.describe_time_to_live(TableName=table_name)["TimeToLiveDescription"]
    if described.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        client.update_time_to_live(TableName=table_name, TimeToLiveSpecification=ttl)
    return created
