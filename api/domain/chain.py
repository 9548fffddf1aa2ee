"""The read rule of the change chain: how far a sync may go, and what it has proven.

Every transaction of a tenant is one link of a chain: it writes one or more
entities, each with a log entry at its own token (consecutive tokens, in push
order); each entry records the token before it (`prev`: the previous entry of
the same transaction, or for its first entry the head it replaced), and the head
records the transaction's last token, the head it replaced (`prev`) and how many
entries the transaction wrote. A transaction commits only if the head still
holds what it expects and every log entry of the previous transaction is applied
(see `api.storage.keys`). docs/ordering.md proves from DynamoDB's documented
guarantees that a sync which follows this rule never skips a change:

- The **bound** of a sync is the head's token if the sync's read returned every
  entry of the head's transaction (linked from the head's token down to the
  head's `prev`, or down to `since`), else the head's `prev`. Every entry at or
  below the bound was applied before that read returned, so a later read finds
  it (or the newer version that replaced it, which has a greater token).
- Entries the same read returned count only when they are **linked**: from the
  bound down, each entry's `prev` is the next one, until `prev` reaches `since`.
  A linked run is every change between its ends, whatever order the read saw
  the items in. Anything below the run is read again, after the bound is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from api.domain.errors import WriteContention
from api.domain.tokens import tokens_ending_at


@dataclass(frozen=True)
class Head:
    """A tenant's head: the last token of its latest transaction, and how many log
    entries that transaction wrote (at consecutive tokens ending at `token`)."""

    token: str
    entries: int = 1
    # The log entries the transaction's updates and deletes removed (each entity's
    # previous entry): the next transaction checks they are gone, so that a first
    # sync may leave deletions out (docs/ordering.md, Lemma 2').
    removed: tuple[str, ...] = ()
    # The tenant's first token (None: written before it was kept): a token below it
    # is from before the tenant was deleted (contract 3.8). Not part of a head's
    # identity in the chain.
    born: str | None = field(default=None, compare=False)
    # The later copies (docs/evolution.md) the transaction put and removed, by their
    # sort keys: the next transaction checks them as it checks `removed`.
    later_put: tuple[str, ...] = ()
    later_removed: tuple[str, ...] = ()
    # Whether every live entity of the tenant has its copy: its first transaction
    # was written with them (False: a tenant from before they were kept, whose
    # catch-up reads the log). Not part of a head's identity in the chain.
    copies: bool = field(default=False, compare=False)
    # Who sees what (docs/ordering.md, "Who sees what"). Whether the tenant has (had)
    # a restricted record: its syncs read the caller's stream too. Not part of a
    # head's identity in the chain.
    restricted: bool = field(default=False, compare=False)
    # The transaction's tokens that have a main log entry (None: all of them); the
    # last main token at or below `token` (None: `token`) and the last one before
    # the transaction (None: the head's `prev`).
    main_tokens: tuple[str, ...] | None = None
    last_main: str | None = None
    prev_main: str | None = None
    # The stream entries the transaction put and removed (`keys.stream_key`): the
    # next transaction checks them as it checks the main entries.
    stream_put: tuple[str, ...] = ()
    stream_removed: tuple[str, ...] = ()

    def entry_tokens(self) -> list[str]:
        """The tokens the head's transaction wrote (each has a main log entry, a
        stream entry, or both)."""
        return tokens_ending_at(self.token, self.entries)

    def main_entry_tokens(self) -> list[str]:
        """The tokens of the main log entries the head's transaction wrote."""
        if self.main_tokens is None:
            return self.entry_tokens()
        return [token for token in self.main_tokens if token != NO_MAIN]

    @property
    def main_token(self) -> str:
        """The last token with a main log entry, at or below the head's."""
        return self.last_main or self.token


def stream_key(token: str, principal: str) -> str:
    """A stream entry as a head lists it (a token holds no `#`)."""
    return f"{token}#{principal}"


def split_stream_key(key: str) -> tuple[str, str]:
    """The token and principal of a stream entry as a head lists it."""
    token, principal = key.split("#", 1)
    return token, principal


# A head's `last_main` when no transaction of the tenant wrote a main log entry yet.
NO_MAIN = "0"


@dataclass(frozen=True)
class Streams:
    """What a transaction takes from the head it follows about who sees what: the
    tenant's flag, the head's last main token (None: the head's own, or no head),
    and the stream entries the head's transaction put and removed that this one
    checks (none when this process wrote it)."""

    restricted: bool = False
    main: str | None = None
    check: tuple[str, ...] = ()
    gone: tuple[str, ...] = ()

    @property
    def items(self) -> int:
        return len(self.check) + len(self.gone)


NO_STREAMS = Streams()


class StaleHead(WriteContention):
    """The tenant's head is not the one the write expected; retry after the real one
    (None: the tenant has no head yet)."""

    def __init__(self, head: Head | None, fence: str | None = None) -> None:
        super().__init__(f"head is at {head}" if fence is None else f"fence is at {fence}")
        self.head = head
        # With no head: the tenant id's fence, the highest token a deleted life of it
        # had, which the tenant's first token must exceed (contract 3.8).
        self.fence = fence


@dataclass(frozen=True)
class TailProof:
    """What one read of the head and the newest log entries proves."""

    bound: str | None  # None: no change is provably complete yet
    linked: list[str]  # tokens of the linked run below the bound, ascending
    complete: bool  # the linked run reaches `since`: nothing else lies in (since, bound]


def _linked_run(
    top: str, entries: Mapping[str, str | None], stop: str | None, since: str | None
) -> tuple[list[str], bool]:
    """The entries linked by `prev` from `top` down, ascending, and whether the run
    reaches `stop` (an entry whose `prev` is `stop`, absent, or at or below `since`)."""
    linked: list[str] = []
    token = top
    while token in entries:
        linked.append(token)
        prev = entries[token]
        if prev == stop or prev is None or (since is not None and prev <= since):
            return linked[::-1], True
        token = prev
    return linked[::-1], False


def prove_tail(
    head: str | None,
    head_prev: str | None,
    entries: Mapping[str, str | None],
    since: str | None,
    main_top: str | None = None,
    main_below: str | None = None,
) -> TailProof:
    """Apply the read rule to one read: the head's token and `prev`, and the log
    entries it returned above `since` (token -> that entry's `prev`). In a tenant
    with restricted records (docs/ordering.md, "Who sees what") the main log is its
    own chain: `main_top` is the head's last main token (None: the head's token) and
    `main_below` the last one before its transaction (None: `head_prev`); the head's
    transaction wrote main entries when they differ."""
    top = head if main_top is None else main_top
    below = head_prev if main_below is None else main_below
    # Every main entry of the head's transaction above `since`: linked from its last
    # one down to the last before it (or to `since`); none when it wrote none.
    wrote_none = top == below or top == NO_MAIN  # the transaction wrote no main entry
    proven = head is not None and (wrote_none or _linked_run(top or "", entries, below, since)[1])
    bound = head if proven else head_prev
    if bound is None or (since is not None and bound <= since):
        return TailProof(bound, [], True)
    run_top = top if proven else below
    if run_top is None or run_top == NO_MAIN or (since is not None and run_top <= since):
        return TailProof(bound, [], True)
    linked, complete = _linked_run(run_top, entries, None, since)
    return TailProof(bound, linked, complete)
