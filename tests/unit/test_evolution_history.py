"""Recorded releases are append-only (scripts/record_history.py): the record is
compared with every version of it committed before, so regenerating it from a
changed catalog cannot make a break pass."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

from api.domain import catalog, releases
from api.domain.item_types import ItemType
from scripts.evolution_check import run
from scripts.evolution_report import ADVICE
from scripts.release_record import SCHEMA_FILE, Record, entry_of
from tests.support import family

SDL = SCHEMA_FILE.read_text()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def _narrowed() -> tuple[ItemType, ...]:
    """The product's catalog with Person.givenName's maxLength lowered to 100."""
    person = replace(
        family.PERSON,
        fields=tuple(
            replace(f, max_length=100) if f.name == "givenName" else f for f in family.PERSON.fields
        ),
    )
    return tuple(person if t is family.PERSON else t for t in catalog.DECLARED)


def _write(record: Record, declared: tuple[ItemType, ...]) -> None:
    """Record every release of `declared` (the product's catalog: as many as it has)."""
    for number in range(1, releases.latest(declared) + 1):
        record.write(entry_of(declared, number), SDL)


def test_a_rewritten_or_removed_recorded_release_is_refused(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    record = Record(tmp_path / "releases")
    _write(record, catalog.DECLARED)
    _git(tmp_path, "add", "releases")
    _git(tmp_path, "commit", "-q", "-m", "release 1")
    assert run(record, catalog.DECLARED, SDL, tmp_path).ok

    # The catalog narrowed, and the record regenerated from it: the catalog now
    # agrees with the record, the history does not.
    narrowed = _narrowed()
    _write(record, narrowed)
    assert run(record, narrowed, SDL, repo=None).ok
    report = run(record, narrowed, SDL, tmp_path)
    text = report.text()
    assert not report.ok
    assert "releases/1.json, as committed in " in text
    assert "field Person.givenName was changed (maxLength 200 -> 100)" in text
    assert ADVICE["rewritten"] in text
    # Committing the rewrite does not help: the earlier commit still holds release 1.
    _git(tmp_path, "commit", "-q", "-am", "release 1 again")
    assert not run(record, narrowed, SDL, tmp_path).ok

    (record.folder / "1.graphql").unlink()
    text = run(record, narrowed, SDL, tmp_path).text()
    assert "releases/1.graphql, as committed in " in text and "was removed" in text


def test_without_history_the_check_says_so(tmp_path: Path) -> None:
    record = Record(tmp_path / "releases")
    _write(record, catalog.DECLARED)
    report = run(record, catalog.DECLARED, SDL, tmp_path)
    assert report.ok
    assert "not a git checkout: the record's history was not checked" in report.notes


def test_a_shallow_clone_is_checked_as_far_as_it_goes(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    _git(origin, "init", "-q")
    record = Record(origin / "releases")
    _write(record, catalog.DECLARED)
    _git(origin, "add", "releases")
    _git(origin, "commit", "-q", "-m", "release 1")
    (origin / "other").write_text("x")
    _git(origin, "add", "other")
    _git(origin, "commit", "-q", "-m", "other")
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{origin}", str(clone))
    cloned = Record(clone / "releases")
    entry = json.loads((cloned.folder / "1.json").read_text())
    entry["types"][0]["fields"][0]["maxLength"] = 100
    (cloned.folder / "1.json").write_text(json.dumps(entry))
    report = run(cloned, _narrowed(), SDL, clone)
    assert any("shallow clone" in note for note in report.notes)
    # Its one commit holds the record as it was: the rewrite is still seen.
    assert "field Person.givenName was changed" in report.text()


def test_a_release_rewritten_as_its_folder_moved_is_refused(tmp_path: Path) -> None:
    """A record moved to another folder (the family app's, from the root releases/ to
    examples/family/releases/) keeps its history: a version committed before the
    move binds, even when the move's own commit rewrote it."""
    _git(tmp_path, "init", "-q")
    _write(Record(tmp_path / "releases"), catalog.DECLARED)
    _git(tmp_path, "add", "releases")
    _git(tmp_path, "commit", "-q", "-m", "release 1, at the root")
    (tmp_path / "app").mkdir()
    _git(tmp_path, "mv", "releases", "app/releases")
    moved = Record(tmp_path / "app" / "releases")
    narrowed = _narrowed()
    _write(moved, narrowed)
    _git(tmp_path, "commit", "-q", "-am", "the record moves, rewritten from a narrowed catalog")
    report = run(moved, narrowed, SDL, tmp_path)
    assert not report.ok
    text = report.text()
    assert "app/releases/1.json, as committed in " in text
    assert "field Person.givenName was changed (maxLength 200 -> 100)" in text
