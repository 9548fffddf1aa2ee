"""The second example's page (issue "An app's own data model"): a first sync's page of
100 task-tracker records at their kinds' bounds beside the family app's page of 100
people, in the same run: bytes and p50 as ratios to the family page's. The measuring
is scripts/bench_app_pages.py's (`measure`: a server per app on the bench's DynamoDB
Local, a tenant of 100 records each, the page asked `rounds` times)."""

from __future__ import annotations

from typing import Any

from api.settings import DEFAULT_CATALOG_FILE, Settings
from scripts import bench_app_pages as measured

ROUNDS = {"smoke": 2, "fast": 40, "full": 100}
FAMILY = f"family: {measured.RECORDS} people"
TASKS = f"tasks: {measured.RECORDS} tasks at the kinds' bounds"


def measure_app_pages(settings: Settings, mode: str) -> dict[str, Any]:
    rounds = ROUNDS[mode]
    family = measured.measure(settings, str(DEFAULT_CATALOG_FILE), "Person", rounds)
    tasks = measured.measure(settings, str(measured.TASKS), "Task", rounds)
    rows = {FAMILY: family, TASKS: tasks}
    for row in rows.values():
        row["bytes_ratio"] = row["bytes"] / family["bytes"]
        row["p50_ratio"] = row["p50"] / family["p50"]
    return {"rounds": rounds, "records": measured.RECORDS, "pages": rows}


def print_app_pages(a: dict[str, Any]) -> None:
    print(f"\neach example app's first-sync page (limit {a['records']}), {a['rounds']} rounds")
    print(f"{'page':<44} {'bytes':>9} {'p50 ms':>8} {'p95 ms':>8} {'bytes ×':>8} {'p50 ×':>6}")
    for name, row in a["pages"].items():
        print(
            f"{name:<44} {row['bytes']:>9,} {row['p50']:>8.1f} {row['p95']:>8.1f} "
            f"{row['bytes_ratio']:>8.2f} {row['p50_ratio']:>6.2f}"
        )
