"""The read rule of the change chain: how far a sync may go, and what it has proven.

Every write of a tenant is one link of a chain: its log entry and the head both
record the token it replaced at the head (`prev`), and a write commits only if
the head still holds that token and the log entry at it exists (see
`api.storage.keys`). docs/ordering.md proves from DynamoDB's documented
guarantees that a sync which follows this rule never skips a change:

- The **bound** of a sync is the head's token if the sync's read saw the log
  entry at that token, else the head's `prev`. Every entry at or below the bound
  was applied before that read returned, so a later read finds it (or the newer
  version that replaced it, which has a greater token).
- Entries the same read returned count only when they are **linked**: from the
  bound down, each entry's `prev` is the next one, until `prev` reaches `since`.
  A linked run is every change between its ends, whatever order the read saw
  the items in. Anything below the run is read again, after the bound is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class TailProof:
    """What one read of the head and the newest log entries proves."""

    bound: str | None  # None: no change is provably complete yet
    linked: list[str]  # tokens of the linked run below the bound, ascending
    complete: bool  # the linked run reaches `since`: nothing else lies in (since, bound]


def prove_tail(
    head: str | None,
    head_prev: str | None,
    entries: Mapping[str, str | None],
    since: str | None,
) -> TailProof:
    """Apply the read rule to one read: the head's token and `prev`, and the log
    entries it returned above `since` (token -> that entry's `prev`)."""
    bound = head if head is not None and head in entries else head_prev
    if bound is None or (since is not None and bound <= since):
        return TailProof(bound, [], True)
    linked: list[str] = []
    token = bound
    while token in entries:
        linked.append(token)
        prev = entries[token]
        if prev is None or (since is not None and prev <= since):
            return TailProof(bound, linked[::-1], True)
        token = prev
    return TailProof(bound, linked[::-1], False)
