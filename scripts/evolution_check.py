"""scripts/check's check of the catalog's evolution (docs/evolution.md): fails when
the code would break a client or a server of a release that shipped.

Three sources, three parts:
- the catalog (api.domain.catalog) against every recorded release (releases/N.json):
  what GraphQL cannot see, type codes, constraints (maxLength, a String become a
  Color) and the release each type, field and enum value belongs to (since);
- schema.graphql against every recorded release's schema (releases/N.graphql), with
  graphql-core's find_schema_changes;
- the record against every version of it committed before (git log): recorded
  releases are append-only, so regenerating the record cannot make a break pass.

Breaking changes never pass. Additions (a type, a field, an enum value) pass once
the release that adds them is recorded (scripts/record-release).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from graphql import build_schema
from graphql.utilities import (
    BreakingChangeType,
    DangerousChangeType,
    SafeChangeType,
    find_schema_changes,
)

from api.domain import releases
from api.domain.item_types import ItemType
from scripts.evolution_report import Report
from scripts.record_history import check_history
from scripts.release_record import ROOT, SCHEMA_FILE, Record, app_repo, entry_of, flatten

# The catalog's kinds a String or an ID would narrow to (their values are strings
# too, but fewer of them): item_types' normalizers.
_NARROWER = {"Color", "Date", "Time", "Enum", "ID"}
_GRAPHQL_ADVICE = {
    BreakingChangeType.FIELD_REMOVED: "removed",
    BreakingChangeType.TYPE_REMOVED: "removed",
    BreakingChangeType.VALUE_REMOVED_FROM_ENUM: "removed",
    BreakingChangeType.REQUIRED_ARG_ADDED: "required",
    BreakingChangeType.REQUIRED_INPUT_FIELD_ADDED: "required",
    BreakingChangeType.FIELD_CHANGED_KIND: "kind",
    BreakingChangeType.ARG_CHANGED_KIND: "kind",
    BreakingChangeType.TYPE_CHANGED_KIND: "kind",
}
# Building a schema from its text is most of the check's time (some 40 ms idle): the
# recorded ones are built once per process.
_schema = functools.lru_cache(maxsize=16)(build_schema)
_DANGEROUS = tuple(t.name for t in DangerousChangeType)
# Safe changes that add nothing a client can meet (graphql-core 3.3's SafeChangeType).
_QUIET = {
    SafeChangeType.DESCRIPTION_CHANGED,
    SafeChangeType.FIELD_CHANGED_KIND_SAFE,
    SafeChangeType.ARG_CHANGED_KIND_SAFE,
    SafeChangeType.ARG_DEFAULT_VALUE_ADDED,
    SafeChangeType.INPUT_FIELD_DEFAULT_VALUE_ADDED,
}


def check_catalog(report: Report, record: Record, declared: tuple[ItemType, ...]) -> None:
    """The catalog against every recorded release; then whether its newest is recorded."""
    numbers = record.numbers()
    last = record.last()
    newest = releases.latest(declared)
    report.next_release = last + 1
    if not numbers:
        report.add("unrecorded", f"no release is recorded in {_shown(record.folder)}")
        return
    for missing in sorted(set(range(1, last + 1)) - set(numbers)):
        report.add("rewritten", f"release {missing} is missing from {_shown(record.folder)}")
    whole = flatten(entry_of(declared, max(newest, last)))
    for number in numbers:
        _compare(report, number, flatten(record.entry(number)), entry_of(declared, number), whole)
    _check_codes(report, record, declared)
    if newest > last + 1:
        report.add(
            "moved",
            f"the catalog declares release {newest}, the newest recorded is {last}: "
            "a release is numbered the one after the newest recorded",
        )
    if newest > last:
        added = sorted(set(whole) - set(flatten(record.entry(last))), key=_by_kind)
        report.add("unrecorded", f"release {newest} is not recorded; it adds {', '.join(added)}")


def _by_kind(key: str) -> tuple[int, str]:
    return (("type", "field", "enum").index(key.split(" ")[0]), key)


def catalog_recorded(record: Record, declared: tuple[ItemType, ...]) -> bool:
    """Whether the catalog is the record's last release (a wider maxLength aside)."""
    last = record.last()
    return bool(last) and releases.latest(declared) == last


