"""An app's upgrade to release 2: what its catch-up reads against a full re-sync of
the same tenant, in one run (docs/evolution.md).

A tenant of 10,000 people and 300 reminders is written by release 1. Release 2
(tests/apps/release2/catalog.yaml: Person.nickname, RelationshipType.COUSIN, a type Note) then
serves it: 500 Notes created and 300 nicknames set, interleaved with 5,000 other edits
of release 1's fields. An app of release 1 has synced to the end; it upgrades. Its
catch-up (`catchUp` with types [NOTE] and fields [Person.nickname], pages of 100), and
that of an app whose release 1 left out reminders (`types: [REMINDER]`), against the
only other way to get what it skipped, downloading the tenant again
(`changes(since: null)`, pages of 100 and of 1,000): read units and requests, from
DynamoDB Local's reported consumed capacity, counted at the client's calls. Prints
one table (--scale: a smaller tenant; --json: the rows as JSON, as scripts/bench
reads them). Run with scripts/bench-upgrade.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The release 2 catalog, read at import by the API's modules (api.domain.catalog).
os.environ["SYNC_CATALOG_FILE"] = str(
    Path(__file__).resolve().parents[1] / "tests" / "apps" / "release2" / "catalog.yaml"
)

from starlette.testclient import TestClient  # noqa: E402

from api.app import create_app  # noqa: E402
from api.auth import make_local_token  # noqa: E402
from api.domain.records import Record  # noqa: E402
from api.domain.tokens import next_token, token_time  # noqa: E402
from api.storage import models  # noqa: E402
from api.storage.store import DynamoStore  # noqa: E402
from scripts.benchmarks.harness import SECRET, local_engine_settings, realistic_person  # noqa: E402
from scripts.benchmarks.upgrade import (  # noqa: E402
    EDITS,
    NICKNAMES,
    NOTES,
    PEOPLE,
    REMINDERS,
    print_upgrade,
)
from tests.support import release2  # noqa: E402
from tests.support.family import REMINDER  # noqa: E402

TENANT = "upgrade"
PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) "
    "{ results { status error { code message } item { id changeToken } } } }"
)
SYNC = (
    "query($t: ID!, $c: String, $l: Int) { changes(tenantID: $t, since: null, cursor: $c, "
    "limit: $l) { items { id } cursor changeToken } }"
)
CATCH_UP = (
    "query($t: ID!, $u: ID!, $c: String) { catchUp(tenantID: $t, upTo: $u, "
    'types: [NOTE], fields: ["Person.nickname"], cursor: $c, limit: 100) '
    "{ items { id } cursor changeToken } }"
)
# An app whose release 1 left out reminders, declaring them now.
CATCH_UP_TYPE = (
    "query($t: ID!, $u: ID!, $c: String) { catchUp(tenantID: $t, upTo: $u, "
    "types: [REMINDER], cursor: $c, limit: 100) { items { id } cursor changeToken } }"
)


class Meter:
    """DynamoDB calls and the read units they consumed, from each call's answer."""

    def __init__(self) -> None:
        self.calls = 0
        self.read_units = 0.0

    def count(self, parsed: dict[str, Any] | None = None, **_: Any) -> None:
        if not parsed:
            return
        self.calls += 1
        consumed = parsed.get("ConsumedCapacity")
        for c in consumed if isinstance(consumed, list) else [consumed] if consumed else []:
            self.read_units += float(c.get("CapacityUnits") or 0)  # reads only here

    @contextmanager
    def counting(self) -> Iterator[dict[str, float]]:
        self.calls, self.read_units = 0, 0.0
        counted: dict[str, float] = {}
        yield counted
        counted.update(calls=self.calls, read_units=self.read_units)


class _Busy(RuntimeError):
    """The request as a whole answered UNAVAILABLE (retryable): a busy machine's
    DynamoDB Local outlasting the store's retries (twice in a row in the smoke run
    at load average 12-14)."""


