"""Pending local edits, squashed per entity (pure rules, no I/O).

An entry not yet sent can still absorb later edits of its entity. Once sent, an
entry is frozen: a retry must repeat it exactly (same clientMutationID, same
input), so later edits queue behind it in a new entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

Verb = Literal["create", "update", "delete"]


@dataclass(frozen=True)
class Entry:
    seq: int
    entity_id: str
    type_name: str
    verb: Verb
    changes: dict[str, Any] = field(default_factory=dict)
    # The token the edit is based on; None for a create, or for an edit queued
    # behind an entry still in flight (it takes that entry's resulting token).
    base_token: str | None = None
    base_fields: dict[str, Any] = field(default_factory=dict)  # the version edited, for rebase
    client_mutation_id: str | None = None  # set when first sent, kept for retries
    sent: bool = False


def squash(pending: Entry | None, verb: Verb, changes: dict[str, Any]) -> tuple[Entry | None, bool]:
    """Fold a new edit into the entity's last unsent entry.

    Returns the entry that replaces `pending` (None: both cancel out) and whether
    the edit was absorbed; when not absorbed, the caller appends a new entry.
    """
    if pending is None or pending.sent:
        return pending, False
    if verb == "delete":
        if pending.verb == "create":
            return None, True  # never reached the server: nothing to delete there
        return replace(pending, verb="delete", changes={}), True
    if pending.verb == "delete":
        raise ValueError(f"{pending.entity_id} is deleted locally")
    return replace(pending, changes={**pending.changes, **changes}), True