def _compare(
    report: Report,
    number: int,
    recorded: dict[str, dict[str, Any]],
    code_entry: dict[str, Any],
    whole: dict[str, dict[str, Any]],
) -> None:
    code = flatten(code_entry)
    gone_types = {k.split(" ", 1)[1] for k in recorded if k.startswith("type ") and k not in code}
    for key, was in recorded.items():
        now = code.get(key)
        if now is None:
            if key in whole:
                report.add(
                    "moved",
                    f"{key}, recorded in release {number}, is now declared "
                    f"since={whole[key]['since']}",
                    number,
                )
            elif key.startswith("field ") and key[6:].split(".")[0] in gone_types:
                continue  # its type's removal says it
            else:
                report.add(
                    "removed",
                    f"{key} was removed or renamed{_renamed(key, code, recorded)}",
                    number,
                )
            continue
        if was.get("code") != now.get("code"):
            report.add("code", f"{key}'s code changed from {was['code']} to {now['code']}", number)
        if was.get("since") != now.get("since"):
            report.add(
                "moved",
                f"{key}: recorded since={was['since']}, now declared since={now['since']}",
                number,
            )
        if "kind" in was:
            _compare_field(report, number, key, was, now)
    for key in sorted(set(code) - set(recorded)):
        report.add(
            "moved",
            f"{key} is declared in release {number} (since={code[key]['since']}), which was "
            "recorded without it",
            number,
        )


def _compare_field(
    report: Report, number: int, key: str, was: dict[str, Any], now: dict[str, Any]
) -> None:
    """A recorded field (or an object's sub-field, `key` naming it) against the code:
    a changed kind, item kind or enum, a narrower bound, a sub-field removed or added
    are refused; a wider bound is noted (docs/evolution.md)."""
    if was["kind"] != now["kind"]:
        narrowed = was["kind"] in ("String", "ID") and now["kind"] in _NARROWER
        report.add(
            "narrowed" if narrowed else "kind",
            f"{key}: a {was['kind']} became a{'n' if now['kind'][0] in 'AEIO' else ''} "
            f"{now['kind']}" + (" (a narrower constraint)" if narrowed else " (kind changed)"),
            number,
        )
    elif was.get("of") != now.get("of"):
        report.add(
            "kind", f"{key}: a List of {was.get('of')} became a List of {now.get('of')}", number
        )
    elif was.get("enum") != now.get("enum"):
        report.add(
            "kind", f"{key}: its enum changed from {was.get('enum')} to {now.get('enum')}", number
        )
    elif was.get("type") != now.get("type"):
        report.add(
            "kind",
            f"{key}: a Ref to {was.get('type')} became a Ref to {now.get('type')}",
            number,
        )
    else:
        for bound, wider in _BOUNDS.items():
            _compare_bound(report, number, key, bound, was.get(bound), now.get(bound), wider)
        _compare_subfields(report, number, key, was.get("fields", []), now.get("fields", []))


# A bound -> whether a value is wider than another (None: no bound, the widest).
_BOUNDS = {
    "maxLength": lambda new, old: (new or 0) > (old or 0),
    "maxItems": lambda new, old: new > old,
    "maximum": lambda new, old: new is None or (old is not None and new > old),
    "minimum": lambda new, old: new is None or (old is not None and new < old),
}


def _compare_bound(
    report: Report, number: int, key: str, bound: str, was: Any, now: Any, wider: Any
) -> None:
    if was == now:
        return
    if not wider(now, was):
        report.add("narrowed", f"{key}: {bound} narrowed from {was} to {now}", number)
        return
    note = f"{key}: {bound} widened from {was} to {now} (allowed; recorded with the next release)"
    if note not in report.notes:
        report.notes.append(note)


