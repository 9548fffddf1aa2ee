"""A sync of a tenant with restricted records (docs/ordering.md, "Who sees what"):
the caller's streams (its own, its groups') read beside the main log, the bound they
prove, and the pages that merge them by token; and the check of a sync's `since`
against the log's tail."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from api.domain import catalog
from api.domain.chain import Head, split_stream_key
from api.domain.cursor import NO_VERSION
from api.domain.errors import BadUserInput, TenantDeleted
from api.domain.membership import Viewer, history_of
from api.domain.records import LogTail, Record
from api.domain.tokens import token_before
from api.domain.visibility import is_group, principals_of
from api.service.ports import Page

StreamRange = Callable[[str, str, str | None, str, int], tuple[list[Record], bool]]


def read_streams(
    stream_range: StreamRange,
    tenant_id: str,
    sub: str,
    after: str | None,
    upper: str,
    limit: int,
) -> tuple[list[Record], str | None]:
    """The caller's streams (`principals_of`: its own, each of its groups') read with
    one Query each from `after` up to `upper`, merged by token up to where every one
    was read (a stream cut by its Limit was read up to its last entry); at one token
    a version wins over a sentinel (one write puts its version in every stream of
    its audience). And where the streams were read up to, when more follow (None:
    all of them to `upper`): an entry left out may be the last one read."""
    by_token: dict[str, Record] = {}
    edges: list[str] = []
    for principal in principals_of(sub):
        history = history_of(sub, principal[len("g:") :]) if is_group(principal) else None
        items, more = stream_range(tenant_id, principal, after, upper, limit)
        if more and items:
            edges.append(items[-1].change_token)
        for record in items:
            gone = record.left_view or record.deleted
            if gone and history and not history.seen(True, after or "", record.change_token):
                # Left the group, or deleted, while the caller was out of it from
                # `after` up to then: not its to see, but where the Query reached
                # (`shown` leaves it out of a page).
                record = replace(record, superseded=record.change_token)
            held = by_token.get(record.change_token)
            if held is None or held.left_view and not record.left_view:
                by_token[record.change_token] = record
    edge = min(edges) if edges else None
    merged_ = [by_token[t] for t in sorted(by_token) if edge is None or t <= edge]
    return merged_, edge


def after_life(after: str | None, born: str | None) -> str | None:
    """Where a stream Query starts: after `after`, and never below the tenant's first
    token `born` (its streams may still hold entries of a deleted life of the tenant
    id, which a deletion does not sweep yet; their tokens are below `born`)."""
    if born is None:
        return after
    floor = token_before(born)
    return floor if after is None or after < floor else after


def shown(items: list[Record]) -> list[Record]:
    """A page's items but the group's entries a later write superseded, and those the
    caller never saw through the group (`read_streams`): the page's position and
    cursor are where the reads reached (docs/ordering.md, "Groups")."""
    return [r for r in items if r.superseded is None]


def stream_bound(
    head: Head,
    bound: str | None,
    stream: list[Record],
    principals: Collection[str],
    after: str | None,
) -> str | None:
    """The sync's bound once its stream Queries returned `stream`: the head's token
    only if the main log proved it (`bound`) and every entry the head's transaction
    put in the caller's streams (`principals`) above `after` was returned; else None
    (the head's `prev` bounds it)."""
    if bound != head.token:
        return bound
    owed = {
        token
        for token, p in map(split_stream_key, head.stream_put)
        if p in principals and (after is None or token > after)
    }
    returned = {r.change_token for r in stream}
    return bound if owed <= returned else None


def merged(
    main: list[Record],
    main_more: bool,
    stream: list[Record],
    stream_edge: str | None,
    limit: int,
) -> tuple[list[Record], bool]:
    """One page from both partitions read from the same position up to the same
    bound, ascending: by token, the stream's entry in place of the main log's at
    the same token (a restricted record's version beside the sentinel the rest of
    the tenant gets), up to where both were read (a partition cut by its Limit was
    read up to its last entry; the streams' `stream_edge`), at most `limit`; and
    whether more follow."""
    edges = [main[-1].change_token] if main_more else []
    edges += [stream_edge] if stream_edge is not None else []
    edge = min(edges) if edges else None
    by_token = {r.change_token: r for r in main}
    # A marker (`Record.marks`) is its version's stand-in only where the main log no
    # longer holds that version's entry.
    by_token.update(
        (r.change_token, r) for r in stream if not (r.marks and r.change_token in by_token)
    )
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


def viewed_by(sub: str | None) -> str | None:
    """What a sync's cursors carry of the caller its first request's access read found
    (`Position.viewed`): the token of the Member version it reflects (NO_VERSION:
    none); None for a caller not read from access (it sees tenant-wide records only)."""
    if not isinstance(sub, Viewer):
        return None
    return sub.token or NO_VERSION


def own_cut(
    page: Page,
    sub: str | None,
    since: str | None,
    above: str | None = None,
    viewed: str | None = None,
) -> Page:
    """`page` up to the first version of the caller's own Member record that its
    viewer `sub` (the request's access read) does not reflect: one written after
    that read, or whose access item is not yet applied. The sync's view is the
    viewer's (its groups, its role), so the device's token must not pass that
    version: the page ends before it, and the next request reads access again
    (docs/ordering.md, "Groups"). The groups a sync re-reads were decided by its
    first request, so a page of a continued sync also ends before any version above
    `viewed` (the one that request's viewer reflected, its cursor's) and above `above`
    (its cursor's `upper`, the head when it began: for a cursor that does not carry
    `viewed`), whatever this request's viewer reflects; the next sync re-reads what
    that version moved. A join's or a leave's marker in the caller's stream
    (`Record.marks`) is such a version: it stays where a later write of the record
    took the version's entry out of the main log."""
    if not isinstance(sub, Viewer):
        return page
    for index, record in enumerate(page.items):
        if record.item_type.code != catalog.MEMBER.code or record.id != str(sub):
            continue
        token = record.change_token
        newer = above is not None and token > above or viewed is not None and token > viewed
        if not newer and sub.token is not None and token <= sub.token:
            continue
        before = token_before(token)
        # Before the tenant's first change, a first sync is still one.
        first = since is None and page.born is not None and before < page.born
        cut = None if first else before
        return replace(page, items=page.items[:index], cursor=None, change_token=cut)
    return page
