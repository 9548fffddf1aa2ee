"""Who sees what, priced (issue "Who sees what", contract 3.12): what a member pays
for its view in a tenant of many records it cannot see, beside today's tenant-wide
tenant in the same run.

- Reads (read units as DynamoDB Local reports them, which follow AWS's rules for
  Query and GetItem; the request log's `capacityUnits`): bob's first sync of a tenant
  of `size` records of which he sees 100 (50 tenant-wide, 50 shared with him, one in
  every `size / 100` of the log; the rest private to alice), against his first sync
  of a tenant holding just 100 tenant-wide records (issue's bound: 2x); his poll
  after alice's `changes` changes he cannot see, against his idle poll of the same
  tenant just before them (bound: 1x).
- Writes (write units by AWS's rules, from the items of the transactions the API
  sends: `writes.sent_write_units`; by the process that wrote the tenant's previous
  transaction, as the write rows' "hot"): an update of a private record against the
  same update of a tenant-wide record of a tenant-wide tenant (bound: 1.25x), and of
  a record shared with k = 1, 5 and 20 members; $ a million of them at
  `prices.WRITE_UNIT_USD`.

Every write goes through the in-process app (`Harness.local`), as alice or bob with
tokens of their own claiming the bench's visibility tenants."""

from __future__ import annotations

from typing import Any

from api.auth import make_local_token
from scripts.benchmarks.harness import CHANGES, PUSH, SECRET, Harness, realistic_person
from scripts.benchmarks.prices import READ_UNIT_USD, WRITE_UNIT_USD
from scripts.benchmarks.writes import sent_write_units

RESTRICTED, PLAIN, WRITES = "vis-restricted", "vis-plain", "vis-writes"
TENANTS = [RESTRICTED, PLAIN, WRITES]
SEEN = 100
# The restricted tenant's records and the changes bob cannot see, by mode: the
# issue's 10,000 and 1,000 but in --smoke (its figures say every row runs).
SIZES = {"smoke": (300, 100), "fast": (10_000, 1_000), "full": (10_000, 1_000)}
SHARED_WITH = (1, 5, 20)
BOUNDS = {"first sync": 2.0, "poll": 1.0, "private write": 1.25}
_ALICE, _BOB = "alice", "bob"


