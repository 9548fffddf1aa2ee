"""The client's pure rules: squashing the outbox and rebasing after a conflict."""

from __future__ import annotations

import pytest
from sync_client.outbox import Entry, Verb, squash
from sync_client.rebase import rebase


def _entry(verb: Verb, changes: dict[str, object] | None = None, sent: bool = False) -> Entry:
    return Entry(
        1, "p1", "Person", verb, dict(changes or {}), "T1", {}, "m" if sent else None, sent
    )


def test_updates_fold_into_one_with_later_values_winning() -> None:
    folded, absorbed = squash(_entry("update", {"a": 1, "b": 2}), "update", {"b": 3, "c": None})
    assert absorbed and folded is not None
    assert folded.changes == {"a": 1, "b": 3, "c": None}  # explicit null kept: it clears


def test_an_update_folds_into_a_pending_create() -> None:
    folded, absorbed = squash(_entry("create", {"a": 1}), "update", {"b": 2})
    assert absorbed and folded is not None and folded.verb == "create"
    assert folded.changes == {"a": 1, "b": 2}


def test_a_delete_cancels_an_unsent_create_and_replaces_an_update() -> None:
    assert squash(_entry("create", {"a": 1}), "delete", {}) == (None, True)
    folded, absorbed = squash(_entry("update", {"a": 1}), "delete", {})
    assert absorbed and folded is not None and folded.verb == "delete" and folded.changes == {}


def test_a_sent_entry_is_frozen() -> None:
    sent = _entry("update", {"a": 1}, sent=True)
    assert squash(sent, "update", {"a": 2}) == (sent, False)
    assert squash(None, "update", {"a": 2}) == (None, False)


def test_nothing_folds_into_a_delete() -> None:
    with pytest.raises(ValueError):
        squash(_entry("delete"), "update", {"a": 1})


def test_rebase_keeps_only_changes_the_server_did_not_also_make() -> None:
    base = {"givenName": "Ann", "familyName": "Lee", "occupation": "pilot"}
    current = {"givenName": "Anna", "familyName": "Lee", "occupation": "pilot"}
    local = {"givenName": "Annie", "familyName": "Kim", "occupation": "pilot"}
    # givenName: both changed, server wins; familyName: only local; occupation: no change.
    assert rebase(base, current, local) == {"familyName": "Kim"}


def test_rebase_of_a_clear() -> None:
    base = {"occupation": "pilot"}
    assert rebase(base, base, {"occupation": None}) == {"occupation": None}
    assert rebase(base, {}, {"occupation": None}) == {}  # the server cleared it too
