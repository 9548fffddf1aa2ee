"""A sync of a tenant with restricted records (docs/ordering.md, "Who sees what"):
the caller's stream read beside the main log, the bound both prove, and the pages
that merge them by token; and the check of a sync's `since` against the log's tail."""

from __future__ import annotations

from api.domain.chain import Head, split_stream_key
from api.domain.errors import BadUserInput, TenantDeleted
from api.domain.records import LogTail, Record
from api.domain.tokens import token_before
from api.domain.visibility import principals_of


def principal_of(sub: str) -> str:
    """The one stream a caller reads (a member's own; groups will add theirs)."""
    (principal,) = principals_of(sub)
    return principal


def after_life(after: str | None, born: str | None) -> str | None:
    """Where a stream Query starts: after `after`, and never below the tenant's first
    token `born` (its streams may still hold entries of a deleted life of the tenant
    id, which a deletion does not sweep yet; their tokens are below `born`)."""
    if born is None:
        return after
    floor = token_before(born)
    return floor if after is None or after < floor else after


def stream_bound(
    head: Head, bound: str | None, stream: list[Record], principal: str, after: str | None
) -> str | None:
    """The sync's bound once its stream Query returned `stream`: the head's token only
    if the main log proved it (`bound`) and every entry the head's transaction put
    in the caller's stream above `after` was returned; else None (the head's `prev`
    bounds it)."""
    if bound != head.token:
        return bound
    owed = {
        token
        for token, p in map(split_stream_key, head.stream_put)
        if p == principal and (after is None or token > after)
    }
    returned = {r.change_token for r in stream}
    return bound if owed <= returned else None


def merged(
    main: list[Record],
    main_more: bool,
    stream: list[Record],
    stream_more: bool,
    limit: int,
) -> tuple[list[Record], bool]:
    """One page from both partitions read from the same position up to the same
    bound, ascending: by token, the stream's entry in place of the main log's at
    the same token (a restricted record's version beside the sentinel the rest of
    the tenant gets), up to where both were read (a partition cut by its Limit was
    read up to its last entry), at most `limit`; and whether more follow."""
    edges = [p[-1].change_token for p, more in ((main, main_more), (stream, stream_more)) if more]
    edge = min(edges) if edges else None
    by_token = {r.change_token: r for r in main}
    by_token.update({r.change_token: r for r in stream})
    items = [by_token[t] for t in sorted(by_token) if edge is None or t <= edge]
    return items[:limit], edge is not None or len(items) > limit


def check_since(tail: LogTail, since: str) -> None:
    """A `since` the tenant cannot have given: from before its deletion, or newer
    than its every change (a sync and a subscription refuse it alike)."""
    if tail.head is None:
        # Its tokens are gone: deleted (contract 3.8), or never written.
        raise TenantDeleted(
            "this tenant holds no changes: drop your copy and sync with since: null"
        )
    if tail.born is not None and since < tail.born:
        raise TenantDeleted(
            "since is from before this tenant was deleted: drop your copy and sync with since: null"
        )
    if since > tail.head:
        raise BadUserInput(
            "since is newer than every change of this tenant; sync again with since: null"
        )
