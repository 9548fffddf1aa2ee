"""A tenant of many people, loaded with the store's own item layout (BatchWriteItem)."""

from __future__ import annotations

import time

from api.domain.catalog import PERSON
from api.domain.records import Record
from api.domain.tokens import next_token, token_time
from api.storage.store import DynamoStore


def bulk_people(tenant: str, count: int) -> list[Record]:
    token, records = None, []
    for i in range(count):
        token = next_token(int(time.time() * 1000) - 60_000, token)
        at = token_time(token)
        fields = {"givenName": f"given {i}", "familyName": "family", "occupation": "o" * 200}
        records.append(Record(PERSON, tenant, f"p{i:06d}", token, at, at, False, fields))
    for start in range(0, count, 5000):
        DynamoStore().bulk_load(tenant, records[start : start + 5000])
    return records
