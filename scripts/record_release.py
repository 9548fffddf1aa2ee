"""scripts/record-release: records the catalog's newest release (releases/N.json and
its schema, releases/N.graphql) when the catalog declares one not yet recorded, and
refuses when the change would break a recorded release (docs/evolution.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from api.domain import releases
from api.domain.item_types import ItemType
from scripts.evolution_check import run
from scripts.evolution_report import Report
from scripts.release_record import SCHEMA_FILE, Record, app_repo, entry_of, shown


def record_release(
    record: Record, declared: tuple[ItemType, ...], sdl: str, repo: Path | None
) -> tuple[Report, list[Path]]:
    """(what refused it, the files written): the newest release recorded only when
    what it adds is all that keeps the check from passing."""
    newest = releases.latest(declared)
    last = record.last()
    if newest <= last:
        report = run(record, declared, sdl, repo)
        if report.ok:
            report.notes.append(f"release {newest} is already recorded: nothing to record")
        return report, []
    # The check as if the release were recorded: its refusals, but for "not recorded".
    report = run(record, declared, sdl, repo)
    blocking = {k: v for k, v in report.problems.items() if k[0] != "unrecorded"}
    if blocking:
        report.problems = blocking
        return report, []
    written = record.write(entry_of(declared, newest), sdl)
    return run(record, declared, sdl, repo), written


def main() -> int:
    from api.domain import catalog
    from api.graphql.schema import default_schema

    sdl = SCHEMA_FILE.read_text()
    if sdl.strip() != default_schema().as_str().strip():
        print("record-release: schema.graphql is out of date: run scripts/export-schema first")
        return 1
    report, written = record_release(Record(), catalog.ALL_TYPES, sdl, app_repo())
    if report.problems:
        print("record-release: refused, the change would break a recorded release")
        print(report.text())
        return 1
    if report.notes:
        print(report.text())
    for path in written:
        print(f"wrote {shown(path)}")
    if written:
        print(
            "commit the releases/ folder beside the app's catalog with the catalog change "
            "(recorded releases are append-only)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
