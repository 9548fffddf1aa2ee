"""Eventually consistent reads served stale, which DynamoDB Local never does.

AWS: an eventually consistent read "might not reflect the results of a recently
completed write operation" ("Read consistency", Amazon DynamoDB Developer Guide);
a strongly consistent read "returns a result that reflects all writes that
received a successful response prior to the read". DynamoDB Local answers every
read from the one copy it has, so a test that depends on the difference must
make it: `StaleQueries` is a `before-send` hook that answers a Query of a frozen
partition without `ConsistentRead` from a copy taken at `freeze`, as a replica
that has not yet applied the later writes would. A consistent Query goes through.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.awsrequest import AWSResponse

from tests.support.faults import dynamodb_answer


class StaleQueries:
    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client  # one without this hook: it reads the real table
        self._table = table_name
        self._frozen: dict[str, list[dict[str, Any]]] = {}
        self.served = 0  # stale answers given

    def freeze(self, pk: str) -> None:
        """From now on, eventually consistent Queries of `pk` see it as it is now."""
        items = self._client.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
            ConsistentRead=True,
        )["Items"]
        self._frozen[pk] = items

    def __call__(self, request: Any = None, **_: Any) -> AWSResponse | None:
        body = json.loads(request.body or b"{}")
        pk = body.get("ExpressionAttributeValues", {}).get(":pk", {}).get("S")
        if body.get("ConsistentRead") or pk not in self._frozen:
            return None
        self.served += 1
        items = self._frozen[pk]
        return dynamodb_answer({"Items": items, "Count": len(items), "ScannedCount": len(items)})