def _post(client: TestClient, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = client.post(
        "/graphql", json={"query": query, "variables": variables}
    ).json()
    if errors := body.get("errors"):
        codes = {(e.get("extensions") or {}).get("code") for e in errors}
        raise (_Busy if codes == {"UNAVAILABLE"} else RuntimeError)(errors)
    data: dict[str, Any] = body["data"]
    return data


def _seed(client: TestClient, scale: float, rng: random.Random) -> list[str]:
    """Release 1's people (bulk-loaded), then release 2's writes, interleaved."""
    people, token, records = int(PEOPLE * scale), None, []
    for i in range(people):
        token = next_token(int(time.time() * 1000) - 60_000, token)
        fields = release2.PERSON.normalize_changes(realistic_person(rng, i))
        at = token_time(token)
        records.append(Record(release2.PERSON, TENANT, f"p{i:06d}", token, at, at, fields=fields))
    for i in range(int(REMINDERS * scale)):
        token = next_token(int(time.time() * 1000) - 60_000, token)
        at = token_time(token)
        fields = {"title": f"reminder {i}", "personID": f"p{i % people:06d}"}
        records.append(Record(REMINDER, TENANT, f"r{i:06d}", token, at, at, fields=fields))
    DynamoStore().bulk_load(TENANT, records)
    tokens = {r.id: r.change_token for r in records if r.item_type is release2.PERSON}
    writes: list[tuple[str, Any]] = [("note", i) for i in range(int(NOTES * scale))]
    writes += [("nickname", i) for i in range(int(NICKNAMES * scale))]
    writes += [("edit", i) for i in range(int(EDITS * scale))]
    rng.shuffle(writes)
    ids = list(tokens)
    nicknamed = rng.sample(ids, int(NICKNAMES * scale))
    for start in range(0, len(writes), 49):  # one transaction a push
        mutations, touched = [], []
        for kind, i in writes[start : start + 49]:
            if kind == "note":
                note = {"text": f"note {i}: remember the keys"}
                create = {"tenantID": TENANT, "id": f"n{i:06d}", "note": note}
                mutations.append({"createNote": {**create, "clientMutationID": f"n{i}"}})
                continue
            entity = nicknamed[i] if kind == "nickname" else rng.choice(ids)
            if entity in touched:
                continue  # one write of an entity a push, as an app's outbox sends
            touched.append(entity)
            changes = (
                {"nickname": f"nick {i}"} if kind == "nickname" else {"occupation": f"job {i}"}
            )
            mutations.append(
                {
                    "updatePerson": {
                        "tenantID": TENANT,
                        "id": entity,
                        "changeToken": tokens[entity],
                        "changes": changes,
                        "clientMutationID": f"{kind}{i}",
                    }
                }
            )
        _push(client, mutations, tokens)
    return ids


def _push(client: TestClient, mutations: list[dict[str, Any]], tokens: dict[str, str]) -> None:
    """One push, its UNAVAILABLE entries (a busy machine's DynamoDB Local outlasting a
    write's retries), or all of it when the push as a whole was, sent again with
    their clientMutationIDs until applied."""
    for _ in range(10):
        try:
            answer = _post(client, PUSH, {"i": {"tenantID": TENANT, "mutations": mutations}})
        except _Busy:
            continue  # all sent again: their clientMutationIDs replay what was applied
        again = []
        for mutation, result in zip(mutations, answer["pushChanges"]["results"], strict=True):
            if (result["error"] or {}).get("code") == "UNAVAILABLE":
                again.append(mutation)
                continue
            assert result["status"] == "APPLIED", result
            tokens[result["item"]["id"]] = result["item"]["changeToken"]
        if not again:
            return
        mutations = again
    raise RuntimeError("the seeding's writes stayed UNAVAILABLE")


def _pages(
    client: TestClient, query: str, variables: dict[str, Any], field: str
) -> tuple[int, int]:
    """(items, requests) of a paged read followed to its end."""
    items, requests, cursor = 0, 0, None
    while True:
        page = _post(client, query, {**variables, "c": cursor})[field]
        items, requests = items + len(page["items"]), requests + 1
        cursor = page["cursor"]
        if cursor is None:
            return items, requests


def measure(scale: float) -> dict[str, Any]:
    # On a DynamoDB Local of its own: on one holding other tenants, scripts/bench's
    # smoke seeding took 12 times longer (scripts/benchmarks/upgrade.py).
    with local_engine_settings() as settings:
        models.bind(settings)
        meter = Meter()
        DynamoStore().on_response(meter.count)
        token = make_local_token(SECRET, "bench", [TENANT], 3600)
        headers = {"Authorization": f"Bearer {token}", "X-Sync-Release": "2"}
        with TestClient(create_app(settings), headers=headers) as client:
            print("==> seeding", file=sys.stderr, flush=True)
            _seed(client, scale, random.Random(7))
            # The app of release 1 synced to the end: its token is the head's.
            head = DynamoStore().head(TENANT)
            assert head is not None
            rows: dict[str, dict[str, float]] = {}
            for label, query, variables, field in (
                ("re-sync, pages of 1,000", SYNC, {"t": TENANT, "l": 1000}, "changes"),
                ("re-sync, pages of 100", SYNC, {"t": TENANT, "l": 100}, "changes"),
                ("catch-up, pages of 100", CATCH_UP, {"t": TENANT, "u": head.token}, "catchUp"),
                (
                    "release 1's Reminder type",
                    CATCH_UP_TYPE,
                    {"t": TENANT, "u": head.token},
                    "catchUp",
                ),
            ):
                with meter.counting() as counted:
                    items, requests = _pages(client, query, variables, field)
                rows[label] = {**counted, "items": items, "requests": requests}
    counts = (("people", PEOPLE), ("reminders", REMINDERS), ("notes", NOTES))
    tenant = {name: int(n * scale) for name, n in (*counts, ("nicknames", NICKNAMES))}
    return {"tenant": {**tenant, "edits": int(EDITS * scale)}, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="of the tenant (default 1)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    result = measure(args.scale)
    if args.json:
        print(json.dumps(result))
    else:
        print_upgrade(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
