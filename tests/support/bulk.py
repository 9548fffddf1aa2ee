"""A tenant of many people, loaded with the store's own item layout (BatchWriteItem)."""

from __future__ import annotations

import random
import time

from api.domain.records import Record
from api.domain.tokens import next_token, token_time
from api.storage.store import DynamoStore
from tests.support.family import PERSON, REMINDER


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


def bulk_deletions_and_reminders(
    tenant: str, deletions: int, reminders: int, chars: int = 7000
) -> list[Record]:
    """`deletions` deleted people (what a first sync skips, yet reads), then
    `reminders` reminders whose notes are `chars` random Cyrillic letters (2 bytes
    each in UTF-8: some 14 KB at 7,000, which gzip keeps about half of)."""
    rng = random.Random(7)
    token, records = None, []
    for i in range(deletions + reminders):
        token = next_token(int(time.time() * 1000) - 60_000, token)
        at = token_time(token)
        if i < deletions:
            records.append(Record(PERSON, tenant, f"d{i:06d}", token, at, at, True, {}))
        else:
            notes = "".join(chr(0x400 + rng.randrange(64)) for _ in range(chars))
            fields = {"title": f"r{i}", "notes": notes}
            records.append(Record(REMINDER, tenant, f"r{i:06d}", token, at, at, False, fields))
    for start in range(0, len(records), 5000):
        DynamoStore().bulk_load(tenant, records[start : start + 5000])
    return records