def measure_visibility(h: Harness, mode: str, avg_item: float) -> dict[str, Any]:
    size, changes = SIZES[mode]
    calls = _Calls(h)
    # The restricted tenant, in pushes of 100: one record in every `size / SEEN` is
    # one bob sees (tenant-wide, or shared with him, in turn), so that his are spread
    # through the log; the others are alice's private records.
    stride = size // SEEN
    entries = []
    for i in range(size):
        if i % stride == stride - 1:
            seen = i // stride
            entries.append(_create(RESTRICTED, f"b{i}", h, None if seen % 2 else [_BOB]))
        else:
            entries.append(_create(RESTRICTED, f"a{i}", h, []))
        if len(entries) == 100:
            calls.push(_ALICE, RESTRICTED, entries)
            entries = []
    calls.push(_ALICE, PLAIN, [_create(PLAIN, f"b{n}", h, None) for n in range(SEEN)])
    first = calls.first_sync(RESTRICTED)
    plain = calls.first_sync(PLAIN)
    assert first["items"] == plain["items"] == SEEN, (first, plain)
    idle = calls.poll(RESTRICTED, first["token"])
    for n in range(changes // 100):
        entries = [_create(RESTRICTED, f"c{n}-{i}", h, []) for i in range(100)]
        calls.push(_ALICE, RESTRICTED, entries)
    after = calls.poll(RESTRICTED, first["token"])
    assert after["items"] == idle["items"] == 0, (after, idle)
    reads = {
        f"first sync, sees {SEEN} of {size:,}": first,
        f"first sync, a tenant of just those {SEEN}": plain,
        f"poll after {changes:,} changes it cannot see": after,
        "idle poll, the same tenant": idle,
    }
    for row in reads.values():
        row.pop("token")
        row["usd_per_million"] = row["read_units"] * READ_UNIT_USD * 1_000_000
    return {
        "size": size,
        "seen": SEEN,
        "changes": changes,
        "reads": reads,
        "writes": _writes(h, calls, avg_item),
        "bounds": BOUNDS,
    }


def _writes(h: Harness, calls: _Calls, avg_item: float) -> dict[str, dict[str, float]]:
    """Write units of one update of alice's record, by whom it is seen."""
    person = realistic_person(h.rng, 0)
    audiences: dict[str, list[str] | None] = {"tenant-wide": None, "private": []}
    for k in SHARED_WITH:
        audiences[f"shared with {k}"] = [f"member{i}" for i in range(k)]
    result: dict[str, dict[str, float]] = {}
    for n, (name, shared) in enumerate(audiences.items()):
        tenant = PLAIN if shared is None else WRITES
        (created,) = calls.push(_ALICE, tenant, [_create(tenant, f"w{n}", h, shared, person)])
        item = created["item"]
        for state in ("before", "measured"):  # the first update after the create: warm
            update = {
                "tenantID": tenant,
                "id": item["id"],
                "changeToken": item["changeToken"],
                "changes": {"occupation": f"{state} {n}"},
            }
            variables = {"i": {"tenantID": tenant, "mutations": [{"updatePerson": update}]}}
            units, data = sent_write_units(h, variables, avg_item, h.local, calls.as_(_ALICE))
            item = data["pushChanges"]["results"][0]["item"]
        result[name] = {"write_units": units, "usd_per_million": units * WRITE_UNIT_USD * 1e6}
    return result


def _create(
    tenant: str, entity_id: str, h: Harness, shared: list[str] | None, fields: Any = None
) -> dict[str, Any]:
    person = fields or realistic_person(h.rng, 0)
    visibility = None if shared is None else {"sharedWith": shared}
    return {
        "createPerson": {
            "tenantID": tenant,
            "id": entity_id,
            "person": person,
            "visibility": visibility,
        }
    }


class _Calls:
    """alice's pushes and bob's syncs through the in-process app, with the read units
    of each request from its log line."""

    def __init__(self, h: Harness) -> None:
        self._h = h
        self._headers = {
            sub: {"Authorization": f"Bearer {make_local_token(SECRET, sub, TENANTS, 3600)}"}
            for sub in (_ALICE, _BOB)
        }

    def as_(self, sub: str) -> dict[str, str]:
        return self._headers[sub]

    def _post(self, sub: str, query: str, variables: dict[str, Any]) -> tuple[Any, float]:
        self._h.captured.clear()
        response = self._h.local.post(
            "/graphql", json={"query": query, "variables": variables}, headers=self._headers[sub]
        )
        body = response.json()
        assert "errors" not in body, body
        return body["data"], float(self._h.captured[-1]["capacityUnits"])

    def push(self, sub: str, tenant: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        data, _ = self._post(sub, PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
        results: list[dict[str, Any]] = data["pushChanges"]["results"]
        assert {r["status"] for r in results} == {"APPLIED"}, results[:2]
        return results

    def first_sync(self, tenant: str) -> dict[str, Any]:
        """bob's first sync, page by page (100 a page) to its end."""
        cursor, units, pages, items = None, 0.0, 0, 0
        while True:
            variables = {"t": tenant, "s": None, "c": cursor, "l": 100}
            data, used = self._post(_BOB, CHANGES, variables)
            page = data["changes"]
            units, pages, items = units + used, pages + 1, items + len(page["items"])
            cursor = page["cursor"]
            if cursor is None:
                token = page["changeToken"]
                return {"read_units": units, "pages": pages, "items": items, "token": token}

    def poll(self, tenant: str, since: str) -> dict[str, Any]:
        data, used = self._post(_BOB, CHANGES, {"t": tenant, "s": since, "l": 100})
        page = data["changes"]
        assert page["cursor"] is None, page
        return {"read_units": used, "pages": 1, "items": len(page["items"]), "token": since}


def print_visibility(v: dict[str, Any]) -> None:
    """The rows, each against its baseline of the same run, with the issue's bound."""
    reads = list(v["reads"].items())
    bounds = v["bounds"]
    print(f"\nwho sees what: a member seeing {v['seen']} of {v['size']:,} records")
    print(f"{'read':<48} {'units':>7} {'pages':>6} {'$/M':>7} {'ratio':>6} {'bound':>6}")
    for (name, row), (_, base), bound in (
        (reads[0], reads[1], bounds["first sync"]),
        (reads[1], reads[1], None),
        (reads[2], reads[3], bounds["poll"]),
        (reads[3], reads[3], None),
    ):
        ratio = row["read_units"] / base["read_units"]
        print(
            f"{name:<48} {row['read_units']:>7g} {row['pages']:>6} "
            f"{row['usd_per_million']:>7.3f} {ratio:>6.2f} {'' if bound is None else bound:>6}"
        )
    writes = v["writes"]
    base = writes["tenant-wide"]["write_units"]
    print(f"{'update of a record':<48} {'units':>7} {'':>6} {'$/M':>7} {'ratio':>6} {'bound':>6}")
    for name, row in writes.items():
        bound = bounds["private write"] if name == "private" else ""
        print(
            f"{name:<48} {row['write_units']:>7g} {'':>6} {row['usd_per_million']:>7.3f} "
            f"{row['write_units'] / base:>6.2f} {bound:>6}"
        )
