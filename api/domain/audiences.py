"""Who a change pokes (docs/realtime.md, "Who is poked"): the principals of the
members whose view it changed, from what its transaction wrote where."""

from __future__ import annotations

from collections.abc import Iterable

from api.domain.chain import NO_MAIN, Head, split_stream_key
from api.domain.visibility import is_group, principals_of

# The principals (`api.domain.visibility`) of the streams a change wrote in, or None:
# every member (it wrote an entry of the tenant's main log).
Audience = frozenset[str] | None

# In an audience: whose changes are not told (a catch-up's head token, after pokes
# that may have been missed): each subscription checks its own view, one read.
UNTOLD: frozenset[str] = frozenset({"?"})


def merged(first: Audience, second: Audience) -> Audience:
    """The audience of two changes told as one poke: whoever either is for."""
    return None if first is None or second is None else first | second


def coalesced(one: tuple[str, Audience], other: tuple[str, Audience]) -> tuple[str, Audience]:
    """Two changes told as one poke (a stream batch's heads of a tenant, a relay's
    pending poke): the newer token, for the newer change's audience. A member the
    older change was for, and the newer not, is never handed the newer token (a
    change outside its view, whose time it tells): the poke is UNTOLD for it, and
    its subscription reads its own view first (as a catch-up's)."""
    (_, older), (token, newer) = sorted((one, other), key=lambda poke: poke[0])
    if newer is None or (older is not None and older <= newer):
        return token, newer
    return token, newer | UNTOLD


def in_audience(sub: str, audience: Audience) -> bool:
    """Whether a poke for `audience` is for the member `sub` (through any of its
    principals: its own stream's)."""
    return audience is None or not audience.isdisjoint(principals_of(sub))


def head_audience(head: Head) -> Audience:
    """Whose view the head's transaction changed: every member's when it wrote an
    entry of the tenant's main log (a tenant-wide record's version, or the sentinel
    every member gets) or the tenant never had a restricted record; else the
    principals of the streams it put entries in (`vp`: a restricted record's
    version, its deletion, a LeftView; `of_principals`)."""
    if not head.restricted:
        return None  # a tenant whose records every member sees: as before
    if any(token != NO_MAIN for token in head.main_entry_tokens()):
        return None
    return of_principals(split_stream_key(key)[1] for key in head.stream_put)


def of_principals(principals: Iterable[str]) -> Audience:
    """The audience of changes to the streams of `principals`: with UNTOLD when one
    is a group's (who is in a group is the roster's: each subscription checks its
    own view, as for a catch-up's, and one of a member of the group finds it)."""
    audience = frozenset(principals)
    return audience | UNTOLD if any(map(is_group, audience)) else audience


def catch_up_audience(head: Head) -> Audience:
    """Whom a catch-up's head token pokes: the head transaction's audience, and the
    others UNTOLD (the changes before it, that pokes may have missed, are not on the
    head)."""
    audience = head_audience(head)
    return None if audience is None else audience | UNTOLD
