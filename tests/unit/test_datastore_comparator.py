"""The all-in table holds every write to AppSync as an app leaving it pays there:
AppSync's request per DataStore mutation plus the DynamoDB writes DataStore's
conflict-detection resolvers make (a versioned write of the model's item and a put
in the Delta table), each item built from the bench's record and sized by
DynamoDB's rules (scripts/benchmarks/datastore.py); and the page says which
operations cost less than AppSync and which do not."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from scripts.benchmarks import datastore, page
from scripts.benchmarks.cost import ROWS, price
from scripts.benchmarks.prices import APPSYNC_OPERATION_USD, WRITE_UNIT_USD
from scripts.benchmarks.raw import size
from scripts.benchmarks.writes import units_person

M = 1_000_000


def _units(item: dict[str, Any]) -> int:
    return math.ceil(size(item) / 1024)


def test_every_write_row_is_compared_with_datastores_own_writes_item_by_item() -> None:
    person = units_person()
    writes = {name for name, row in ROWS.items() if not row.startswith("changes:")}
    assert writes == {"create", "update", "push of 100 updates"} == set(datastore.WRITES)
    for name in ROWS:
        found = datastore.comparator(name, person)
        if name not in writes:
            assert found is None, name  # a read: AppSync's bar is today's alone
            continue
        assert found is not None
        kind, mutations = datastore.WRITES[name]
        # What AppSync's versioned data source writes: the model's item with its
        # versioning metadata, and the change in the Delta table under its keys.
        created = datastore.model_item(person, version=1)
        edited = datastore.model_item({**person, "occupation": "job 1"}, version=2)
        written = created if kind == "create" else edited
        delta = datastore.delta_item(written)
        assert {"_version", "_lastChangedAt", "createdAt", "updatedAt"} <= set(written)
        assert {"ds_pk", "ds_sk", "_ttl"} <= set(delta) and set(written) < set(delta)
        assert delta["ds_sk"]["S"].endswith(f":{written['id']['S']}:{written['_version']['N']}")
        model = max(_units(created), _units(edited)) if kind == "update" else _units(created)
        per_mutation = model + _units(delta)
        assert [w["write_units"] for w in found["writes"]] == [model, _units(delta)]
        assert found["mutations"] == mutations  # DataStore sends its mutations one by one
        assert found["write_units"] == mutations * per_mutation
        assert found["read_units"] == 0
        usd = mutations * APPSYNC_OPERATION_USD * M + found["write_units"] * WRITE_UNIT_USD * M
        assert found["total"] == pytest.approx(usd)
    # The bench's person (some 300 bytes): 1 unit each item, $5.25 a million updates.
    update = datastore.comparator("update", person)
    assert update is not None and update["write_units"] == 2
    assert update["total"] == pytest.approx(5.25)


def test_the_comparator_follows_the_record_not_a_total_typed_in() -> None:
    """A record of some 1.3 KB makes each item two units: four a mutation."""
    bigger = units_person() | {"notes": "x" * 1000}
    for name in ("create", "update"):
        found = datastore.comparator(name, bigger)
        assert found is not None
        assert [w["write_units"] for w in found["writes"]] == [2, 2], name
        assert found["total"] == pytest.approx(4.00 + 4 * 0.625), name
    push = datastore.comparator("push of 100 updates", bigger)
    assert push is not None and push["write_units"] == 400
    assert push["total"] == pytest.approx(100 * (4.00 + 4 * 0.625))


def test_the_page_sets_each_write_beside_datastores_and_says_which_cost_less() -> None:
    saved = json.loads((page.DOCS / page.FOLDER / page.JSON_NAME).read_text())
    person = units_person()
    # This API's side as the all-in table prices it: units as the bench's rows give them.
    units = {
        "poll, no changes": (7.0, 1, 0),
        "page of 100": (24.0, 10, 0),
        "create": (18.0, 0, 6),
        "update": (22.3, 1, 10),
        "push of 100 updates": (777.0, 100, 810),
    }
    operations: dict[str, dict[str, Any]] = {}
    for name, (ms, reads, writes) in units.items():
        priced: dict[str, Any] = dict(price(ms, 1.0, reads, writes, log_bytes=600))
        operations[name] = priced | {"appsync_datastore": datastore.comparator(name, person)}
    saved["cost"]["operations"] = operations
    text = page.section(saved)
    assert "| AppSync + DataStore's own writes | its / total |" in text
    update = operations["update"]
    assert f"| {update['crossover_ms']:.0f} | 5.25 | {5.25 / update['total']:.2f} |" in text
    poll = next(line for line in text.splitlines() if line.startswith("| poll, no changes |"))
    assert poll.endswith("|  |  |")  # a read: no DataStore comparator
    cheaper = next(line for line in text.splitlines() if line.startswith("- Cheaper than"))
    dearer = next(line for line in text.splitlines() if line.startswith("- Not cheaper than"))
    assert "poll, no changes (" in cheaper and "page of 100 (" in cheaper
    assert f"update ({update['total']:.2f} against 5.25, " in dearer
    assert "push of 100 updates (" in dearer and "create (" in dearer
    # What each DataStore mutation writes, said under the table of every run.
    assert "DataStore, update: 1 AppSync request, each: UpdateItem in the model table (" in text
    assert "DataStore, push of 100 updates: 100 AppSync requests" in text
