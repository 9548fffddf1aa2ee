"""What a sync of chosen types reads, in pages of 100 and of 1,000, against the
whole tenant's sync: read units and DynamoDB calls as DynamoDB Local reports them
(ConsumedCapacity), the current `Reading` beside the one of an earlier commit
(`--before`, default the commit before the change that sized the scan's Queries),
same table, same run.

Tenants of 5,000 records (people of some 300-500 bytes, reminders of some 250),
the reminders at random places: 50 of them, and 1 in 3. Each sync is a first
sync (`since: null`) that follows its cursors to the end; every request is
`Reading.changes` with the whole scan allowance (one `changes` field). Run with
scripts/bench-types-paging: it prints its table, saves it as JSON in `.bench-results/`
(`--out DIR` elsewhere) and writes docs/sync.md's generated section from that JSON
(scripts/benchmarks/types_paging.py; `--page DIR` elsewhere).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from api.domain.cursor import CursorCodec
from api.domain.item_types import ItemType
from api.domain.records import Record
from api.domain.tokens import next_token, token_time
from api.service import reading
from api.settings import Settings
from api.storage import capacity, models
from api.storage.store import DynamoStore
from api.storage.table import ensure_table
from scripts.benchmarks import types_paging
from scripts.benchmarks.harness import realistic_person
from scripts.benchmarks.page import commit, machine
from scripts.local_engine import LocalEngine, free_port
from tests.support.family import PERSON, REMINDER

RECORDS = 5000
# The commit before the scan's Queries were sized (reading.py as it was).
BEFORE = "03a2085"
WHOLE = "whole tenant, pages of 1,000"
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Sync:
    read_units: float = 0.0
    requests: int = 0
    calls: int = 0
    items: int = 0


def _reminder(rng: random.Random, n: int) -> dict[str, Any]:
    return {
        "title": f"Call {rng.choice(['the dentist', 'grandma', 'the school'])} #{n}",
        "notes": "Bring the forms and the blue folder; ask about Thursday. " * 2,
        "dueAt": f"2026-12-{rng.randint(1, 28):02d}T09:30:00Z",
        "personID": f"e{rng.randrange(n + 1):06d}",
        "completed": False,
    }


def seed(tenant: str, reminders: int, count: int = RECORDS) -> None:
    """`count` records, `reminders` of them reminders at random places (the same ones
    for the same counts), the rest people."""
    rng = random.Random(f"{count}/{reminders}")
    where = set(rng.sample(range(count), reminders))
    records, token = [], None
    for i in range(count):
        token = next_token(int(time.time() * 1000) - 60_000, token)
        at = token_time(token)
        item_type, fields = (
            (REMINDER, _reminder(rng, i)) if i in where else (PERSON, realistic_person(rng, i))
        )
        normalized = item_type.normalize_changes(fields)
        records.append(Record(item_type, tenant, f"e{i:06d}", token, at, at, False, normalized))
    for start in range(0, count, 2500):
        DynamoStore().bulk_load(tenant, records[start : start + 2500])


def sync(
    reader: Any, tenant: str, limit: int, types: frozenset[ItemType] | None
) -> tuple[Sync, list[str]]:
    """One first sync followed to its end: its cost, and the ids it received."""
    total, ids, cursor = Sync(), [], None
    while True:
        with capacity.metered() as meter:
            page = reader.changes(tenant, cursor=cursor, limit=limit, types=types)
        total.read_units += meter.read_units
        total.calls += meter.calls
        total.requests += 1
        ids += [r.id for r in page.items]
        cursor = page.cursor
        if cursor is None:
            return replace(total, items=len(ids)), ids


def old_reading(rev: str) -> ModuleType:
    """api/service/reading.py as it was at `rev`, as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{rev}:api/service/reading.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    name = "bench_reading_before"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:api/service/reading.py", "exec"), module.__dict__)
    return module


