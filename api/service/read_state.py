"""What the reads of one `changes` request prove (`api.service.reading`)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_LIMIT = 1000


@dataclass
class Reads:
    """What the reads of one `changes` request prove, checked once the last returned
    (`Reading._settle`): the deletions its pages still owe the device, and whether
    it read the log with a cursor."""

    # Every deletion in (owed_low, upper] is the request's to deliver, and each was
    # written at or after owed_ms (None: it owes none that TTL may remove).
    owed_low: str | None = None
    owed_ms: int = 0
    from_cursor: bool = False
    # The cursor's upper bound, when a Query followed a cursor (its own or one this
    # request made): a head when the sync began; and the tenant's first token then.
    upper: str | None = None
    born: str | None = None
    # The caller (None: not known, it sees tenant-wide records only).
    sub: str | None = None
    # The sync reads the caller's streams beside the main log (every cursor says so).
    streams: bool = False
    limit: int = MAX_LIMIT  # the request's: a re-read's page holds at most this many
    # The request came with a cursor: the groups its sync re-reads were decided by the
    # sync's first request, whose bound is the cursor's `upper`.
    continued: bool = False
    # The caller's Member version its sync's first request's viewer reflected (every
    # cursor of a sync with streams says so; None: not known, an earlier cursor's).
    viewed: str | None = None

    def owe(self, low: str, upper: str, low_ms: int, from_cursor: bool) -> None:
        # The first range a request reads is its lowest: later ones continue above it.
        if self.owed_low is None and low < upper:
            self.owed_low, self.owed_ms, self.from_cursor = low, low_ms, from_cursor
