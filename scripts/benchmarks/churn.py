"""A churned tenant's first sync (contract 3.6): 1,000 live people among 20,000
deleted ones (a reminders app after some months), against a tenant of the same
1,000 people and no deletions, the minimum; and what history and deletions cost
to store."""

from __future__ import annotations

import random
import time
from typing import Any

from api.domain.records import Record
from api.domain.retention import DEFAULT_RETENTION_S
from api.domain.tokens import next_token, token_time
from api.storage.store import DynamoStore
from scripts.benchmarks.harness import CHANGES, Harness, realistic_person
from scripts.benchmarks.scale import sync_in_process
from tests.support.family import PERSON

# DynamoDB Standard storage, us-east-1, per GB-month (the first 25 GB are free).
STORAGE_GB_MONTH_USD = 0.25
# Bytes DynamoDB adds to each item's size for storage.
ITEM_OVERHEAD_BYTES = 100


def measure_churn(h: Harness) -> dict[str, Any]:
    # (A smoke run's are a fifth of --fast's: the rows' shape, not their figures.)
    live, deleted = (40, 800) if h.smoke else (200, 4_000) if h.fast else (1_000, 20_000)
    rng = random.Random(11)
    people = [PERSON.normalize_changes(realistic_person(rng, i)) for i in range(live)]
    kinds = [True] * deleted + [False] * live
    rng.shuffle(kinds)
    _load("churn", kinds, people)
    _load("churn-min", [False] * live, people)
    rows: dict[str, Any] = {name: _first_sync(h, name) for name in ("churn-min", "churn")}
    return {**rows, "live": live, "deleted": deleted}


def _load(tenant: str, deleted: list[bool], people: list[dict[str, Any]]) -> None:
    token, records, living = None, [], iter(people)
    for i, gone in enumerate(deleted):
        token = next_token(int(time.time() * 1000) - 60_000, token)
        at = token_time(token)
        fields = {} if gone else next(living)
        records.append(Record(PERSON, tenant, f"c{i:06d}", token, at, at, gone, fields))
    for start in range(0, len(records), 5000):
        DynamoStore().bulk_load(tenant, records[start : start + 5000])


def _first_sync(h: Harness, tenant: str) -> dict[str, Any]:
    started = time.perf_counter()
    items = pages = 0
    cursor = None
    while True:
        data = h.post(h.clients[0], CHANGES, {"t": tenant, "l": 1000, "c": cursor})["changes"]
        items += len(data["items"])
        pages += 1
        cursor = data["cursor"]
        if cursor is None:
            break
    seconds = time.perf_counter() - started
    units, _, calls = sync_in_process(h, {"t": tenant, "l": 1000})
    return {"seconds": seconds, "items": items, "pages": pages, "read_units": units, "calls": calls}


def print_churn(c: dict[str, Any], avg_item: float) -> None:
    print()
    print(f"first sync of {c['live']:,} live people among {c['deleted']:,} deleted ones")
    base = c["churn-min"]
    for name, label in (("churn-min", "no deletions (minimum)"), ("churn", "churned")):
        r = c[name]
        print(
            f"  {label:<24}{r['seconds']:>7.2f} s ({r['seconds'] / base['seconds']:.2f}x)"
            f"{r['items']:>8,} items{r['pages']:>4} pages{r['read_units']:>8.0f} read units "
            f"({r['read_units'] / base['read_units']:.1f}x){r['calls']:>5} Queries"
        )
    days = DEFAULT_RETENTION_S / 86400
    entity = 2 * (avg_item + ITEM_OVERHEAD_BYTES)  # the entity and its log entry
    for edits_per_day in (1, 10):
        kept = edits_per_day * days * (avg_item + ITEM_OVERHEAD_BYTES)
        usd = (entity + kept) / 1e9 * STORAGE_GB_MONTH_USD * 12
        print(
            f"  storage of a live person edited {edits_per_day}x a day: {entity / 1000:.1f} KB "
            f"+ {kept / 1000:.0f} KB of {days:.0f} days' history = ${usd:.5f} a year"
        )
