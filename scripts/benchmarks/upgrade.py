"""The upgrade row (scripts/bench_upgrade.py, run in a process of its own: it serves
the release 2 catalog, read at import): its table, and the run that fills it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from api.settings import PROJECT_ROOT

# A tenant of PEOPLE and REMINDERS written by release 1, then NOTES, NICKNAMES and
# EDITS by release 2.
PEOPLE, REMINDERS, NOTES, NICKNAMES, EDITS = 10_000, 300, 500, 300, 5_000
# --smoke: a fiftieth of it (200 people, 10 notes, 6 nicknames, 100 edits).
SMOKE_SCALE = 0.02


def measure_upgrade(mode: str) -> dict[str, Any]:
    """The upgrade rows of a run of scripts/bench_upgrade (smoke: its smallest), on a
    DynamoDB Local of its own. Not the run's engine, which holds its other tenants:
    there, the smoke run's seeding of 200 people and 116 writes took 264 s against
    24 s on an engine of its own (a thread dump caught DynamoDB Local's one SQLite
    thread in its stream's `getStreamDescription`; not traced further), and the full
    run's bulk load of 10,000 people outlasted production's 5 s timeout a batch on a
    loaded 2-core machine."""
    scale = ["--scale", str(SMOKE_SCALE)] if mode == "smoke" else []
    answer = subprocess.run(
        [sys.executable, "-m", "scripts.bench_upgrade", "--json", *scale],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
    )
    if answer.returncode != 0:
        raise RuntimeError(f"scripts/bench_upgrade failed:\n{answer.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(answer.stdout.strip().splitlines()[-1])
    return result


def print_upgrade(result: dict[str, Any]) -> None:
    rows, tenant = result["rows"], result["tenant"]
    baseline = rows["re-sync, pages of 1,000"]["read_units"]
    print(
        f"\nupgrade to release 2: {tenant['people']} people"
        + (f", {tenant['reminders']} reminders" if "reminders" in tenant else "")
        + "; release 2 wrote "
        f"{tenant['notes']} notes, {tenant['nicknames']} nicknames, {tenant['edits']} other edits"
    )
    print(f"{'':<26}{'items':>7}{'requests':>10}{'read units':>12}{'x re-sync':>11}")
    for label, row in rows.items():
        print(
            f"{label:<26}{row['items']:>7.0f}{row['requests']:>10.0f}"
            f"{row['read_units']:>12.1f}{row['read_units'] / baseline:>11.3f}"
        )
