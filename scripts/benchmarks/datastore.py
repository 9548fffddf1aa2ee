"""What a write costs on AppSync for an app that syncs with Amplify DataStore: the
comparator an app leaving AppSync for this API would hold each write row to.

AppSync's bar in the all-in table (`scripts/benchmarks/cost.py`) is AppSync's request
plus *this API's* DynamoDB work. DataStore's resolvers do other DynamoDB work, each
write being (docs/benchmarks.md cites the pages):

- a write of the model's item to its table through a *versioned* data source, the
  conflict detection AppSync does for DataStore: a PutItem (create) or an UpdateItem
  (update) of the item with AppSync's versioning metadata (`_version`,
  `_lastChangedAt`) beside Amplify's own fields (`id`, `createdAt`, `updatedAt`,
  `__typename`);
- the change recorded in the Delta table (Amplify's `AmplifyDataStore` table): a
  PutItem of the item keyed by `ds_pk` (the data source's name and the date) and
  `ds_sk` (the time, the item's id and its version), with `_ttl` (DeltaSyncTableTTL,
  30 minutes as Amplify configures it, after the change);
- one AppSync request per mutation: DataStore's outbox sends its mutations one by
  one, so a queue of 100 edits is 100 requests.

Each item is built here from the bench's own record (the person the write rows
write) and sized by DynamoDB's rules (`raw.size`); its units are a standard
(non-transactional) write's, 1 per KB rounded up, an UpdateItem's of the larger of
the item before and after. The pages do not say that AppSync writes the two items
in a transaction (which would double the units): the cheaper reading is taken, in
AppSync's favour. A conflict's extra read, a model's indexes and `owner` fields are
left out, also in AppSync's favour. Prices: `scripts/benchmarks/prices.py`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from scripts.benchmarks import raw
from scripts.benchmarks.prices import APPSYNC_OPERATION_USD, per_million_ops

TYPENAME = "Person"
ID = "0b7e4a92-3c1f-4d5e-9a8b-6c2d1e0f9a37"  # a UUID, as DataStore's ids are
WHEN = "2026-11-28T09:30:00.000Z"  # AWSDateTime, as createdAt and updatedAt are stored
LAST_CHANGED_MS = 1_795_858_200_000  # _lastChangedAt: epoch milliseconds
DELTA_TTL_MINUTES = 30  # Amplify's DeltaSyncTableTTL
# The all-in rows that write: each is so many DataStore mutations of one kind.
WRITES = {
    "create": ("create", 1),
    "update": ("update", 1),
    "push of 100 updates": ("update", 100),
}


@dataclasses.dataclass(frozen=True)
class ItemWrite:
    """One DynamoDB write a DataStore mutation makes: where, how, the item's size."""

    table: str
    operation: str
    bytes: int

    @property
    def write_units(self) -> int:
        """A standard write: 1 unit per KB of the item, rounded up."""
        return max(1, math.ceil(self.bytes / 1024))


def model_item(person: dict[str, Any], version: int) -> dict[str, Any]:
    """The model's item as DataStore's resolvers keep it: Amplify's fields, the
    record's and AppSync's versioning metadata."""
    item: dict[str, Any] = {"id": {"S": ID}, "__typename": {"S": TYPENAME}}
    item |= {name: {"S": str(value)} for name, value in person.items()}
    item |= {"createdAt": {"S": WHEN}, "updatedAt": {"S": WHEN}}
    item |= {"_version": {"N": str(version)}, "_lastChangedAt": {"N": str(LAST_CHANGED_MS)}}
    return item


def delta_item(item: dict[str, Any]) -> dict[str, Any]:
    """The change as AppSync records it in the Delta table: the item, its keys there
    and when it expires."""
    date, time = WHEN[:10], WHEN[11:23]
    version = item["_version"]["N"]
    ttl = LAST_CHANGED_MS // 1000 + DELTA_TTL_MINUTES * 60
    return item | {
        "ds_pk": {"S": f"{TYPENAME}:{date}"},
        "ds_sk": {"S": f"{time}:{item['id']['S']}:{version}"},
        "_ttl": {"N": str(ttl)},
    }


def mutation_writes(kind: str, person: dict[str, Any]) -> list[ItemWrite]:
    """What one DataStore mutation of `kind` writes, `person` being the record."""
    created = model_item(person, version=1)
    if kind == "create":
        return [
            ItemWrite("model table", "PutItem", raw.size(created)),
            ItemWrite("delta table", "PutItem", raw.size(delta_item(created))),
        ]
    if kind == "update":
        edited = model_item({**person, "occupation": "job 1"}, version=2)
        return [
            ItemWrite("model table", "UpdateItem", max(raw.size(created), raw.size(edited))),
            ItemWrite("delta table", "PutItem", raw.size(delta_item(edited))),
        ]
    raise ValueError(kind)


def comparator(operation: str, person: dict[str, Any]) -> dict[str, Any] | None:
    """AppSync with DataStore's own DynamoDB writes, for one all-in row: None for a
    row that does not write. Dollars per million operations."""
    if operation not in WRITES:
        return None
    kind, mutations = WRITES[operation]
    writes = mutation_writes(kind, person)
    write_units = mutations * sum(w.write_units for w in writes)
    appsync = round(mutations * APPSYNC_OPERATION_USD * 1_000_000, 6)
    dynamodb = per_million_ops(0, write_units)
    return {
        "mutations": mutations,
        "writes": [dataclasses.asdict(w) | {"write_units": w.write_units} for w in writes],
        "read_units": 0,
        "write_units": write_units,
        "appsync_usd": appsync,
        "dynamodb_usd": dynamodb,
        "total": appsync + dynamodb,
    }


def describe(found: dict[str, Any]) -> str:
    """One mutation's writes, as the tables' notes say them."""
    return " + ".join(
        f"{w['operation']} in the {w['table']} ({w['bytes']} bytes, {w['write_units']} unit"
        f"{'s' if w['write_units'] > 1 else ''})"
        for w in found["writes"]
    )


def verdicts(ops: dict[str, Any]) -> list[str]:
    """Which operations cost less than AppSync and which do not: a row that writes
    against AppSync with DataStore's own writes (what an app leaving AppSync pays
    there), a read against AppSync with the same DynamoDB work."""
    cheaper: list[str] = []
    dearer: list[str] = []
    for name, c in ops.items():
        found = c.get("appsync_datastore")
        appsync = found["total"] if found else c["appsync"]
        (cheaper if c["total"] < appsync else dearer).append(
            f"{name} ({c['total']:.2f} against {appsync:.2f}, {appsync / c['total']:.2f}x)"
        )
    return [
        "cheaper than AppSync: " + ("; ".join(cheaper) or "none"),
        "not cheaper than AppSync: " + ("; ".join(dearer) or "none"),
    ]