@contextmanager
def table() -> Iterator[None]:
    with LocalEngine(free_port(), None) as engine:
        settings = replace(
            Settings.from_env({}),
            dynamodb_endpoint=engine.endpoint,
            table_name="bench-types",
        )
        settings.apply_local_credentials()
        ensure_table(settings.dynamodb_client(), settings.table_name)
        models.bind(settings)
        yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=BEFORE, help=f"git revision (default {BEFORE})")
    types_paging.PAGE.options(parser)
    args = parser.parse_args(argv)
    load_at_start = os.getloadavg()[0]  # the page states it (it changes no read unit)
    cursors = CursorCodec("bench-cursor-secret")
    readers = {
        "before": old_reading(args.before).Reading(DynamoStore(), cursors),
        "after": reading.Reading(DynamoStore(), cursors),
    }
    cases = [
        ("50 reminders", 50, frozenset({REMINDER})),
        ("1 in 3 reminders", RECORDS // 3, frozenset({REMINDER})),
        ("people, 50 reminders", 50, frozenset({PERSON})),
    ]
    rows: list[tuple[str, str, str, Sync, float]] = []
    seeded: set[str] = set()
    with table():
        for label, reminders, types in cases:
            tenant = f"bench-{reminders}"
            if tenant not in seeded:
                seed(tenant, reminders)
                seeded.add(tenant)
            for name, reader in readers.items():
                whole, _ = sync(reader, tenant, 1000, None)
                whole_100, _ = sync(reader, tenant, 100, None)
                page_100, ids_100 = sync(reader, tenant, 100, types)
                page_1000, ids_1000 = sync(reader, tenant, 1000, types)
                # Both page sizes deliver every record of the types, once, in order.
                count = reminders if REMINDER in types else RECORDS - reminders
                assert ids_100 == ids_1000 == sorted(ids_100), label
                assert len(set(ids_100)) == count, (label, len(set(ids_100)), count)
                rows.append((label, name, WHOLE, whole, 0.0))
                ratio = whole_100.read_units / whole.read_units
                rows.append((label, name, "whole tenant, pages of 100", whole_100, ratio))
                rows.append((label, name, "types, pages of 1,000", page_1000, 0.0))
                ratio = page_100.read_units / page_1000.read_units
                rows.append((label, name, "types, pages of 100", page_100, ratio))
    saved = result(args.before, rows, load_at_start)
    report(saved)
    types_paging.PAGE.keep(saved, args.out, args.page)
    return 0


def result(
    before: str, rows: list[tuple[str, str, str, Sync, float]], load_at_start: float
) -> dict[str, Any]:
    """The run as it is saved, printed and rendered: each tenant's syncs by each code,
    with their read units against the whole tenant's sync in pages of 1,000 and, for
    pages of 100, against the same sync in pages of 1,000."""
    wholes = {(label, name): s.read_units for label, name, what, s, _ in rows if what == WHOLE}
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": f"scripts/bench-types-paging --before {before}",
        **commit(),
        "machine": machine(load_at_start),
        "records": RECORDS,
        "before": before,
        "rows": [
            {
                "tenant": label,
                "code": name,
                "sync": what,
                **asdict(s),
                "x_whole": s.read_units / wholes[label, name],
                "per_1000": ratio or None,
            }
            for label, name, what, s, ratio in rows
        ],
    }


def report(saved: dict[str, Any]) -> None:
    """Prints a run's table from its saved JSON alone."""
    print(
        f"{'tenant of 5,000 records':<24}{'code':<8}{'sync':<30}{'items':>7}{'requests':>10}"
        f"{'DB calls':>10}{'read units':>12}{'x whole':>9}{'100/1,000':>11}"
    )
    for r in saved["rows"]:
        print(
            f"{r['tenant']:<24}{r['code']:<8}{r['sync']:<30}{r['items']:>7}{r['requests']:>10}"
            f"{r['calls']:>10}{r['read_units']:>12.1f}{r['x_whole']:>8.2f}x"
            + (f"{r['per_1000']:>10.2f}x" if r["per_1000"] else "")
        )
    print(f"(before: api/service/reading.py at {saved['before']}; after: this checkout's)")


if __name__ == "__main__":
    sys.exit(main())