def _compare_subfields(
    report: Report, number: int, key: str, was: list[Any], now: list[Any]
) -> None:
    """An object's sub-fields: each recorded one kept, with its kind and bounds, and
    none added (an app of the recorded release writes the whole object without it)."""
    code = {sub["name"]: sub for sub in now}
    recorded = {sub["name"] for sub in was}
    for sub in was:
        if sub["name"] not in code:
            report.add("removed", f"{key}.{sub['name']} was removed or renamed", number)
        else:
            _compare_field(report, number, f"{key}.{sub['name']}", sub, code[sub["name"]])
    for name in [n for n in code if n not in recorded]:
        report.add(
            "kind",
            f"{key}: sub-field {name} was added (an app of release {number} replaces the "
            "whole object without it)",
            number,
        )


def _renamed(key: str, code: dict[str, Any], recorded: dict[str, Any]) -> str:
    """` (is it X?)` when the code has exactly one new entry of the same kind and owner."""
    owner = key.rsplit(".", 1)[0] + "." if "." in key else "type "
    new = [k for k in code if k.startswith(owner) and k not in recorded]
    return f" (is it {new[0].rsplit(' ', 1)[-1]}?)" if len(new) == 1 else ""


def _check_codes(report: Report, record: Record, declared: tuple[ItemType, ...]) -> None:
    """A code recorded for one type is never another type's, in any release."""
    recorded: dict[str, str] = {}
    for number in record.numbers():
        for item_type in record.entry(number)["types"]:
            recorded.setdefault(item_type["code"], item_type["name"])
    given: dict[str, str] = {}
    for item_type in declared:
        if item_type.code in given:
            report.add(
                "code",
                f"code {item_type.code} is given to both {given[item_type.code]} and "
                f"{item_type.name}",
            )
        given[item_type.code] = item_type.name
        owner = recorded.get(item_type.code)
        if owner is not None and owner != item_type.name:
            report.add(
                "code",
                f"code {item_type.code}, recorded for type {owner}, is reused by type "
                f"{item_type.name}",
            )


def check_schema(report: Report, record: Record, current_sdl: str, recorded: bool) -> None:
    """schema.graphql against each recorded release's schema (graphql-core's
    find_schema_changes): a breaking change against any fails; an addition against the
    newest (an enum value, a type, a field, an optional argument) fails until the
    catalog's newest release is recorded."""
    current = _schema(current_sdl)
    numbers = record.numbers()
    additions: list[str] = []
    for number in numbers:
        sdl = record.sdl(number)
        if sdl is None:
            report.add("rewritten", f"releases/{number}.graphql is missing", number)
            continue
        for change in find_schema_changes(_schema(sdl), current):
            what = f"{change.type.name}: {change.description.rstrip('.')}"
            if isinstance(change.type, BreakingChangeType):
                report.add(_GRAPHQL_ADVICE.get(change.type, "schema"), f"schema: {what}", number)
            elif number == numbers[-1] and change.type not in _QUIET:
                additions.append(what)
    if additions:
        # Dangerous ones first (an enum value a client's switch lacks), then the rest.
        additions.sort(key=lambda what: not what.startswith(_DANGEROUS))
        shown = "; ".join(additions[:4]) + ("; ..." if len(additions) > 4 else "")
        what = f"schema.graphql adds {len(additions)} elements to release {numbers[-1]}'s: {shown}"
        if recorded:
            report.notes.append(f"{what} (outside the catalog: they pass)")
        else:
            report.add("unrecorded", what)


def run(
    record: Record,
    declared: tuple[ItemType, ...],
    current_sdl: str,
    repo: Path | None,
) -> Report:
    """Every part of the check; `repo`: the git checkout whose history holds the record."""
    report = Report()
    check_catalog(report, record, declared)
    check_schema(report, record, current_sdl, catalog_recorded(record, declared))
    if repo is not None:
        check_history(report, record, repo)
    return report


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) + "/" if path.is_relative_to(ROOT) else str(path)


def main() -> int:
    from api.domain import catalog

    report = run(Record(), catalog.ALL_TYPES, SCHEMA_FILE.read_text(), app_repo())
    report.notes.extend(catalog.APP.warnings)  # types whose bounds pass a record's
    if report.ok:
        if report.notes:
            print(report.text())
        last = Record().last()
        print(f"catalog evolution: the catalog and schema.graphql keep releases 1 to {last}")
        return 0
    print("catalog evolution: refused against the recorded releases (docs/evolution.md)")
    print(report.text())
    return 1


if __name__ == "__main__":
    sys.exit(main())
